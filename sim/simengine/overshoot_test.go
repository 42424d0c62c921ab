package simengine

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestOvershootTokens: with --overshoot-tokens the engine runs past the
// request's max_tokens by that many tokens, streamed or not, on chat and
// completions, and its usage counts them; an answer that stops before
// max_tokens (end of sequence) is not lengthened.
func TestOvershootTokens(t *testing.T) {
	_, srv := newTestServer(t, Config{OvershootTokens: 5})
	var chat chatCompletion
	postOK(t, srv.URL+"/v1/chat/completions", chatBody("hello there", map[string]any{"max_tokens": 3}), &chat)
	if n := len(strings.Fields(*chat.Choices[0].Message.Content)); n != 8 || chat.Usage.CompletionTokens != 8 || chat.Choices[0].FinishReason != "length" {
		t.Errorf("chat with max_tokens 3: %d words, usage %d, finish %q; want 8, 8, length", n, chat.Usage.CompletionTokens, chat.Choices[0].FinishReason)
	}
	var cmpl textCompletion
	postOK(t, srv.URL+"/v1/completions", map[string]any{"model": testModel, "prompt": "once upon", "max_tokens": 2}, &cmpl)
	if cmpl.Usage.CompletionTokens != 7 {
		t.Errorf("completion with max_tokens 2: usage %d completion tokens, want 7", cmpl.Usage.CompletionTokens)
	}

	_, raw := post(t, srv.URL+"/v1/chat/completions", chatBody("hello there", map[string]any{
		"max_tokens": 2, "stream": true, "stream_options": map[string]any{"include_usage": true}}))
	words := 0
	var last chatChunk
	for _, ev := range sseEvents(t, raw) {
		if ev == "[DONE]" {
			continue
		}
		var c chatChunk
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("chunk %s: %v", ev, err)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil && *ch.Delta.Content != "" {
				words++
			}
		}
		last = c
	}
	if words != 7 || last.Usage == nil || last.Usage.CompletionTokens != 7 {
		t.Errorf("stream with max_tokens 2: %d content chunks, usage %+v; want 7", words, last.Usage)
	}

	// Without max_tokens, or ended by end of sequence, nothing overshoots.
	_, srv = newTestServer(t, Config{OvershootTokens: 5, EOSAfter: 4})
	postOK(t, srv.URL+"/v1/chat/completions", chatBody("hello there", map[string]any{"max_tokens": 100}), &chat)
	if chat.Usage.CompletionTokens != 4 || chat.Choices[0].FinishReason != "stop" {
		t.Errorf("answer ended by end of sequence: %d tokens, finish %q; want 4, stop", chat.Usage.CompletionTokens, chat.Choices[0].FinishReason)
	}
}
