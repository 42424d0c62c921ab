package gateway

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/sim/simengine"
	"github.com/llmgw/llmgw/testkit/nodejs"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// simModel is the model the sim-engine harness serves.
const simModel = "qwen/coder-3b"

// simGateway is a gateway in front of a real sim engine, for the official
// clients: the engine answers chat completions (tool calls included)
// and the gateway translates.
type simGateway struct {
	url     string
	records chan request.Record
	gw      *Gateway
}

func newSimGateway(t *testing.T, deps Deps) *simGateway {
	t.Helper()
	eng, err := simengine.New(simengine.Config{ServedModelName: simModel, EOSAfter: 5}, nil)
	if err != nil {
		t.Fatal(err)
	}
	es := httptest.NewServer(eng.Handler())
	t.Cleanup(es.Close)
	rt := router.New()
	rt.SetEndpoints(simModel, []router.Endpoint{{ReplicaID: "sim", URL: es.URL, Weight: 1}})
	s := &simGateway{records: make(chan request.Record, 256)}
	if deps.Catalog == nil {
		deps.Catalog = testModels
	}
	if deps.Auth == nil {
		deps.Auth = testAuth{}
	}
	deps.Routes = rt
	if deps.Observer == nil {
		deps.Observer = ObserverFunc(func(r request.Record) { s.records <- r })
	}
	s.gw = New(Config{}, deps)
	srv := httptest.NewServer(s.gw.Handler())
	t.Cleanup(func() { srv.Close(); s.gw.Close() })
	s.url = srv.URL
	return s
}

