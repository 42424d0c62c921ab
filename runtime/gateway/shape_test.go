package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
)

// TestMessagesMustBeAnArray: a chat request whose messages is not an array
// is answered by the gateway itself with OpenAI's error body naming the
// field and the JSON types, whatever engine serves the model, and never
// reaches the engine (whose parser would name its own types).
func TestMessagesMustBeAnArray(t *testing.T) {
	h := newHarness(t, 1, Config{}, nil)
	tests := []struct{ messages, want string }{
		{`"hi"`, "messages must be an array, got a string"},
		{`{"role":"user","content":"hi"}`, "messages must be an array, got an object"},
		{`42`, "messages must be an array, got a number"},
		{`true`, "messages must be an array, got a boolean"},
		{`null`, "messages must be an array, got null"},
	}
	for _, tt := range tests {
		resp := h.post(context.Background(), "/v1/chat/completions", `{"model":"coder","messages":`+tt.messages+`}`)
		raw := readAll(t, resp)
		var body struct {
			Error struct {
				Message string  `json:"message"`
				Type    string  `json:"type"`
				Param   *string `json:"param"`
				Code    *string `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(raw), &body); err != nil || resp.StatusCode != http.StatusBadRequest {
			t.Errorf("messages %s: status %d, body %s", tt.messages, resp.StatusCode, raw)
			continue
		}
		e := body.Error
		if e.Message != tt.want || e.Type != typeInvalidRequest || e.Param == nil || *e.Param != "messages" || e.Code == nil || *e.Code != "invalid_type" {
			t.Errorf("messages %s: error %s, want %q with param messages, code invalid_type", tt.messages, raw, tt.want)
		}
		h.record()
	}
	h.engines[0].mu.Lock()
	reached := len(h.engines[0].bodies)
	h.engines[0].mu.Unlock()
	if reached != 0 {
		t.Errorf("%d refused requests reached the engine", reached)
	}
	resp := h.post(context.Background(), "/v1/chat/completions", `{"model":"coder","messages":[{"role":"user","content":"hi"}]}`)
	if raw := readAll(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("an array of messages: status %d, body %s", resp.StatusCode, raw)
	}
}
