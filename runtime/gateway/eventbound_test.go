package gateway

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestStreamEventBound: an engine whose stream sends an event without end
// (no blank line) has its stream ended once the event passes
// maxEventBytes, with the usual broken-stream event after what was
// relayed, and its connection closed (the engine sees the gateway gone),
// for a chat completions stream and a translated one.
func TestStreamEventBound(t *testing.T) {
	for _, tt := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"coder","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/messages", `{"model":"coder","max_tokens":30,"stream":true,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		t.Run(tt.path, func(t *testing.T) {
			h := newHarness(t, 1, Config{}, nil)
			gone := make(chan struct{})
			h.engines[0].handle = func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
				defer close(gone)
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = w.Write([]byte("data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\ndata: "))
				chunk := []byte(strings.Repeat("a", 64<<10))
				for sent := 0; sent < 8*maxEventBytes; sent += len(chunk) {
					if _, err := w.Write(chunk); err != nil {
						return // the gateway closed the connection
					}
				}
				t.Error("the engine wrote 128 MiB of one event and the gateway still read")
			}
			resp := h.post(t.Context(), tt.path, tt.body)
			defer resp.Body.Close()
			body := strings.Join(streamLines(t, resp), "\n")
			if !strings.Contains(body, "Hel") || !strings.Contains(body, "error") || !strings.Contains(body, "longer than 16 MiB") {
				t.Fatalf("stream data:\n%.2000s\nwant the relayed delta, then an error event about the event's length", body)
			}
			select {
			case <-gone:
			case <-time.After(10 * time.Second):
				t.Fatal("the engine's connection was not closed")
			}
			if rec := h.record(); rec.Status != http.StatusBadGateway {
				t.Errorf("recorded status %d, want 502", rec.Status)
			}
		})
	}
}