// TestAnthropicSDK runs the official @anthropic-ai/sdk, unmodified,
// against /v1/messages: a message, a stream, a tool round trip, an error.
func TestAnthropicSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Node.js")
	}
	dir := nodejs.Install(t, nodejs.Anthropic)
	st := contentStore(t, 24)
	s := newSimGateway(t, Deps{Content: st})
	out := nodejs.Run(t, filepath.Join("testdata", "anthropic-messages.cjs"),
		"SDK_DIR="+dir, "BASE_URL="+s.url, "API_KEY="+testKey, "MODEL=coder")
	t.Logf("%s", out)
	var got struct {
		Plain struct {
			Type, Role, StopReason string
			Content                []map[string]any
			Usage                  struct{ InputTokens, OutputTokens int } `json:"usage"`
		} `json:"plain"`
		Events   []string `json:"events"`
		Streamed struct {
			Text       string           `json:"text"`
			Content    []map[string]any `json:"content"`
			StopReason string           `json:"stop_reason"`
			Usage      struct {
				InputTokens  int `json:"input_tokens"`
				OutputTokens int `json:"output_tokens"`
			} `json:"usage"`
		} `json:"streamed"`
		ToolCall struct {
			StopReason string `json:"stop_reason"`
			ToolUse    struct {
				ID, Name string
				Input    map[string]any
			} `json:"tool_use"`
		} `json:"tool_call"`
		ToolAnswer struct {
			StopReason string           `json:"stop_reason"`
			Content    []map[string]any `json:"content"`
		} `json:"tool_answer"`
		Error struct {
			Status int    `json:"status"`
			Type   string `json:"type"`
		} `json:"error"`
		Thread struct{ First, Second string } `json:"thread"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node printed %q: %v", out, err)
	}
	// The thread holds both turns and both answers.
	if th, err := st.GetThread(t.Context(), "proj", "sdk-thread", time.Now()); err != nil {
		t.Errorf("the SDK's thread: %v", err)
	} else {
		var msgs []map[string]any
		_ = json.Unmarshal(th.Messages, &msgs)
		if contents(msgs) != "user:my name is Ada | assistant:"+got.Thread.First+" | user:what is my name? | assistant:"+got.Thread.Second {
			t.Errorf("the SDK's thread holds %s (answers %+v)", contents(msgs), got.Thread)
		}
	}
	if got.Plain.Type != "message" || got.Plain.Role != "assistant" || len(got.Plain.Content) != 1 || got.Plain.Content[0]["type"] != "text" {
		t.Errorf("plain message: %+v", got.Plain)
	}
	wantEvents := []string{"message_start", "content_block_start", "content_block_delta"}
	if len(got.Events) < 6 || !equalPrefix(got.Events, wantEvents) ||
		!equalPrefix(got.Events[len(got.Events)-3:], []string{"content_block_stop", "message_delta", "message_stop"}) {
		t.Errorf("stream events %v", got.Events)
	}
	if got.Streamed.Text == "" || got.Streamed.Usage.InputTokens == 0 || got.Streamed.Usage.OutputTokens == 0 {
		t.Errorf("streamed message: %+v", got.Streamed)
	}
	if got.ToolCall.StopReason != "tool_use" || got.ToolCall.ToolUse.Name != "get_weather" || got.ToolCall.ToolUse.ID == "" || got.ToolCall.ToolUse.Input == nil {
		t.Errorf("tool call: %+v", got.ToolCall)
	}
	if got.ToolAnswer.StopReason == "tool_use" || len(got.ToolAnswer.Content) == 0 || got.ToolAnswer.Content[0]["type"] != "text" {
		t.Errorf("answer after the tool result: %+v", got.ToolAnswer)
	}
	if got.Error.Status != 404 || got.Error.Type != "not_found_error" {
		t.Errorf("unknown model: %+v", got.Error)
	}
}

func equalPrefix(got, want []string) bool {
	if len(got) < len(want) {
		return false
	}
	for i := range want {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// contentStore is a SQLite store whose project "proj" (testAuth's) keeps
// conversations for hours (0: off).
func contentStore(t *testing.T, hours int) store.Store {
	t.Helper()
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), "llmgw.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.CreateProject(t.Context(), store.Project{Name: "proj"}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetRetention(t.Context(), "proj", store.ContentThreads, hours); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestOpenAINodeResponses runs the official openai npm package,
// unmodified, against /v1/responses: a response, a stream, a second turn
// through previous_response_id, a function call round trip, retrieve and
// delete.
func TestOpenAINodeResponses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Node.js")
	}
	dir := nodejs.Install(t, nodejs.OpenAI)
	s := newSimGateway(t, Deps{Content: contentStore(t, 24)})
	out := nodejs.Run(t, filepath.Join("testdata", "openai-responses.cjs"),
		"SDK_DIR="+dir, "BASE_URL="+s.url+"/v1", "API_KEY="+testKey, "MODEL=coder")
	t.Logf("%s", out)
	var got struct {
		First struct {
			ID, Status string
			OutputText string `json:"output_text"`
			Store      bool
			Usage      struct {
				InputTokens  int `json:"input_tokens"`
				OutputTokens int `json:"output_tokens"`
				TotalTokens  int `json:"total_tokens"`
			}
		}
		Events   []string
		Streamed struct {
			Text       string
			OutputText string `json:"output_text"`
			Usage      *struct {
				OutputTokens int `json:"output_tokens"`
			}
		}
		Second struct {
			PreviousResponseID string `json:"previous_response_id"`
			Status             string
			Usage              struct {
				InputTokens int `json:"input_tokens"`
			}
		}
		Call struct {
			OutputTypes []string `json:"output_types"`
			Name        string
			CallID      string `json:"call_id"`
			Arguments   string
		}
		Answer struct {
			OutputTypes []string `json:"output_types"`
			OutputText  string   `json:"output_text"`
		}
		Retrieved       string
		AfterDelete     int `json:"after_delete"`
		DeletedPrevious struct {
			Status int
			Code   string
			Param  string
		} `json:"deleted_previous"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node printed %q: %v", out, err)
	}
	if got.First.Status != "completed" || got.First.OutputText == "" || !got.First.Store ||
		got.First.Usage.InputTokens == 0 || got.First.Usage.OutputTokens == 0 || got.First.Usage.TotalTokens != got.First.Usage.InputTokens+got.First.Usage.OutputTokens {
		t.Errorf("first response: %+v", got.First)
	}
	wantEvents := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added", "response.output_text.delta"}
	wantEnd := []string{"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"}
	if !equalPrefix(got.Events, wantEvents) || len(got.Events) < len(wantEvents)+len(wantEnd) || !equalPrefix(got.Events[len(got.Events)-len(wantEnd):], wantEnd) {
		t.Errorf("stream events %v", got.Events)
	}
	if got.Streamed.Text == "" || got.Streamed.Text != got.Streamed.OutputText || got.Streamed.Usage == nil || got.Streamed.Usage.OutputTokens == 0 {
		t.Errorf("streamed: %+v", got.Streamed)
	}
	// The second turn carried the first: its prompt is longer than the
	// first turn's whole conversation.
	if got.Second.PreviousResponseID != got.First.ID || got.Second.Status != "completed" || got.Second.Usage.InputTokens <= got.First.Usage.InputTokens {
		t.Errorf("second turn: %+v (first %+v)", got.Second, got.First)
	}
	if len(got.Call.OutputTypes) != 1 || got.Call.OutputTypes[0] != "function_call" || got.Call.Name != "get_weather" || got.Call.CallID == "" || !json.Valid([]byte(got.Call.Arguments)) {
		t.Errorf("function call: %+v", got.Call)
	}
	if len(got.Answer.OutputTypes) != 1 || got.Answer.OutputTypes[0] != "message" || got.Answer.OutputText == "" {
		t.Errorf("answer after the function output: %+v", got.Answer)
	}
	if got.Retrieved != got.First.ID || got.AfterDelete != 404 {
		t.Errorf("retrieve %q, after delete %d", got.Retrieved, got.AfterDelete)
	}
	if got.DeletedPrevious.Status != 400 || got.DeletedPrevious.Code != "previous_response_not_found" || got.DeletedPrevious.Param != "previous_response_id" {
		t.Errorf("a deleted previous response: %+v", got.DeletedPrevious)
	}
}

