package simengine

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestCompletionShape(t *testing.T) {
	_, srv := newTestServer(t, Config{})
	url := srv.URL + "/v1/completions"
	tests := []struct {
		name        string
		prompt      any
		maxTokens   any
		wantChoices int
		wantPrompt  int
		wantWords   int
		wantFinish  string
	}{
		{name: "string", prompt: "once upon a time", maxTokens: 6, wantChoices: 1, wantPrompt: 4, wantWords: 6, wantFinish: "length"},
		{name: "default length", prompt: "once upon a time", wantChoices: 1, wantPrompt: 4, wantWords: 16, wantFinish: "stop"},
		{name: "array of strings", prompt: []string{"one two", "three"}, maxTokens: 2, wantChoices: 2, wantPrompt: 3, wantWords: 2, wantFinish: "length"},
		{name: "token ids", prompt: []int{1, 2, 3}, maxTokens: 2, wantChoices: 1, wantPrompt: 3, wantWords: 2, wantFinish: "length"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := map[string]any{"model": testModel, "prompt": tt.prompt}
			if tt.maxTokens != nil {
				body["max_tokens"] = tt.maxTokens
			}
			var resp textCompletion
			postOK(t, url, body, &resp)
			if !strings.HasPrefix(resp.ID, "cmpl-") || resp.Object != "text_completion" || resp.Model != testModel || resp.Created == 0 {
				t.Fatalf("header fields wrong: %+v", resp)
			}
			if len(resp.Choices) != tt.wantChoices {
				t.Fatalf("%d choices, want %d", len(resp.Choices), tt.wantChoices)
			}
			for i, c := range resp.Choices {
				if c.Index != i || c.FinishReason == nil || *c.FinishReason != tt.wantFinish || len(strings.Fields(c.Text)) != tt.wantWords {
					t.Fatalf("choice %d = %+v, want %d words finish %q", i, c, tt.wantWords, tt.wantFinish)
				}
			}
			u := resp.Usage
			if u.PromptTokens != tt.wantPrompt || u.CompletionTokens != tt.wantWords*tt.wantChoices || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
				t.Fatalf("usage %+v", *u)
			}
		})
	}
}

func TestCompletionDeterministicAcrossEndpoints(t *testing.T) {
	_, srv := newTestServer(t, Config{})
	var a, b textCompletion
	postOK(t, srv.URL+"/v1/completions", map[string]any{"model": testModel, "prompt": "same words here"}, &a)
	postOK(t, srv.URL+"/v1/completions", map[string]any{"model": testModel, "prompt": "same words here"}, &b)
	if a.Choices[0].Text != b.Choices[0].Text {
		t.Fatalf("same prompt gave %q then %q", a.Choices[0].Text, b.Choices[0].Text)
	}
	var chat chatCompletion
	postOK(t, srv.URL+"/v1/chat/completions", map[string]any{"model": testModel,
		"messages": []map[string]string{{"role": "user", "content": "same words here"}}}, &chat)
	if *chat.Choices[0].Message.Content != a.Choices[0].Text {
		t.Fatalf("chat gave %q, completions %q for the same tokens", *chat.Choices[0].Message.Content, a.Choices[0].Text)
	}
}

func TestCompletionStreaming(t *testing.T) {
	_, srv := newTestServer(t, Config{})
	url := srv.URL + "/v1/completions"
	var plain textCompletion
	postOK(t, url, map[string]any{"model": testModel, "prompt": "tell me", "max_tokens": 4}, &plain)

	status, raw := post(t, url, map[string]any{"model": testModel, "prompt": "tell me", "max_tokens": 4,
		"stream": true, "stream_options": map[string]any{"include_usage": true}})
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, raw)
	}
	events := sseEvents(t, raw)
	// 4 tokens, a finish chunk, a usage chunk, [DONE]
	if len(events) != 7 || events[6] != "[DONE]" {
		t.Fatalf("events %q", events)
	}
	var text strings.Builder
	for i, ev := range events[:6] {
		var c textCompletion
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("chunk %s: %v", ev, err)
		}
		if c.Object != "text_completion" || c.ID == "" {
			t.Fatalf("chunk header %s", ev)
		}
		switch {
		case i < 4:
			if c.Choices[0].FinishReason != nil {
				t.Fatalf("token chunk has a finish reason: %s", ev)
			}
			text.WriteString(c.Choices[0].Text)
		case i == 4:
			if c.Choices[0].FinishReason == nil || *c.Choices[0].FinishReason != "length" {
				t.Fatalf("finish chunk %s", ev)
			}
		case i == 5:
			if len(c.Choices) != 0 || c.Usage == nil || c.Usage.CompletionTokens != 4 || c.Usage.PromptTokens != 2 {
				t.Fatalf("usage chunk %s", ev)
			}
		}
	}
	if text.String() != plain.Choices[0].Text {
		t.Fatalf("streamed %q, non-streamed %q", text.String(), plain.Choices[0].Text)
	}
}
