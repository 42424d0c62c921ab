package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/router"
)

// refusedURL is an address nothing listens on: connections are refused.
func refusedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + l.Addr().String()
	l.Close()
	return u
}

// resetting is an engine that reads a request and resets its connection
// without answering a byte.
func resetting(t *testing.T) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = bufio.NewReader(r.Body).ReadString(0)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		_ = conn.(*net.TCPConn).SetLinger(0) // close sends RST
		conn.Close()
	}))
	t.Cleanup(s.Close)
	return s
}

func downOf(r *router.Router, model string) map[string]bool {
	out := map[string]bool{}
	for _, l := range r.Snapshot()[model] {
		out[l.ReplicaID] = l.Down
	}
	return out
}

// TestRetryOnAnotherReplica: a request whose replica refuses or resets the
// connection before answering is served by another replica, and the failed
// replica leaves the routing table at once.
func TestRetryOnAnotherReplica(t *testing.T) {
	for _, tt := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"connection refused", refusedURL},
		{"connection reset", func(t *testing.T) string { return resetting(t).URL }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, 1, Config{}, nil)
			good := h.engines[0].srv.URL
			// Round-robin so that the broken replica is certainly tried.
			h.router.SetModel("qwen/coder-3b", router.ModelConfig{Policy: router.RoundRobin{}})
			h.router.SetEndpoints("qwen/coder-3b", []router.Endpoint{{ReplicaID: "bad", URL: tt.url(t)}, {ReplicaID: "good", URL: good}})
			for i := range 4 {
				resp := h.post(t.Context(), "/v1/chat/completions", `{"model":"coder","messages":[{"role":"user","content":"hi"}]}`)
				out := readAll(t, resp)
				if resp.StatusCode != 200 {
					t.Fatalf("request %d: status %d, want 200 from the other replica: %s", i, resp.StatusCode, out)
				}
				if rec := h.record(); rec.ReplicaID != "good" {
					t.Errorf("request %d recorded on replica %q, want good", i, rec.ReplicaID)
				}
			}
			if d := downOf(h.router, "qwen/coder-3b"); !d["bad"] || d["good"] {
				t.Errorf("health after the failure = %v, want bad down and good up", d)
			}
		})
	}
}

// TestEveryReplicaFails: when each replica fails before answering, the
// client gets one 502 that says so, after every replica was tried once.
func TestEveryReplicaFails(t *testing.T) {
	h := newHarness(t, 0, Config{}, nil)
	h.router.SetEndpoints("qwen/coder-3b", []router.Endpoint{{ReplicaID: "a", URL: refusedURL(t)}, {ReplicaID: "b", URL: resetting(t).URL}})
	resp := h.post(t.Context(), "/v1/chat/completions", `{"model":"coder","messages":[]}`)
	out := readAll(t, resp)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(out, "2 tried") || !strings.Contains(out, `"code":"upstream_error"`) {
		t.Fatalf("status %d body %s, want 502 upstream_error naming 2 replicas tried", resp.StatusCode, out)
	}
	if d := downOf(h.router, "qwen/coder-3b"); !d["a"] || !d["b"] {
		t.Errorf("health = %v, want both down", d)
	}
	// Both out of the table: the next request is told nothing is ready.
	resp = h.post(t.Context(), "/v1/chat/completions", `{"model":"coder","messages":[]}`)
	out = readAll(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(out, "2 not answering") {
		t.Fatalf("with every replica down: status %d body %s, want 503 naming 2 not answering", resp.StatusCode, out)
	}
}

// streamLines reads an SSE response to its end (which must come within 10
// s) and returns its data lines.
func streamLines(t *testing.T, resp *http.Response) []string {
	t.Helper()
	done := make(chan []string, 1)
	go func() {
		var lines []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				lines = append(lines, d)
			}
		}
		done <- lines
	}()
	select {
	case l := <-done:
		return l
	case <-time.After(10 * time.Second):
		resp.Body.Close()
		t.Fatal("the stream did not end within 10s")
		return nil
	}
}

// TestStreamBrokenMidway: a stream whose engine dies after sending bytes
// ends with an error event, not with [DONE] and not by hanging.
func TestStreamBrokenMidway(t *testing.T) {
	for _, tt := range []struct {
		name  string
		cfg   Config
		after func(w http.ResponseWriter, r *http.Request)
		want  string
	}{
		{name: "connection cut", after: func(w http.ResponseWriter, r *http.Request) {
			conn, _, _ := http.NewResponseController(w).Hijack()
			_ = conn.(*net.TCPConn).SetLinger(0)
			conn.Close()
		}, want: "failed mid-stream"},
		{name: "engine silent", cfg: Config{StreamIdleTimeout: 300 * time.Millisecond}, after: func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
		}, want: "sent nothing for 300ms"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, 1, tt.cfg, nil)
			h.engines[0].handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = w.Write([]byte("data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n"))
				_ = http.NewResponseController(w).Flush()
				tt.after(w, r)
			}
			resp := h.post(t.Context(), "/v1/chat/completions", `{"model":"coder","stream":true,"messages":[]}`)
			defer resp.Body.Close()
			lines := streamLines(t, resp)
			if len(lines) != 2 || !strings.Contains(lines[0], "Hel") {
				t.Fatalf("data lines %q, want the relayed chunk then an error event", lines)
			}
			var ev struct {
				Error struct{ Message, Type, Code string }
			}
			if err := json.Unmarshal([]byte(lines[1]), &ev); err != nil || !strings.Contains(ev.Error.Message, tt.want) || ev.Error.Code != "upstream_error" {
				t.Fatalf("last event %q (%v), want an error whose message says %q", lines[1], err, tt.want)
			}
			if rec := h.record(); rec.Status != http.StatusBadGateway {
				t.Errorf("recorded status %d, want 502 for a broken stream", rec.Status)
			}
		})
	}
}

