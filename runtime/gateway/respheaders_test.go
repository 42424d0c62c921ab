package gateway

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestEngineHeadersNotRelayed: a client is sent the engine's content type
// and, on a refusal, its Retry-After; the engine's other headers (its
// server, date, CORS, cookies, caching hints) are its own and are not
// relayed, whole answers, streams and refusals alike. The gateway's own
// headers (x-request-id, its date) are there.
func TestEngineHeadersNotRelayed(t *testing.T) {
	const engineDate = "Mon, 01 Jan 2024 00:00:00 GMT"
	engineHeaders := func(w http.ResponseWriter) {
		h := w.Header()
		h.Set("Server", "uvicorn")
		h.Set("Date", engineDate)
		h.Set("Set-Cookie", "session=engine")
		h.Set("Access-Control-Allow-Origin", "*")
		h.Set("Cache-Control", "no-cache")
	}
	cases := []struct {
		name, body string
		handle     func(w http.ResponseWriter, r *http.Request, body map[string]any)
		status     int
		ctype      string
		retryAfter string
	}{
		{"whole answer", `{"model":"coder"}`, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
			engineHeaders(w)
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"choices":[]}`)
		}, http.StatusOK, "application/json", ""},
		{"stream", `{"model":"coder","stream":true}`, func(w http.ResponseWriter, _ *http.Request, body map[string]any) {
			engineHeaders(w)
			writeSSE(w, body, nil)
		}, http.StatusOK, "text/event-stream", ""},
		{"refusal", `{"model":"coder"}`, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
			engineHeaders(w)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"object":"error","message":"busy"}`)
		}, http.StatusTooManyRequests, "application/json", "7"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, 1, Config{}, nil)
			h.engines[0].handle = c.handle
			resp := h.post(context.Background(), "/v1/chat/completions", c.body)
			readAll(t, resp)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.status)
			}
			if got := resp.Header.Get("Content-Type"); got != c.ctype {
				t.Errorf("Content-Type %q, want %q", got, c.ctype)
			}
			if got := resp.Header.Get("Retry-After"); got != c.retryAfter {
				t.Errorf("Retry-After %q, want %q", got, c.retryAfter)
			}
			for _, k := range []string{"Server", "Set-Cookie", "Access-Control-Allow-Origin", "Cache-Control", "X-Engine"} {
				if v, ok := resp.Header[k]; ok {
					t.Errorf("the engine's %s was relayed: %q", k, v)
				}
			}
			date, err := http.ParseTime(resp.Header.Get("Date"))
			if err != nil || time.Since(date) > time.Minute {
				t.Errorf("Date %q is not the gateway's (%v)", resp.Header.Get("Date"), err)
			}
			if resp.Header.Get("X-Request-Id") == "" {
				t.Error("no x-request-id")
			}
		})
	}
}
