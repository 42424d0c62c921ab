package simengine

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func chatBody(content string, extra map[string]any) map[string]any {
	b := map[string]any{
		"model":    testModel,
		"messages": []map[string]any{{"role": "system", "content": "be brief"}, {"role": "user", "content": content}},
	}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

func TestChatCompletionShape(t *testing.T) {
	_, srv := newTestServer(t, Config{})
	status, raw := post(t, srv.URL+"/v1/chat/completions", chatBody("hello there sim", map[string]any{"max_tokens": 4}))
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, raw)
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("decoding %s: %v", raw, err)
	}
	for _, key := range []string{"id", "object", "created", "model", "choices", "usage"} {
		if _, ok := got[key]; !ok {
			t.Errorf("response lacks %q: %s", key, raw)
		}
	}
	var resp chatCompletion
	if err := json.Unmarshal(raw, &resp); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(resp.ID, "chatcmpl-") || resp.Object != "chat.completion" || resp.Model != testModel || resp.Created == 0 {
		t.Fatalf("header fields wrong: %+v", resp)
	}
	if len(resp.Choices) != 1 {
		t.Fatalf("got %d choices, want 1", len(resp.Choices))
	}
	c := resp.Choices[0]
	if c.Index != 0 || c.Message.Role != "assistant" || c.Message.Content == nil || c.FinishReason != "length" || c.Message.ToolCalls != nil {
		t.Fatalf("choice wrong: %+v", c)
	}
	if n := len(strings.Fields(*c.Message.Content)); n != 4 {
		t.Fatalf("content %q has %d words, want 4", *c.Message.Content, n)
	}
	want := usage{PromptTokens: 5, CompletionTokens: 4, TotalTokens: 9, PromptTokensDetails: &promptTokenDetails{}}
	if !reflect.DeepEqual(*resp.Usage, want) {
		t.Fatalf("usage %+v, want %+v", *resp.Usage, want)
	}
}

func TestChatMaxTokens(t *testing.T) {
	_, srv := newTestServer(t, Config{MaxModelLen: 20})
	tests := []struct {
		name       string
		extra      map[string]any
		content    string
		wantWords  int
		wantFinish string
	}{
		{name: "default length", content: "a b", wantWords: 16, wantFinish: "stop"},
		{name: "max_tokens", content: "a b", extra: map[string]any{"max_tokens": 3}, wantWords: 3, wantFinish: "length"},
		{name: "max_completion_tokens wins", content: "a b", extra: map[string]any{"max_tokens": 3, "max_completion_tokens": 7}, wantWords: 7, wantFinish: "length"},
		{name: "capped by max model len", content: "a b c d e f g h i j", extra: map[string]any{"max_tokens": 100}, wantWords: 8, wantFinish: "length"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var resp chatCompletion
			postOK(t, srv.URL+"/v1/chat/completions", chatBody(tt.content, tt.extra), &resp)
			c := resp.Choices[0]
			if n := len(strings.Fields(*c.Message.Content)); n != tt.wantWords || c.FinishReason != tt.wantFinish {
				t.Fatalf("got %d words finish %q, want %d %q", n, c.FinishReason, tt.wantWords, tt.wantFinish)
			}
			if resp.Usage.CompletionTokens != tt.wantWords {
				t.Fatalf("usage.completion_tokens %d, want %d", resp.Usage.CompletionTokens, tt.wantWords)
			}
		})
	}
}

func TestChatDeterministic(t *testing.T) {
	_, srv := newTestServer(t, Config{})
	reply := func(content string) string {
		var resp chatCompletion
		postOK(t, srv.URL+"/v1/chat/completions", chatBody(content, nil), &resp)
		return *resp.Choices[0].Message.Content
	}
	a1, a2, b := reply("the quick brown fox"), reply("the   quick brown\nfox"), reply("a different prompt")
	if a1 != a2 {
		t.Fatalf("same prompt gave %q then %q", a1, a2)
	}
	if a1 == b {
		t.Fatalf("different prompts both gave %q", a1)
	}
	// A second engine gives the same answer: output is a function of the prompt only.
	_, other := newTestServer(t, Config{})
	var resp chatCompletion
	postOK(t, other.URL+"/v1/chat/completions", chatBody("the quick brown fox", nil), &resp)
	if got := *resp.Choices[0].Message.Content; got != a1 {
		t.Fatalf("another engine gave %q, want %q", got, a1)
	}
}

