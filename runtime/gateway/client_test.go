package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
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

// countingServer is an engine stand-in that counts the connections it
// accepted and closed.
type countingServer struct {
	*httptest.Server
	accepted, closed atomic.Int32
}

func newCountingServer(t *testing.T, h http.HandlerFunc) *countingServer {
	t.Helper()
	s := &countingServer{}
	s.Server = httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.accepted.Add(1)
		case http.StateClosed, http.StateHijacked:
			s.closed.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// waitFor polls cond until it holds or 10s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func testRequest(base string) *upRequest {
	return &upRequest{base: base, path: "/v1/chat/completions", requestID: "req-1", body: []byte(`{"model":"m"}`),
		deadline: time.Now().Add(time.Minute)}
}

// fetch sends one request and reads at most limit bytes of the answer
// (all of it when limit < 0) before closing the body.
func fetch(t *testing.T, c *client, ctx context.Context, req *upRequest, limit int) string {
	t.Helper()
	resp, err := c.do(ctx, req)
	if err != nil {
		t.Fatalf("request to %s: %v", req.base, err)
	}
	defer resp.Body.Close()
	var r io.Reader = resp.Body
	if limit >= 0 {
		r = io.LimitReader(resp.Body, int64(limit))
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("reading response from %s: %v", req.base, err)
	}
	return string(b)
}

func TestClientConnectionReuse(t *testing.T) {
	big := strings.Repeat("x", 64<<10)
	tests := []struct {
		name      string
		handler   http.HandlerFunc
		readLimit int // -1 reads the whole body
		wantBody  string
		wantConns int32 // accepted over three sequential requests
	}{
		{"content-length body is reused", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Length", "5")
			_, _ = io.WriteString(w, "hello")
		}, -1, "hello", 1},
		{"chunked body is reused", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "hel")
			_ = http.NewResponseController(w).Flush()
			_, _ = io.WriteString(w, "lo")
		}, -1, "hello", 1},
		{"empty body is reused", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusNoContent)
		}, -1, "", 1},
		{"informational answer is skipped", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Link", "</x>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			_, _ = io.WriteString(w, "hello")
		}, -1, "hello", 1},
		{"Connection: close is honoured", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Connection", "close")
			_, _ = io.WriteString(w, "hello")
		}, -1, "hello", 3},
		{"close-delimited body is not reused", func(w http.ResponseWriter, _ *http.Request) {
			c, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijacking: %v", err)
				return
			}
			defer c.Close()
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nhello")
		}, -1, "hello", 3},
		{"partly read chunked body is not reused", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, big)
			_ = http.NewResponseController(w).Flush()
			_, _ = io.WriteString(w, big)
		}, 10, big[:10], 3},
		{"partly read content-length body is not reused", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Length", "5")
			_, _ = io.WriteString(w, "hello")
		}, 4, "hell", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newCountingServer(t, tt.handler)
			c := newClient(time.Minute)
			defer c.Close()
			for i := range 3 {
				body := fetch(t, c, context.Background(), testRequest(s.URL), tt.readLimit)
				if body != tt.wantBody {
					t.Fatalf("request %d: body %.20q..., want %.20q...", i, body, tt.wantBody)
				}
			}
			if got := s.accepted.Load(); got != tt.wantConns {
				t.Errorf("engine accepted %d connections for 3 requests, want %d", got, tt.wantConns)
			}
			// Every connection not kept is closed, not leaked.
			wantClosed := tt.wantConns
			if tt.wantConns == 1 {
				wantClosed = 0
			}
			waitFor(t, "unreused connections closed", func() bool { return s.closed.Load() == wantClosed })
		})
	}
}

