package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/gateway"
	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/router"
)

type oneKey struct{}

func (oneKey) Authenticate(_ context.Context, key string) (request.Principal, error) {
	if key == "good" {
		return request.Principal{KeyID: "k1", Project: "p"}, nil
	}
	return request.Principal{}, request.ErrUnauthenticated
}

type noModels struct{}

func (noModels) Lookup(string) (request.Model, bool) { return request.Model{}, false }
func (noModels) List() []gateway.ModelInfo           { return nil }

// TestClientListenerCountsUnauthenticated: connections count against the
// bound until a request on them authenticates or they close; one beyond
// the bound is closed unanswered; an authenticated keep-alive does not
// count.
func TestClientListenerCountsUnauthenticated(t *testing.T) {
	const limit = 3
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := newClientListener(raw, limit, slog.New(slog.DiscardHandler))
	gw := gateway.New(gateway.Config{}, gateway.Deps{Catalog: noModels{}, Auth: oneKey{}, Routes: router.New()})
	srv := &http.Server{Handler: gw.Handler(), ReadHeaderTimeout: time.Minute, ConnContext: cl.connContext}
	go func() { _ = srv.Serve(cl) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := raw.Addr().String()

	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	waitCount := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for cl.unauthenticated.Load() != want {
			if time.Now().After(deadline) {
				t.Fatalf("unauthenticated connections = %d, want %d", cl.unauthenticated.Load(), want)
			}
			time.Sleep(5 * time.Millisecond) // polling a condition
		}
	}
	// get asks for /v1/models on c and returns the status and whether the
	// answer said Connection: close.
	get := func(c net.Conn, key string) (status int, closing bool, err error) {
		if _, err := io.WriteString(c, "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+key+"\r\n\r\n"); err != nil {
			return 0, false, err
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0, false, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Close, nil
	}

	partial := []net.Conn{dial(), dial()}
	waitCount(2)
	kept := dial()
	if status, closing, err := get(kept, "good"); err != nil || status != http.StatusOK || closing {
		t.Fatalf("an authenticated request: %d (close %v), %v; want 200 on a kept-alive connection", status, closing, err)
	}
	waitCount(2) // the authenticated keep-alive no longer counts
	partial = append(partial, dial())
	waitCount(limit)

	over := dial()
	status, _, err := get(over, "good")
	if err == nil {
		t.Fatalf("a connection over the bound was answered %d", status)
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("a connection over the bound: %v; want it closed", err)
	}
	if cl.refusedEver.Load() != 1 {
		t.Errorf("refused = %d, want 1", cl.refusedEver.Load())
	}

	// A bad key is answered 401 and its connection closed: it leaves the
	// count by closing, not by authenticating.
	partial[0].Close()
	waitCount(limit - 1)
	bad := dial()
	if status, closing, err := get(bad, "bad"); err != nil || status != http.StatusUnauthorized || !closing {
		t.Fatalf("a bad key: %d (close %v), %v; want 401 with Connection: close", status, closing, err)
	}
	waitCount(limit - 1)
	if status, _, err := get(dial(), "good"); err != nil || status != http.StatusOK {
		t.Fatalf("under the bound again: %d, %v; want 200", status, err)
	}
}