func TestChatContentParts(t *testing.T) {
	_, srv := newTestServer(t, Config{})
	var resp chatCompletion
	postOK(t, srv.URL+"/v1/chat/completions", map[string]any{
		"model": testModel,
		"messages": []map[string]any{{"role": "user", "content": []map[string]any{
			{"type": "text", "text": "one two"},
			{"type": "image_url", "image_url": map[string]string{"url": "data:,"}},
			{"type": "text", "text": "three"},
		}}},
	}, &resp)
	if resp.Usage.PromptTokens != 3 {
		t.Fatalf("prompt_tokens %d, want 3 (text parts only)", resp.Usage.PromptTokens)
	}
}

// streamChunks posts a streaming request and decodes its chunks, checking
// that the stream ends with [DONE].
func streamChunks(t *testing.T, url string, body map[string]any) []chatChunk {
	t.Helper()
	body["stream"] = true
	status, raw := post(t, url, body)
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, raw)
	}
	events := sseEvents(t, raw)
	if len(events) == 0 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %q", events)
	}
	var chunks []chatChunk
	for _, ev := range events[:len(events)-1] {
		var c chatChunk
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("decoding chunk %s: %v", ev, err)
		}
		if c.Object != "chat.completion.chunk" || c.Model != testModel || !strings.HasPrefix(c.ID, "chatcmpl-") {
			t.Fatalf("chunk header wrong: %s", ev)
		}
		chunks = append(chunks, c)
	}
	return chunks
}

func TestChatStreaming(t *testing.T) {
	_, srv := newTestServer(t, Config{})
	url := srv.URL + "/v1/chat/completions"
	var plain chatCompletion
	postOK(t, url, chatBody("stream me please", map[string]any{"max_tokens": 5}), &plain)

	for _, includeUsage := range []bool{false, true} {
		body := chatBody("stream me please", map[string]any{"max_tokens": 5})
		if includeUsage {
			body["stream_options"] = map[string]any{"include_usage": true}
		}
		chunks := streamChunks(t, url, body)
		wantChunks := 1 + 5 + 1 // role, one per token, finish
		if includeUsage {
			wantChunks++
		}
		if len(chunks) != wantChunks {
			t.Fatalf("include_usage=%v: %d chunks, want %d", includeUsage, len(chunks), wantChunks)
		}
		first := chunks[0].Choices[0]
		if first.Delta.Role != "assistant" || first.Delta.Content == nil || *first.Delta.Content != "" || first.FinishReason != nil {
			t.Fatalf("first chunk %+v, want role assistant and empty content", first)
		}
		var text strings.Builder
		for _, c := range chunks[1:6] {
			if c.Choices[0].FinishReason != nil || c.Choices[0].Delta.Content == nil {
				t.Fatalf("content chunk %+v", c)
			}
			text.WriteString(*c.Choices[0].Delta.Content)
		}
		if text.String() != *plain.Choices[0].Message.Content {
			t.Fatalf("streamed %q, non-streamed %q", text.String(), *plain.Choices[0].Message.Content)
		}
		fin := chunks[6]
		if fin.Choices[0].FinishReason == nil || *fin.Choices[0].FinishReason != "length" || fin.Usage != nil {
			t.Fatalf("finish chunk %+v", fin)
		}
		if !includeUsage {
			continue
		}
		last := chunks[7]
		if last.Choices == nil || len(last.Choices) != 0 || last.Usage == nil {
			t.Fatalf("usage chunk %+v, want empty choices and usage", last)
		}
		if last.Usage.PromptTokens != 5 || last.Usage.CompletionTokens != 5 || last.Usage.TotalTokens != 10 {
			t.Fatalf("usage chunk usage %+v", *last.Usage)
		}
	}
}

var weatherTools = []map[string]any{
	{"type": "function", "function": map[string]any{
		"name": "get_weather",
		"parameters": map[string]any{
			"type": "object",
			"properties": map[string]any{
				"city":   map[string]any{"type": "string"},
				"days":   map[string]any{"type": "integer"},
				"metric": map[string]any{"type": "boolean"},
				"unit":   map[string]any{"type": "string", "enum": []string{"celsius", "fahrenheit"}},
				"where":  map[string]any{"type": "object", "properties": map[string]any{"lat": map[string]any{"type": "number"}}},
				"tags":   map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
			},
			"required": []string{"city"},
		},
	}},
	{"type": "function", "function": map[string]any{"name": "get_time", "parameters": map[string]any{"type": "object", "properties": map[string]any{}}}},
}