func TestClientRequestHead(t *testing.T) {
	tests := []struct {
		name, base, query, accept string
		wantPath, wantAccept      string
	}{
		{"plain", "", "", "", "/v1/chat/completions", ""},
		{"path prefix and query", "/engine/", "a=1&b=2", "", "/engine/v1/chat/completions?a=1&b=2", ""},
		{"accept relayed", "", "", "text/event-stream", "/v1/chat/completions", "text/event-stream"},
		{"accept with a newline dropped", "", "", "a\r\nX-Evil: 1", "/v1/chat/completions", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			type seen struct {
				method, uri, host, ctype, accept, id, evil, body string
				length                                           int64
			}
			got := make(chan seen, 1)
			s := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				got <- seen{r.Method, r.RequestURI, r.Host, r.Header.Get("Content-Type"), r.Header.Get("Accept"),
					r.Header.Get(requestIDHeader), r.Header.Get("X-Evil"), string(b), r.ContentLength}
			})
			c := newClient(time.Minute)
			defer c.Close()
			req := testRequest(s.URL + tt.base)
			req.rawQuery, req.accept = tt.query, tt.accept
			fetch(t, c, context.Background(), req, -1)
			g := <-got
			want := seen{http.MethodPost, tt.wantPath, strings.TrimPrefix(s.URL, "http://"), "application/json",
				tt.wantAccept, "req-1", "", `{"model":"m"}`, int64(len(`{"model":"m"}`))}
			if g != want {
				t.Errorf("engine saw %+v, want %+v", g, want)
			}
		})
	}
}

func TestClientLargeBody(t *testing.T) {
	body := []byte(`{"model":"m","prompt":"` + strings.Repeat("y", 200<<10) + `"}`)
	s := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = fmt.Fprint(w, len(b))
	})
	c := newClient(time.Minute)
	defer c.Close()
	req := testRequest(s.URL)
	req.body = body
	for range 2 {
		if got := fetch(t, c, context.Background(), req, -1); got != fmt.Sprint(len(body)) {
			t.Fatalf("engine read %s bytes, want %d", got, len(body))
		}
	}
	if got := s.accepted.Load(); got != 1 {
		t.Errorf("engine accepted %d connections, want 1", got)
	}
}

func TestClientCancelClosesConnection(t *testing.T) {
	tests := []struct {
		name string
		// headers: the engine answers headers and a first chunk before
		// waiting; otherwise it waits before answering.
		headers bool
	}{
		{"canceled awaiting headers", false},
		{"canceled reading the body", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			canceled := make(chan struct{}, 2)
			arrived := make(chan struct{}, 2)
			s := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				if r.URL.RawQuery == "quick" {
					_, _ = io.WriteString(w, "ok")
					return
				}
				if tt.headers {
					w.Header().Set("Content-Type", "text/event-stream")
					_, _ = io.WriteString(w, "data: 1\n\n")
					_ = http.NewResponseController(w).Flush()
				}
				arrived <- struct{}{}
				<-r.Context().Done()
				canceled <- struct{}{}
			})
			c := newClient(time.Minute)
			defer c.Close()
			// Warm a connection so the canceled request runs on a reused one.
			quick := testRequest(s.URL)
			quick.rawQuery = "quick"
			fetch(t, c, context.Background(), quick, -1)

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if !tt.headers {
				go func() {
					<-arrived
					cancel()
				}()
			}
			resp, err := c.do(ctx, testRequest(s.URL))
			if tt.headers {
				if err != nil {
					t.Fatalf("request: %v", err)
				}
				br := bufio.NewReader(resp.Body)
				if line, err := br.ReadString('\n'); err != nil || line != "data: 1\n" {
					t.Fatalf("first line %q, %v", line, err)
				}
				<-arrived
				cancel()
				_, err = io.ReadAll(br)
				if err == nil {
					t.Error("reading the body of a canceled request succeeded")
				}
				resp.Body.Close()
			} else if err == nil || !errors.Is(err, context.Canceled) {
				t.Fatalf("canceled request: err %v, want context.Canceled", err)
			}
			select {
			case <-canceled:
			case <-time.After(10 * time.Second):
				t.Fatal("the engine did not see the cancel within 10s")
			}
			fetch(t, c, context.Background(), quick, -1)
			if got := s.accepted.Load(); got != 2 {
				t.Errorf("engine accepted %d connections, want 2 (the canceled one not reused)", got)
			}
		})
	}
}

