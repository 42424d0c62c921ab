//go:build unix

package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countConns starts srv counting the connections it accepted and closed.
func countConns(t *testing.T, h http.Handler) (srv *httptest.Server, opened, closed *atomic.Int64) {
	opened, closed = new(atomic.Int64), new(atomic.Int64)
	srv = httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			opened.Add(1)
		case http.StateClosed, http.StateHijacked:
			closed.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, opened, closed
}

func upPost(t *testing.T, ctx context.Context, u *upstream, url, body string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return u.RoundTrip(req)
}

// upFail sends a request expected to fail and returns its error.
func upFail(t *testing.T, u *upstream, url string) error {
	t.Helper()
	resp, err := upPost(t, context.Background(), u, url, "")
	if err == nil {
		_ = resp.Body.Close()
		t.Fatalf("POST %s answered %s", url, resp.Status)
	}
	return err
}

func upRead(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return string(b)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestUpstreamKeepsConnections: answers read to their end, streamed
// (chunked) or not, leave their connection for the next request: three
// requests, one connection, kept idle afterwards.
func TestUpstreamKeepsConnections(t *testing.T) {
	srv, opened, _ := countConns(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/stream" {
			w.Header().Set("Content-Type", "text/event-stream")
			for range 3 {
				_, _ = io.WriteString(w, "data: "+string(b)+"\n\n")
				http.NewResponseController(w).Flush()
			}
			return
		}
		_, _ = w.Write(b)
	}))
	u := newUpstream(time.Minute)
	defer u.CloseIdleConnections()
	for i, path := range []string{"/json", "/stream", "/json"} {
		resp, err := upPost(t, context.Background(), u, srv.URL+path, "hi")
		if err != nil {
			t.Fatal(err)
		}
		got, want := upRead(t, resp), "hi"
		if path == "/stream" {
			want = strings.Repeat("data: hi\n\n", 3)
		}
		if got != want {
			t.Fatalf("request %d: body %q, want %q", i, got, want)
		}
	}
	if n := opened.Load(); n != 1 {
		t.Fatalf("%d connections opened for three requests, want 1", n)
	}
	if n := u.idleConns(); n != 1 {
		t.Fatalf("%d idle connections kept, want 1", n)
	}
}

// TestUpstreamEngineClosedIdle: a connection the engine closed while it
// was idle (its keep-alive timeout) is not used; the request goes on a new
// one without an error.
func TestUpstreamEngineClosedIdle(t *testing.T) {
	srv, opened, closed := countConns(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	u := newUpstream(time.Minute)
	defer u.CloseIdleConnections()
	resp, err := upPost(t, context.Background(), u, srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	upRead(t, resp)
	srv.CloseClientConnections()
	waitUntil(t, "the engine to close its idle connection", func() bool { return closed.Load() == 1 })
	resp, err = upPost(t, context.Background(), u, srv.URL, "")
	if err != nil {
		t.Fatalf("request after the engine closed the idle connection: %v", err)
	}
	if got := upRead(t, resp); got != "ok" {
		t.Fatalf("body %q", got)
	}
	if n := opened.Load(); n != 2 {
		t.Fatalf("%d connections opened, want 2", n)
	}
}

// TestUpstreamClosedEarly: a body closed before its end closes its
// connection (the engine sees the client gone) and ends a read waiting
// on it in another goroutine; the connection is not kept.
func TestUpstreamClosedEarly(t *testing.T) {
	gone := make(chan struct{})
	srv, _, closed := countConns(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "data: 1\n\n")
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
		close(gone)
	}))
	u := newUpstream(time.Minute)
	defer u.CloseIdleConnections()
	resp, err := upPost(t, context.Background(), u, srv.URL, "") //nolint:bodyclose // closing it is what the test does, below
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := resp.Body.Read(buf); err != nil || string(buf[:n]) != "data: 1\n\n" {
		t.Fatalf("first read %q, %v", buf[:n], err)
	}
	readErr := make(chan error, 1)
	go func() {
		_, err := resp.Body.Read(buf)
		readErr <- err
	}()
	time.Sleep(20 * time.Millisecond) // let the read wait (it ends either way)
	_ = resp.Body.Close()
	select {
	case err := <-readErr:
		if err == nil {
			t.Fatal("a read waiting on a closed body returned no error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a read waiting on a closed body did not end")
	}
	<-gone
	waitUntil(t, "the engine's connection to close", func() bool { return closed.Load() == 1 })
	if n := u.idleConns(); n != 0 {
		t.Fatalf("%d idle connections kept after a body closed early, want 0", n)
	}
}

