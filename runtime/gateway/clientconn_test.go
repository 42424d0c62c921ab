package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// serveRaw serves the harness's gateway on a server whose connections
// carry a WithConnAuthenticated hook counting calls in authed.
func serveRaw(t *testing.T, h *harness, authed *atomic.Int64) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(h.gw.Handler())
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return WithConnAuthenticated(ctx, func() { authed.Add(1) })
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// rawResult is what one raw HTTP/1.1 exchange saw.
type rawResult struct {
	resp    *http.Response
	body    string
	closed  bool // the server closed the connection after the answer
	elapsed time.Duration
}

// rawExchange writes req (which may stop short of its body) and reads the
// answer and then, within wait, the end of the connection. The client
// keeps its end open throughout, as a stalled client does.
func rawExchange(t *testing.T, addr, req string, wait time.Duration) rawResult {
	t.Helper()
	start := time.Now()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(start.Add(wait))
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer after %s: %v", time.Since(start), err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	resp.Body.Close()
	r := rawResult{resp: resp, body: string(b)}
	_, err = br.ReadByte()
	r.elapsed = time.Since(start)
	r.closed = errors.Is(err, io.EOF) || err != nil && strings.Contains(err.Error(), "connection reset")
	return r
}

const partialBody = "Content-Type: application/json\r\nContent-Length: 4096\r\n\r\n{\"model\":\"coder\","

// TestUnauthenticatedAnsweredBeforeBody reproduces issue 16's partial-body
// flood on one connection: without a key, or with a bad one, the 401 is
// sent at once and the connection closed, without waiting for a body that
// never comes (before, the answer waited for the body with no bound).
func TestUnauthenticatedAnsweredBeforeBody(t *testing.T) {
	h := newHarness(t, 1, Config{BodyTimeout: time.Minute}, nil)
	var authed atomic.Int64
	addr := serveRaw(t, h, &authed)
	for name, auth := range map[string]string{"no key": "", "bad key": "Authorization: Bearer sk-wrong\r\n"} {
		t.Run(name, func(t *testing.T) {
			r := rawExchange(t, addr, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"+auth+partialBody, 10*time.Second)
			if r.resp.StatusCode != http.StatusUnauthorized || !strings.Contains(r.body, `"invalid_api_key"`) {
				t.Fatalf("answer %d %s, want 401 invalid_api_key", r.resp.StatusCode, r.body)
			}
			if !r.resp.Close || !r.closed {
				t.Fatalf("Connection: close %v, connection closed %v; want both", r.resp.Close, r.closed)
			}
			if r.elapsed > 5*time.Second {
				t.Fatalf("answered and closed after %s: it waited for the body", r.elapsed)
			}
			if rec := h.record(); rec.Status != http.StatusUnauthorized {
				t.Errorf("recorded status %d, want 401", rec.Status)
			}
		})
	}
	if n := authed.Load(); n != 0 {
		t.Errorf("the connection was marked authenticated %d times, want none", n)
	}
}

// TestStalledBodyGets408: an authenticated request whose body stops short
// is answered 408 at BodyTimeout and its connection closed.
func TestStalledBodyGets408(t *testing.T) {
	const timeout = 300 * time.Millisecond
	h := newHarness(t, 1, Config{BodyTimeout: timeout}, nil)
	var authed atomic.Int64
	addr := serveRaw(t, h, &authed)
	r := rawExchange(t, addr, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer "+testKey+"\r\n"+partialBody, 10*time.Second)
	if r.resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(r.body, `"request_timeout"`) || !strings.Contains(r.body, "timeouts.client_body") {
		t.Fatalf("answer %d %s, want 408 request_timeout naming timeouts.client_body", r.resp.StatusCode, r.body)
	}
	if !r.resp.Close || !r.closed {
		t.Fatalf("Connection: close %v, connection closed %v; want both", r.resp.Close, r.closed)
	}
	if r.elapsed < timeout || r.elapsed > timeout+5*time.Second {
		t.Fatalf("answered after %s, want about %s", r.elapsed, timeout)
	}
	if n := authed.Load(); n != 1 {
		t.Errorf("the connection was marked authenticated %d times, want 1", n)
	}
	// A body on a URL that reads none is bounded too: net/http's own read
	// of it before the answer ends at the deadline.
	r = rawExchange(t, addr, "POST /nowhere HTTP/1.1\r\nHost: gw\r\n"+partialBody, 10*time.Second)
	if r.resp.StatusCode != http.StatusNotFound || !r.closed || r.elapsed > timeout+5*time.Second {
		t.Fatalf("a partial body on an unknown URL: %d, closed %v after %s", r.resp.StatusCode, r.closed, r.elapsed)
	}
}

// TestStreamOutlivesBodyTimeout: the body deadline is lifted once the body
// is in, so a stream lasting many times BodyTimeout is relayed to its end.
func TestStreamOutlivesBodyTimeout(t *testing.T) {
	const timeout = 100 * time.Millisecond
	h := newHarness(t, 1, Config{BodyTimeout: timeout}, nil)
	h.engines[0].handle = func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		writeSSE(w, body, func() {
			select { // the engine's pace, not a wait for an outcome
			case <-time.After(10 * timeout):
			case <-r.Context().Done():
			}
		})
	}
	var authed atomic.Int64
	srvAddr := serveRaw(t, h, &authed)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+srvAddr+"/v1/chat/completions", strings.NewReader(`{"model":"coder","stream":true}`))
	req.Header.Set("Authorization", "Bearer "+testKey)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got := readAll(t, resp)
	if !strings.Contains(got, `"lo"`) || !strings.HasSuffix(got, "data: [DONE]\n\n") {
		t.Fatalf("after %s the stream was %q, want it whole", time.Since(start), got)
	}
	if rec := h.record(); rec.Status != http.StatusOK {
		t.Errorf("recorded status %d, want 200", rec.Status)
	}
}

