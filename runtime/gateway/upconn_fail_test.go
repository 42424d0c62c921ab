//go:build unix

package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rawEngine serves each connection with handle (n counts connections
// from 0) on a plain TCP listener, for answers net/http's server would
// not give. It returns the engine's URL.
func rawEngine(t *testing.T, handle func(n int, c net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = l.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; ; n++ {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(n, c)
			}()
		}
	}()
	return "http://" + l.Addr().String() + "/v1/chat/completions"
}

// readWhole reads one request with its body.
func readWhole(br *bufio.Reader) (string, error) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return "", err
	}
	b, err := io.ReadAll(req.Body)
	return string(b), err
}

func answer(c net.Conn, body string) {
	_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
}

// TestUpstreamPostNotResent: an engine that read a POST whole on a kept
// connection and closed it unanswered (a worker that crashed) does not
// get it again: it may be generating it. With an Idempotency-Key the
// request may be sent twice, and is, on a new connection (http.Transport's
// rule).
func TestUpstreamPostNotResent(t *testing.T) {
	for _, key := range []bool{false, true} {
		var got atomic.Int64
		url := rawEngine(t, func(n int, c net.Conn) {
			br := bufio.NewReader(c)
			for i := 0; ; i++ {
				body, err := readWhole(br)
				if err != nil {
					return
				}
				got.Add(1)
				if n == 0 && i == 1 {
					return // read whole, closed without an answer
				}
				answer(c, body)
			}
		})
		u := newUpstream(time.Minute)
		for i, body := range []string{"one", "two"} {
			req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if key {
				req.Header.Set("Idempotency-Key", "k"+body)
			}
			resp, err := u.RoundTrip(req)
			switch {
			case i == 1 && !key:
				if err == nil {
					_ = resp.Body.Close()
					t.Fatal("a POST the engine read and left unanswered was answered: it was sent again")
				}
				if !retryable(err) {
					t.Fatalf("err %v: not a connection closed unanswered", err)
				}
			case err != nil:
				t.Fatalf("idempotency key %v, request %d: %v", key, i, err)
			default:
				if b := upRead(t, resp); b != body {
					t.Fatalf("body %q, want %q", b, body)
				}
			}
		}
		want := int64(2)
		if key {
			want = 3
		}
		if n := got.Load(); n != want {
			t.Fatalf("idempotency key %v: the engine received %d requests, want %d", key, n, want)
		}
		u.CloseIdleConnections()
	}
}

// unpeekable hides the socket from open, as on systems where a kept
// connection cannot be looked at: the request finds the engine's close
// by writing.
type unpeekable struct{ net.Conn }

// TestUpstreamResendsUnwritten: a request none of whose bytes could be
// written on a kept connection (the engine had reset it) goes once more
// on a new connection.
func TestUpstreamResendsUnwritten(t *testing.T) {
	var closed sync.WaitGroup
	closed.Add(1)
	url := rawEngine(t, func(n int, c net.Conn) {
		br := bufio.NewReader(c)
		for {
			body, err := readWhole(br)
			if err != nil {
				return
			}
			answer(c, body)
			if n == 0 {
				_ = c.(*net.TCPConn).SetLinger(0)
				_ = c.Close() // reset, at once
				closed.Done()
				return
			}
		}
	})
	u := newUpstream(time.Minute)
	defer u.CloseIdleConnections()
	var dials atomic.Int64
	u.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		c, err := u.dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return unpeekable{c}, nil
	}
	for i, body := range []string{"one", "two"} {
		resp, err := upPost(t, context.Background(), u, url, body)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if got := upRead(t, resp); got != body {
			t.Fatalf("request %d: body %q, want %q", i, got, body)
		}
		if i == 0 {
			closed.Wait()
		}
	}
	if n := dials.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

// TestUpstreamResetDuringBody: an engine that resets the connection while
// a large body is still being written (it crashed) fails the request with
// an error that sends it to another replica, as a reset before the body
// does; net/http reports the failed write as a failed read of the body.
func TestUpstreamResetDuringBody(t *testing.T) {
	url := rawEngine(t, func(_ int, c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		_ = c.(*net.TCPConn).SetLinger(0)
	})
	u := newUpstream(time.Minute)
	defer u.CloseIdleConnections()
	for _, size := range []int{100, 64 << 10, 4 << 20} {
		_, err := upPost(t, context.Background(), u, url, strings.Repeat("x", size)) //nolint:bodyclose // it fails
		if err == nil {
			t.Fatalf("body of %d bytes: answered", size)
		}
		if !retryable(err) || !closedUnanswered(err) {
			t.Fatalf("body of %d bytes: err %v (%T) is not retryable", size, err, err)
		}
	}
}

// TestUpstreamEarlyAnswer: an engine that answers before reading the
// whole body (413 for a body too large) and closes has that answer
// relayed, not a write error; its connection is not kept.
func TestUpstreamEarlyAnswer(t *testing.T) {
	url := rawEngine(t, func(_ int, c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 413 Request Entity Too Large\r\nContent-Length: 9\r\nConnection: close\r\n\r\ntoo large")
	})
	u := newUpstream(time.Minute)
	defer u.CloseIdleConnections()
	resp, err := upPost(t, context.Background(), u, url, strings.Repeat("x", 32<<20))
	if err != nil {
		t.Fatalf("the engine's early answer was lost: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || string(b) != "too large" {
		t.Fatalf("answer %s %q", resp.Status, b)
	}
	if n := u.idleConns(); n != 0 {
		t.Fatalf("%d connections kept after a failed write", n)
	}
}

// TestUpstreamHeaderLimit: response headers past 10 MiB, or more than five
// interim answers, fail the request (the engine answered: not retried)
// instead of being held.
func TestUpstreamHeaderLimit(t *testing.T) {
	url := rawEngine(t, func(_ int, c net.Conn) {
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		if req.URL.Query().Has("interim") {
			for range 10 {
				if _, err := io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"); err != nil {
					return
				}
			}
			answer(c, "ok")
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Junk: ")
		chunk := strings.Repeat("a", 64<<10)
		for sent := 0; sent < 11<<20; sent += len(chunk) {
			if _, err := io.WriteString(c, chunk); err != nil {
				return
			}
		}
		_, _ = io.WriteString(c, "\r\nContent-Length: 0\r\n\r\n")
	})
	u := newUpstream(time.Minute)
	defer u.CloseIdleConnections()
	err := upFail(t, u, url)
	if !errors.Is(err, errHeadersTooLarge) || retryable(err) {
		t.Fatalf("11 MiB of headers: err %v, want %v, not retryable", err, errHeadersTooLarge)
	}
	err = upFail(t, u, url+"?interim")
	if !strings.Contains(err.Error(), "interim") || retryable(err) {
		t.Fatalf("10 interim answers: err %v", err)
	}
	if n := u.idleConns(); n != 0 {
		t.Fatalf("%d connections kept", n)
	}
}

// TestUpstream101NotKept: an engine that switches protocols though the
// request asked for no upgrade fails the request, and its connection is
// closed, never kept for another request.
func TestUpstream101NotKept(t *testing.T) {
	url := rawEngine(t, func(_ int, c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := readWhole(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n")
		_, _ = br.ReadByte() // until the gateway closes
	})
	u := newUpstream(time.Minute)
	defer u.CloseIdleConnections()
	err := upFail(t, u, url)
	if !strings.Contains(err.Error(), "101") || retryable(err) {
		t.Fatalf("err %v", err)
	}
	if n := u.idleConns(); n != 0 {
		t.Fatalf("%d connections kept after a 101", n)
	}
}