// TestUpstreamContextEnds: the request's context ending ends a read of
// the body waiting on the engine, and the connection.
func TestUpstreamContextEnds(t *testing.T) {
	srv, _, closed := countConns(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	}))
	u := newUpstream(time.Minute)
	defer u.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := upPost(t, ctx, u, srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	time.AfterFunc(20*time.Millisecond, cancel)
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("reading past the context's end gave no error")
	}
	waitUntil(t, "the engine's connection to close", func() bool { return closed.Load() == 1 })
}

// TestUpstreamHeaderTimeout: an engine that sends no headers within the
// header timeout fails the request with a timeout, which is not retried
// elsewhere (the engine may be working on it).
func TestUpstreamHeaderTimeout(t *testing.T) {
	release := make(chan struct{})
	srv, _, _ := countConns(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer close(release)
	u := newUpstream(50 * time.Millisecond)
	defer u.CloseIdleConnections()
	start := time.Now()
	err := upFail(t, u, srv.URL)
	ne, ok := errors.AsType[net.Error](err)
	if !ok || !ne.Timeout() {
		t.Fatalf("err %v, want a timeout", err)
	}
	if retryable(err) {
		t.Fatalf("a header timeout is retryable: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the header timeout took %s", d)
	}
}

// TestUpstreamIdleExpires: an idle connection is closed after the idle
// timeout; one whose answer says Connection: close is not kept at all.
func TestUpstreamIdleExpires(t *testing.T) {
	srv, _, closed := countConns(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/close" {
			w.Header().Set("Connection", "close")
		}
		_, _ = io.WriteString(w, "ok")
	}))
	u := newUpstream(time.Minute)
	u.idleTimeout = 50 * time.Millisecond
	defer u.CloseIdleConnections()
	resp, err := upPost(t, context.Background(), u, srv.URL+"/close", "")
	if err != nil {
		t.Fatal(err)
	}
	upRead(t, resp)
	if n := u.idleConns(); n != 0 {
		t.Fatalf("a Connection: close answer left %d idle connections", n)
	}
	waitUntil(t, "the closed connection", func() bool { return closed.Load() == 1 })
	resp, err = upPost(t, context.Background(), u, srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	upRead(t, resp)
	waitUntil(t, "the idle connection to expire", func() bool { return closed.Load() == 2 && u.idleConns() == 0 })
}

// TestUpstreamDialFailureRetryable: an engine that is not listening fails
// the request with an error forward sends to another replica.
func TestUpstreamDialFailureRetryable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	u := newUpstream(time.Minute)
	defer u.CloseIdleConnections()
	err = upFail(t, u, "http://"+addr+"/v1/chat/completions")
	if err == nil || !retryable(err) {
		t.Fatalf("err %v, want a retryable dial error", err)
	}
	if got := connFailure(err); got != "connection refused" {
		t.Fatalf("connFailure %q", got)
	}
}

// idleCounted is idleConns, failing the test when the pool's own count
// disagrees with it.
func idleCounted(t *testing.T, u *upstream) int {
	t.Helper()
	n := u.idleConns()
	u.mu.Lock()
	counted := u.nidle
	u.mu.Unlock()
	if n != counted {
		t.Fatalf("%d idle connections, counted %d", n, counted)
	}
	return n
}

