package gateway

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestStreamIdleBoundFromTheLastRead: StreamIdleTimeout bounds the gap
// between the engine's events, not the stream: a stream whose events come
// every half bound, for several bounds in all and with its first event
// late (its headers leave on their own first), is relayed whole: every
// read sets the idle watch again (idleWatch.kick), and a watch timed from
// the stream's start would cut it.
func TestStreamIdleBoundFromTheLastRead(t *testing.T) {
	const bound = 300 * time.Millisecond
	h := newHarness(t, 1, Config{StreamIdleTimeout: bound}, nil)
	h.engines[0].handle = func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		for i := 0; i < 8; i++ {
			time.Sleep(bound / 2) // the engine's pace, what the test is about
			_, _ = w.Write([]byte("data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n"))
			_ = rc.Flush()
		}
		_, _ = w.Write([]byte("data: [DONE]\n\n"))
		_ = rc.Flush()
	}
	start := time.Now()
	resp := h.post(t.Context(), "/v1/chat/completions", `{"model":"coder","stream":true,"messages":[]}`)
	defer resp.Body.Close()
	lines := streamLines(t, resp)
	if el := time.Since(start); el < 4*bound {
		t.Fatalf("the stream ended after %s, before its events could all come", el)
	}
	if len(lines) != 9 || lines[8] != "[DONE]" || strings.Contains(strings.Join(lines, "\n"), "error") {
		t.Fatalf("data lines %q, want the 8 chunks and [DONE], no error", lines)
	}
	if rec := h.record(); rec.Status != http.StatusOK {
		t.Errorf("recorded status %d, want 200", rec.Status)
	}
}