func TestClientHeaderTimeout(t *testing.T) {
	release := make(chan struct{})
	s := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if r.URL.RawQuery == "slow" {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	defer close(release)
	c := newClient(50 * time.Millisecond)
	defer c.Close()
	slow := testRequest(s.URL)
	slow.rawQuery = "slow"
	resp, err := c.do(context.Background(), slow)
	if err == nil {
		resp.Body.Close()
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("request without headers in time: err %v, want a timeout", err)
	}
	fetch(t, c, context.Background(), testRequest(s.URL), -1)
	fetch(t, c, context.Background(), testRequest(s.URL), -1)
	if got := s.accepted.Load(); got != 2 {
		t.Errorf("engine accepted %d connections, want 2 (the timed-out one not reused)", got)
	}
}

func TestClientEngineClosedIdleConnection(t *testing.T) {
	tests := []struct {
		name string
		// blind disables the socket check, so the request finds the
		// connection closed only when it is sent and is retried.
		blind bool
	}{
		{"seen closed before sending", false},
		{"found closed when sending", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				_, _ = io.WriteString(w, "ok")
			})
			c := newClient(time.Minute)
			defer c.Close()
			fetch(t, c, context.Background(), testRequest(s.URL), -1)
			if tt.blind {
				c.mu.Lock()
				c.hosts[s.URL].idle[0].raw = nil
				c.mu.Unlock()
			}
			s.CloseClientConnections()
			waitFor(t, "engine closed the idle connection", func() bool { return s.closed.Load() == 1 })
			if body := fetch(t, c, context.Background(), testRequest(s.URL), -1); body != "ok" {
				t.Errorf("body %q, want ok", body)
			}
			if got := s.accepted.Load(); got != 2 {
				t.Errorf("engine accepted %d connections, want 2", got)
			}
		})
	}
}

func TestClientIdleBound(t *testing.T) {
	const inFlight, maxIdle = 4, 2
	var arrived atomic.Int32
	release := make(chan struct{})
	s := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		arrived.Add(1)
		<-release
		_, _ = io.WriteString(w, "ok")
	})
	c := newClient(time.Minute)
	c.maxIdle = maxIdle
	var done sync.WaitGroup
	for range inFlight {
		done.Go(func() { fetch(t, c, context.Background(), testRequest(s.URL), -1) })
	}
	waitFor(t, "all requests at the engine", func() bool { return arrived.Load() == inFlight })
	close(release)
	done.Wait()
	if got := c.idleCount(s.URL); got != maxIdle {
		t.Errorf("%d idle connections, want %d", got, maxIdle)
	}
	waitFor(t, "connections over the bound closed", func() bool { return s.closed.Load() == inFlight-maxIdle })
	c.Close()
	waitFor(t, "idle connections closed by Close", func() bool { return s.closed.Load() == inFlight })
	// A closed client still works, without keeping connections.
	fetch(t, c, context.Background(), testRequest(s.URL), -1)
	if got := c.idleCount(s.URL); got != 0 {
		t.Errorf("%d idle connections after Close, want 0", got)
	}
}

func TestClientPrunesIdleConnections(t *testing.T) {
	s := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		_, _ = io.WriteString(w, "ok")
	})
	c := newClient(time.Minute)
	c.idleTimeout = 20 * time.Millisecond
	defer c.Close()
	fetch(t, c, context.Background(), testRequest(s.URL), -1)
	waitFor(t, "idle connection pruned", func() bool { return s.closed.Load() == 1 })
	if got := c.idleCount(s.URL); got != 0 {
		t.Errorf("%d idle connections after pruning, want 0", got)
	}
	fetch(t, c, context.Background(), testRequest(s.URL), -1)
	if got := s.accepted.Load(); got != 2 {
		t.Errorf("engine accepted %d connections, want 2", got)
	}
}

func TestClientBadEngineURL(t *testing.T) {
	tests := []struct{ base, want string }{
		{"https://127.0.0.1:1", "want http://host:port"},
		{"ftp://127.0.0.1:1", "want http://host:port"},
		{"http://%zz", "parsing engine URL"},
	}
	c := newClient(time.Minute)
	defer c.Close()
	for _, tt := range tests {
		resp, err := c.do(context.Background(), testRequest(tt.base))
		if err == nil {
			resp.Body.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.base) {
			t.Errorf("base %q: err %v, want it to name the URL and say %q", tt.base, err, tt.want)
		}
	}
}
