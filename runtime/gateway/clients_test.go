package gateway

import (
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/sim/simengine"
	"github.com/llmgw/llmgw/testkit/nodejs"
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
	s := newSimGateway(t, Deps{})
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
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node printed %q: %v", out, err)
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
