package gateway

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestTranslatedStreamIdleBound: a translated stream (/v1/messages,
// /v1/responses) whose engine goes silent is ended after StreamIdleTimeout
// with the shape's broken-stream event, like a chat completions stream,
// rather than hanging.
func TestTranslatedStreamIdleBound(t *testing.T) {
	for _, tt := range []struct{ path, body, event string }{
		{"/v1/messages", `{"model":"coder","max_tokens":30,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, `"type":"error"`},
		{"/v1/responses", `{"model":"coder","stream":true,"store":false,"input":"hi"}`, `"type":"error"`},
	} {
		t.Run(tt.path, func(t *testing.T) {
			h := newHarness(t, 1, Config{StreamIdleTimeout: 300 * time.Millisecond}, nil)
			h.engines[0].handle = func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = w.Write([]byte("data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n"))
				_ = http.NewResponseController(w).Flush()
				<-r.Context().Done()
			}
			start := time.Now()
			resp := h.post(t.Context(), tt.path, tt.body)
			defer resp.Body.Close()
			body := strings.Join(streamLines(t, resp), "\n") // fails unless the stream ends within 10s
			if !strings.Contains(body, "Hel") || !strings.Contains(body, tt.event) || !strings.Contains(body, "sent nothing for 300ms") {
				t.Fatalf("stream data:\n%s\nwant the relayed delta, then an error event saying the replica sent nothing for 300ms", body)
			}
			if el := time.Since(start); el < 300*time.Millisecond {
				t.Errorf("ended after %s, before the idle bound", el)
			}
			if rec := h.record(); rec.Status != http.StatusBadGateway {
				t.Errorf("recorded status %d, want 502 for a broken stream", rec.Status)
			}
		})
	}
}