// TestNodeSDKsSkipThreadNotStored runs the official openai (chat
// completions, stream: true) and @anthropic-ai/sdk (messages.stream)
// npm packages, unmodified, on a thread (x-llmgw-thread as a per-request
// header) whose turns cannot be stored: each stream carries the
// ": llmgw thread_not_stored: ..." comment line before its end, and
// each SDK reads the whole answer (every content delta, the finish
// reason, message_stop) without throwing and without an event of its
// own for the notice. The bytes each SDK parsed are checked too, so a
// notice sent as a data event or an "event: error" fails the test even
// where an SDK would ignore it.
func TestNodeSDKsSkipThreadNotStored(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Node.js")
	}
	openaiDir := nodejs.Install(t, nodejs.OpenAI)
	anthropicDir := nodejs.Install(t, nodejs.Anthropic)
	s := newSimGateway(t, Deps{Content: busyThreads{contentStore(t, 24)}})
	out := nodejs.Run(t, filepath.Join("testdata", "thread-not-stored.cjs"),
		"OPENAI_DIR="+openaiDir, "ANTHROPIC_DIR="+anthropicDir, "BASE_URL="+s.url, "API_KEY="+testKey, "MODEL=coder")
	t.Logf("%s", out)
	var got struct {
		Chat struct {
			Chunks []struct {
				Object  string
				Choices int
			}
			Text         string
			FinishReason string `json:"finish_reason"`
			Raw, Error   string
		}
		Messages struct {
			Events     []string
			Text       string
			StopReason string `json:"stop_reason"`
			Content    []struct{ Type, Text string }
			Raw, Error string
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node printed %q: %v", out, err)
	}
	if got.Chat.Error != "" {
		t.Errorf("openai npm chat stream threw: %s", got.Chat.Error)
	} else {
		chatText := notStoredStream(t, "chat completions", got.Chat.Raw, "data: [DONE]", func(data []byte) string {
			var ch struct {
				Choices []struct {
					Delta struct{ Content string }
				}
			}
			_ = json.Unmarshal(data, &ch)
			text := ""
			for _, c := range ch.Choices {
				text += c.Delta.Content
			}
			return text
		})
		if got.Chat.Text == "" || got.Chat.Text != chatText || got.Chat.FinishReason == "" {
			t.Errorf("openai npm chat stream read %q (finish reason %q); the stream sent %q", got.Chat.Text, got.Chat.FinishReason, chatText)
		}
		for i, ch := range got.Chat.Chunks {
			if ch.Object != "chat.completion.chunk" || ch.Choices < 0 {
				t.Errorf("openai npm chat stream chunk %d is %+v, want a chat.completion.chunk (of %d)", i, ch, len(got.Chat.Chunks))
			}
		}
	}
	if got.Messages.Error != "" {
		t.Errorf("anthropic npm messages.stream threw: %s", got.Messages.Error)
	} else {
		msgText := notStoredStream(t, "messages", got.Messages.Raw, "event: message_stop", func(data []byte) string {
			var ev struct {
				Type  string
				Delta struct{ Type, Text string }
			}
			_ = json.Unmarshal(data, &ev)
			if ev.Type == "content_block_delta" && ev.Delta.Type == "text_delta" {
				return ev.Delta.Text
			}
			return ""
		})
		m := got.Messages
		if m.Text == "" || m.Text != msgText || m.StopReason == "" || len(m.Content) != 1 || m.Content[0].Type != "text" || m.Content[0].Text != msgText {
			t.Errorf("anthropic npm messages.stream read %q (stop reason %q, content %+v); the stream sent %q", m.Text, m.StopReason, m.Content, msgText)
		}
		known := map[string]bool{"message_start": true, "content_block_start": true, "content_block_delta": true, "content_block_stop": true, "message_delta": true, "message_stop": true}
		for _, ev := range m.Events {
			if !known[ev] {
				t.Errorf("anthropic npm messages.stream saw an event %q: %v", ev, m.Events)
			}
		}
		if !equalPrefix(m.Events, []string{"message_start"}) || len(m.Events) < 3 ||
			!equalPrefix(m.Events[len(m.Events)-3:], []string{"content_block_stop", "message_delta", "message_stop"}) {
			t.Errorf("anthropic npm messages.stream events %v", m.Events)
		}
	}
	if n := s.gw.ThreadTurnsNotStored(); n != 2 {
		t.Errorf("ThreadTurnsNotStored = %d, want 2", n)
	}
}

