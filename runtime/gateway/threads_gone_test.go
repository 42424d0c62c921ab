package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/runtime/store"
)

// goneWriter is a client connection found gone once gone is set: its
// writes land in the buffer until a flush fails, as net/http's do, and
// fail after it.
type goneWriter struct {
	http.ResponseWriter
	gone   *atomic.Bool
	failed bool
}

func (w *goneWriter) Write(b []byte) (int, error) {
	if w.failed {
		return 0, errors.New("client gone")
	}
	return w.ResponseWriter.Write(b)
}

func (w *goneWriter) FlushError() error {
	if w.failed || w.gone.Load() {
		w.failed = true
		return errors.New("client gone")
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *goneWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// TestThreadStreamClientGoneAtItsEnd: a streamed turn whose client is
// found gone when its last events come (the flush before the store
// write fails) is not stored: the client did not get the answer whole,
// and the thread is left as it was (docs/client-apis.md), on a chat
// completions stream (passed through) and a /v1/messages one
// (translated).
func TestThreadStreamClientGoneAtItsEnd(t *testing.T) {
	for _, tt := range []struct {
		path, body string
	}{
		{"/v1/chat/completions", `{"model":"m","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/messages", `{"model":"m","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		t.Run(strings.TrimPrefix(tt.path, "/v1/"), func(t *testing.T) {
			st := contentStore(t, 24)
			var gone atomic.Bool
			seen := make(chan struct{})
			chunk := func(delta, finish string) string {
				return fmt.Sprintf(`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":%s,"finish_reason":%s}]}`+"\n\n", delta, finish)
			}
			eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				rc := http.NewResponseController(w)
				_, _ = w.Write([]byte(chunk(`{"role":"assistant","content":"Hello"}`, "null")))
				_ = rc.Flush()
				_, _ = w.Write([]byte(chunk(`{"content":" world"}`, "null")))
				_ = rc.Flush()
				select {
				case <-seen: // the client got all but the end
				case <-time.After(10 * time.Second):
					return
				}
				gone.Store(true)
				// The end in one write: the finish and [DONE].
				_, _ = w.Write([]byte(chunk(`{}`, `"stop"`) + "data: [DONE]\n\n"))
			}))
			t.Cleanup(eng.Close)
			rt := router.New()
			rt.SetEndpoints("m", []router.Endpoint{{ReplicaID: "m-0", URL: eng.URL, Weight: 1}})
			gw := New(Config{}, Deps{Catalog: unsizedCatalog{}, Auth: projectAuth{}, Routes: rt, Content: st})
			h := gw.Handler()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h.ServeHTTP(&goneWriter{ResponseWriter: w, gone: &gone}, r)
			}))
			t.Cleanup(func() { srv.Close(); gw.Close() })
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+tt.path, strings.NewReader(tt.body))
			req.Header.Set("Authorization", "Bearer key-proj")
			req.Header.Set("X-Api-Key", "key-proj")
			req.Header.Set("X-Llmgw-Thread", "t1")
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			sc := bufio.NewScanner(resp.Body)
			found := false
			for !found && sc.Scan() {
				found = strings.Contains(sc.Text(), "world")
			}
			if !found {
				t.Fatal("the stream ended without its text")
			}
			close(seen)
			for sc.Scan() { // to the end the gateway sends
			}
			_, err = st.(ThreadContent).GetThread(t.Context(), "proj", "t1", time.Now())
			if !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("the thread after a stream whose client was gone at its end: %v, want none stored", err)
			}
		})
	}
}