// TestBadKeyWithLargeBodyGets401: a client that sends its whole body with
// a bad key reads the 401, not a reset: what it sent after the answer is
// drained briefly before the connection closes.
func TestBadKeyWithLargeBodyGets401(t *testing.T) {
	h := newHarness(t, 1, Config{BodyTimeout: time.Minute}, nil)
	var authed atomic.Int64
	addr := serveRaw(t, h, &authed)
	body := `{"model":"coder","messages":[{"role":"user","content":"` + strings.Repeat("x", 200<<10) + `"}]}`
	for i := range 20 {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk-wrong")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v; want a 401", i, err)
		}
		got := readAll(t, resp)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(got, "invalid_api_key") {
			t.Fatalf("request %d: %d %s; want 401 invalid_api_key", i, resp.StatusCode, got)
		}
		h.record()
	}
}

// TestBadKeyWhileSendingBodyGets401: a client that writes its whole body
// before reading, as many do, sends the rest of a small body after the
// 401 went out; the gateway drains it (for at most unreadGrace) rather
// than closing on it, which would reset the connection and fail the
// client's write before it reads its answer.
func TestBadKeyWhileSendingBodyGets401(t *testing.T) {
	h := newHarness(t, 1, Config{BodyTimeout: time.Minute}, nil)
	var authed atomic.Int64
	addr := serveRaw(t, h, &authed)
	const size, chunk = 96 << 10, 16 << 10
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer sk-wrong\r\n"+
		"Content-Type: application/json\r\nContent-Length: "+strconv.Itoa(size)+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	for sent := 0; sent < size; sent += chunk {
		time.Sleep(unreadGrace / 20) // the client's pace, not a wait for an outcome
		if _, err := conn.Write([]byte(strings.Repeat("x", chunk))); err != nil {
			t.Fatalf("writing the body after %d bytes: %v", sent, err)
		}
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
		t.Fatalf("answer %d (close %v), want 401 with Connection: close", resp.StatusCode, resp.Close)
	}
	h.record()
}
