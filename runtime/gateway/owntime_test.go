package gateway

import (
	"io"
	"net/http"
	"testing"
	"time"
)

// TestOwnTimeLeavesOutTheEngine: Record.Own, the gateway's own time before
// the client's first byte, counts the gateway's work and not the engine's:
// with an engine that takes engineTime before it answers (a whole answer,
// a stream's first event after its headers, a translated stream's and a
// translated whole answer), Own is set, well below engineTime, and within
// the request's latency, which does count the engine.
func TestOwnTimeLeavesOutTheEngine(t *testing.T) {
	const engineTime = 300 * time.Millisecond
	for _, tt := range []struct{ name, path, body string }{
		{"whole answer", "/v1/chat/completions", `{"model":"coder","messages":[{"role":"user","content":"hi"}]}`},
		{"stream", "/v1/chat/completions", `{"model":"coder","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{"translated stream", "/v1/messages", `{"model":"coder","max_tokens":30,"stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{"translated whole answer", "/v1/messages", `{"model":"coder","max_tokens":30,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, 1, Config{}, nil)
			h.engines[0].handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
				if body["stream"] == true {
					// The headers at once, the first event after the
					// engine's time (a prefill).
					w.Header().Set("Content-Type", "text/event-stream")
					_ = http.NewResponseController(w).Flush()
					time.Sleep(engineTime) // the engine's time, what the test leaves out
					writeSSE(w, body, nil)
					return
				}
				time.Sleep(engineTime)
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"id":"c1","object":"chat.completion","model":"qwen/coder-3b","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`)
			}
			resp := h.post(t.Context(), tt.path, tt.body)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			rec := h.record()
			if rec.Own <= 0 || rec.Own >= engineTime/2 || rec.Own > rec.Latency {
				t.Fatalf("own time %s with an engine taking %s and a latency of %s: want it set, below half the engine's time, within the latency", rec.Own, engineTime, rec.Latency)
			}
			if rec.Latency < engineTime {
				t.Errorf("latency %s, below the engine's %s", rec.Latency, engineTime)
			}
		})
	}
}