// TestUpstreamIdleCapTotal: past the cap on idle connections to all
// engines together, the one kept longest ago is closed.
func TestUpstreamIdleCapTotal(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	first, _, firstClosed := countConns(t, h)
	u := newUpstream(time.Minute)
	u.maxIdleTotal = 2
	defer u.CloseIdleConnections()
	for _, url := range []string{first.URL} {
		resp, err := upPost(t, context.Background(), u, url, "")
		if err != nil {
			t.Fatal(err)
		}
		upRead(t, resp)
	}
	for range 2 {
		srv, _, _ := countConns(t, h)
		resp, err := upPost(t, context.Background(), u, srv.URL, "")
		if err != nil {
			t.Fatal(err)
		}
		upRead(t, resp)
	}
	if n := idleCounted(t, u); n != 2 {
		t.Fatalf("%d idle connections, want the cap 2", n)
	}
	waitUntil(t, "the oldest idle connection to close", func() bool { return firstClosed.Load() == 1 })
	// Expiry and taking keep the count.
	u.idleTimeout = time.Millisecond
	resp, err := upPost(t, context.Background(), u, first.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	upRead(t, resp)
	waitUntil(t, "the idle connection to expire", func() bool { return u.idleConns() == 2 })
	idleCounted(t, u)
}

// TestUpstreamPrunesClosedIdle: an idle connection the engine closed
// (its keep-alive timeout) below the one used next is closed when a
// connection is kept, not held until it expires.
func TestUpstreamPrunesClosedIdle(t *testing.T) {
	var mu sync.Mutex
	var conns []net.Conn
	var closed atomic.Int64
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/wait" {
			w.WriteHeader(http.StatusOK)
			http.NewResponseController(w).Flush()
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		case http.StateClosed:
			closed.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	u := newUpstream(time.Minute)
	defer u.CloseIdleConnections()
	// Two connections at once, kept in the order A, B (B on top).
	a, err := upPost(t, context.Background(), u, srv.URL+"/wait", "")
	if err != nil {
		close(release)
		t.Fatal(err)
	}
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := upPost(t, context.Background(), u, srv.URL+"/wait", "") //nolint:bodyclose // read and closed by the test, below
		if err != nil {
			t.Error(err)
		}
		done <- resp
	}()
	waitUntil(t, "two connections", func() bool { mu.Lock(); defer mu.Unlock(); return len(conns) == 2 })
	close(release)
	b := <-done
	if b == nil {
		t.FailNow()
	}
	upRead(t, a)
	upRead(t, b)
	if n := idleCounted(t, u); n != 2 {
		t.Fatalf("%d idle connections, want 2", n)
	}
	// The engine closes the one at the bottom, A (its first).
	mu.Lock()
	_ = conns[0].Close()
	mu.Unlock()
	waitUntil(t, "the engine to close A", func() bool { return closed.Load() == 1 })
	resp, err := upPost(t, context.Background(), u, srv.URL, "") // on B
	if err != nil {
		t.Fatal(err)
	}
	upRead(t, resp)
	if n := idleCounted(t, u); n != 1 {
		t.Fatalf("%d idle connections after the engine closed one, want 1", n)
	}
}

// TestUpstreamWaitingWhileEngineWorks: roundTrip's waiting runs once the
// request is written and before the answer is read: here the engine
// answers only after waiting ran (it would time out otherwise).
func TestUpstreamWaitingWhileEngineWorks(t *testing.T) {
	called := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		select {
		case <-called:
			_, _ = io.WriteString(w, "after")
		case <-time.After(5 * time.Second):
			w.WriteHeader(http.StatusGatewayTimeout)
		}
	}))
	defer srv.Close()
	u := newUpstream(time.Minute)
	defer u.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("hi"))
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	resp, err := u.roundTrip(req, func() { calls++; close(called) })
	if err != nil {
		t.Fatal(err)
	}
	if got := upRead(t, resp); resp.StatusCode != http.StatusOK || got != "after" || calls != 1 {
		t.Fatalf("status %d, body %q, waiting ran %d times; want 200, the answer given after waiting ran, once", resp.StatusCode, got, calls)
	}
}