// TestOnDemandFirstRequest: a request for a model loaded on demand with no
// replica is counted as demand and told, with 503 and Retry-After from the
// expected load time, that the model is loading; with a wait configured it
// is served once a replica becomes ready within the wait.
func TestOnDemandFirstRequest(t *testing.T) {
	t.Run("answer at once", func(t *testing.T) {
		h := newHarness(t, 1, Config{ColdStartWait: -1}, nil)
		h.router.SetModel("cold", router.ModelConfig{OnDemand: true, ETA: time.Now().Add(42 * time.Second)})
		resp := h.post(t.Context(), "/v1/chat/completions", `{"model":"cold","messages":[]}`)
		out := readAll(t, resp)
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(out, `"code":"model_loading"`) {
			t.Fatalf("status %d body %s, want 503 model_loading", resp.StatusCode, out)
		}
		ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if err != nil || ra < 40 || ra > 42 {
			t.Errorf("Retry-After %q, want about 42 (the expected load time)", resp.Header.Get("Retry-After"))
		}
		if d := h.router.Demand("cold"); !d.Pending || d.LastRequest.IsZero() {
			t.Errorf("demand after the request = %+v, want pending with a last request", d)
		}
	})
	t.Run("served within the wait", func(t *testing.T) {
		h := newHarness(t, 1, Config{ColdStartWait: 5 * time.Second}, nil)
		h.router.SetModel("cold", router.ModelConfig{OnDemand: true})
		go func() {
			// The reconciler's part: a replica is placed on demand and
			// becomes ready.
			for {
				select {
				case <-h.router.Demanded():
					h.router.SetEndpoints("cold", []router.Endpoint{{ReplicaID: "r", URL: h.engines[0].srv.URL}})
					return
				case <-t.Context().Done():
					return
				}
			}
		}()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		resp := h.post(ctx, "/v1/chat/completions", `{"model":"cold","messages":[]}`)
		out := readAll(t, resp)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d body %s, want 200 once the replica is ready", resp.StatusCode, out)
		}
	})
	t.Run("cannot be placed", func(t *testing.T) {
		h := newHarness(t, 1, Config{ColdStartWait: -1, RetryAfter: 9 * time.Second}, nil)
		const why = "no node can hold profile gpu: node01: 8 free GPUs, needs 16"
		h.router.SetModel("cold", router.ModelConfig{OnDemand: true, NotPlaced: why})
		resp := h.post(t.Context(), "/v1/chat/completions", `{"model":"cold","messages":[]}`)
		out := readAll(t, resp)
		var e struct {
			Error struct{ Message, Type, Code string }
		}
		if err := json.Unmarshal([]byte(out), &e); err != nil || resp.StatusCode != http.StatusServiceUnavailable ||
			e.Error.Code != "model_not_ready" || !strings.Contains(e.Error.Message, why) || resp.Header.Get("Retry-After") != "9" {
			t.Fatalf("status %d Retry-After %q body %s, want 503 model_not_ready saying why, with the default Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), out)
		}
		if d := h.router.Demand("cold"); !d.Pending {
			t.Errorf("demand after the request = %+v, want pending: it is placed once it can be", d)
		}
	})
	t.Run("cannot be placed, found during the wait", func(t *testing.T) {
		// A wait longer than the test's deadline: only being told why ends it.
		h := newHarness(t, 1, Config{ColdStartWait: time.Hour}, nil)
		h.router.SetModel("cold", router.ModelConfig{OnDemand: true})
		go func() {
			// The reconciler's part: the model asked for does not place.
			select {
			case <-h.router.Demanded():
				h.router.SetModel("cold", router.ModelConfig{OnDemand: true, NotPlaced: "no node can hold profile gpu"})
			case <-t.Context().Done():
			}
		}()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		resp := h.post(ctx, "/v1/chat/completions", `{"model":"cold","messages":[]}`)
		out := readAll(t, resp)
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(out, `"code":"model_not_ready"`) || !strings.Contains(out, "no node can hold profile gpu") {
			t.Fatalf("status %d body %s, want 503 model_not_ready saying why", resp.StatusCode, out)
		}
	})
	t.Run("wait runs out", func(t *testing.T) {
		h := newHarness(t, 1, Config{ColdStartWait: 200 * time.Millisecond, RetryAfter: 9 * time.Second}, nil)
		h.router.SetModel("cold", router.ModelConfig{OnDemand: true})
		start := time.Now()
		resp := h.post(t.Context(), "/v1/chat/completions", `{"model":"cold","messages":[]}`)
		out := readAll(t, resp)
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(out, "loading") || resp.Header.Get("Retry-After") != "9" {
			t.Fatalf("status %d Retry-After %q body %s, want 503 loading with the default Retry-After 9", resp.StatusCode, resp.Header.Get("Retry-After"), out)
		}
		if el := time.Since(start); el < 200*time.Millisecond {
			t.Errorf("answered after %s, before the 200ms wait", el)
		}
	})
}