func TestChatToolCall(t *testing.T) {
	_, srv := newTestServer(t, Config{})
	url := srv.URL + "/v1/chat/completions"
	tests := []struct {
		name     string
		extra    map[string]any
		lastRole string
		wantTool string // empty: a text reply
	}{
		{name: "first function by default", extra: map[string]any{"tools": weatherTools}, wantTool: "get_weather"},
		{name: "auto", extra: map[string]any{"tools": weatherTools, "tool_choice": "auto"}, wantTool: "get_weather"},
		{name: "required", extra: map[string]any{"tools": weatherTools, "tool_choice": "required"}, wantTool: "get_weather"},
		{name: "named", extra: map[string]any{"tools": weatherTools, "tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "get_time"}}}, wantTool: "get_time"},
		{name: "none", extra: map[string]any{"tools": weatherTools, "tool_choice": "none"}},
		{name: "after a tool result", extra: map[string]any{"tools": weatherTools}, lastRole: "tool"},
		{name: "no tools", extra: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := chatBody("what is the weather", tt.extra)
			if tt.lastRole != "" {
				body["messages"] = append(body["messages"].([]map[string]any), map[string]any{"role": tt.lastRole, "tool_call_id": "call_1", "content": "sunny"})
			}
			var resp chatCompletion
			postOK(t, url, body, &resp)
			c := resp.Choices[0]
			if tt.wantTool == "" {
				if c.Message.ToolCalls != nil || c.Message.Content == nil || c.FinishReason == "tool_calls" {
					t.Fatalf("want a text reply, got %+v", c)
				}
				return
			}
			if c.FinishReason != "tool_calls" || c.Message.Content != nil || len(c.Message.ToolCalls) != 1 {
				t.Fatalf("want one tool call, got %+v", c)
			}
			call := c.Message.ToolCalls[0]
			if !strings.HasPrefix(call.ID, "call_") || call.Type != "function" || call.Function.Name != tt.wantTool {
				t.Fatalf("tool call %+v", call)
			}
			var args map[string]any
			if err := json.Unmarshal([]byte(call.Function.Arguments), &args); err != nil {
				t.Fatalf("arguments %q are not a JSON object: %v", call.Function.Arguments, err)
			}
			if resp.Usage.CompletionTokens != len(splitFragments(call.Function.Arguments, 8)) {
				t.Fatalf("completion_tokens %d for arguments %q", resp.Usage.CompletionTokens, call.Function.Arguments)
			}
			if tt.wantTool != "get_weather" {
				return
			}
			city, ok := args["city"].(string)
			if !ok || !slices.Contains(vocabulary, city) {
				t.Fatalf("city = %#v, want a vocabulary word", args["city"])
			}
			want := map[string]any{"city": city, "days": 1.0, "metric": true, "unit": "celsius",
				"where": map[string]any{"lat": 1.0}, "tags": args["tags"]}
			if !reflect.DeepEqual(args, want) {
				t.Fatalf("arguments %v, want %v", args, want)
			}
			if tags, ok := args["tags"].([]any); !ok || len(tags) != 1 {
				t.Fatalf("tags = %#v, want one string", args["tags"])
			}
		})
	}
}

func TestChatToolCallStreaming(t *testing.T) {
	_, srv := newTestServer(t, Config{})
	url := srv.URL + "/v1/chat/completions"
	var plain chatCompletion
	postOK(t, url, chatBody("weather?", map[string]any{"tools": weatherTools}), &plain)
	want := plain.Choices[0].Message.ToolCalls[0]

	chunks := streamChunks(t, url, chatBody("weather?", map[string]any{"tools": weatherTools, "stream_options": map[string]any{"include_usage": true}}))
	head := chunks[0].Choices[0].Delta
	if head.Role != "assistant" || len(head.ToolCalls) != 1 || head.ToolCalls[0].ID != want.ID ||
		head.ToolCalls[0].Type != "function" || head.ToolCalls[0].Function.Name != "get_weather" || head.Content != nil {
		t.Fatalf("first chunk delta %+v", head)
	}
	var args strings.Builder
	for _, c := range chunks[1 : len(chunks)-2] {
		d := c.Choices[0].Delta
		if len(d.ToolCalls) != 1 || d.ToolCalls[0].Index != 0 || d.ToolCalls[0].ID != "" || d.ToolCalls[0].Function.Name != "" {
			t.Fatalf("argument chunk delta %+v", d)
		}
		args.WriteString(d.ToolCalls[0].Function.Arguments)
	}
	if args.String() != want.Function.Arguments {
		t.Fatalf("streamed arguments %q, want %q", args.String(), want.Function.Arguments)
	}
	fin := chunks[len(chunks)-2].Choices[0]
	if fin.FinishReason == nil || *fin.FinishReason != "tool_calls" {
		t.Fatalf("finish chunk %+v", fin)
	}
	if u := chunks[len(chunks)-1].Usage; u == nil || u.CompletionTokens != plain.Usage.CompletionTokens {
		t.Fatalf("usage chunk %+v, want completion tokens %d", u, plain.Usage.CompletionTokens)
	}
}