// notStoredStream checks the bytes an SDK read from a stream whose
// thread turn was not stored: one comment line says so before the line
// that ends the stream (end), no event line or data line mentions it,
// and it returns the text its data lines carry (text reads one line's).
func notStoredStream(t *testing.T, what, raw, end string, text func(data []byte) string) string {
	t.Helper()
	lines := strings.Split(raw, "\n")
	notice, last := -1, -1
	var sent strings.Builder
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, ": llmgw thread_not_stored: "):
			if notice >= 0 {
				t.Errorf("%s stream: a second notice at line %d: %s", what, i, raw)
			}
			notice = i
		case l == end:
			last = i
		case strings.HasPrefix(l, "data:") || strings.HasPrefix(l, "event:"):
			if strings.Contains(l, "thread_not_stored") || strings.Contains(l, "not kept") || l == "event: error" {
				t.Errorf("%s stream: the notice is an event (line %d %q): %s", what, i, l, raw)
			}
			if data, ok := strings.CutPrefix(l, "data: "); ok && data != "[DONE]" {
				sent.WriteString(text([]byte(data)))
			}
		}
	}
	if notice < 0 || last < 0 || notice > last || !strings.Contains(lines[notice], "not kept") {
		t.Errorf("%s stream: notice at line %d, %q at line %d; want a comment line saying the turn was not kept before the end: %s", what, notice, end, last, raw)
	}
	return sent.String()
}

// TestOpenAIGoResponses runs openai-go v3's Responses API against
// /v1/responses: a response, a stream accumulated by the client, a second
// turn, a function call round trip, Get and Delete.
func TestOpenAIGoResponses(t *testing.T) {
	s := newSimGateway(t, Deps{Content: contentStore(t, 24)})
	client := openai.NewClient(option.WithBaseURL(s.url+"/v1"), option.WithAPIKey(testKey), option.WithMaxRetries(0))
	ctx := t.Context()

	first, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:        "coder",
		Instructions: openai.String("be brief"),
		Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("my name is Ada")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if first.Status != responses.ResponseStatusCompleted || first.OutputText() == "" || first.Usage.InputTokens == 0 || first.Usage.OutputTokens == 0 {
		t.Fatalf("first response %s", first.RawJSON())
	}

	stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: "coder",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("stream please")},
	})
	var deltas string
	var completed *responses.Response
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "response.output_text.delta":
			deltas += ev.Delta
		case "response.completed":
			r := ev.Response
			completed = &r
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if completed == nil || deltas == "" || completed.OutputText() != deltas || completed.Usage.OutputTokens == 0 {
		t.Fatalf("stream: deltas %q, completed %+v", deltas, completed)
	}

	second, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:              "coder",
		PreviousResponseID: openai.String(first.ID),
		Input:              responses.ResponseNewParamsInputUnion{OfString: openai.String("what is my name?")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if second.PreviousResponseID != first.ID || second.Usage.InputTokens <= first.Usage.InputTokens {
		t.Fatalf("second turn %s", second.RawJSON())
	}

	tools := []responses.ToolUnionParam{responses.ToolParamOfFunction("get_weather",
		map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}, false)}
	call, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "coder", Tools: tools,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("weather in Paris?")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(call.Output) != 1 || call.Output[0].Type != "function_call" || call.Output[0].Name != "get_weather" {
		t.Fatalf("function call %s", call.RawJSON())
	}
	fc := call.Output[0]
	out := responses.ResponseInputItemParamOfFunctionCallOutput("sunny")
	out.OfFunctionCallOutput.CallID = openai.String(fc.CallID)
	answer, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "coder", Tools: tools,
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfFunctionCall(fc.Arguments.OfString, fc.CallID, fc.Name), out}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if answer.OutputText() == "" || answer.Output[0].Type != "message" {
		t.Fatalf("answer after the function output %s", answer.RawJSON())
	}

	got, err := client.Responses.Get(ctx, first.ID, responses.ResponseGetParams{})
	if err != nil || got.ID != first.ID || got.OutputText() != first.OutputText() {
		t.Fatalf("Get: %v %+v", err, got)
	}
	if err := client.Responses.Delete(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	_, err = client.Responses.Get(ctx, first.ID, responses.ResponseGetParams{})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("Get after Delete: %v", err)
	}
}
