package fetch

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/llmgw/llmgw/testkit/weightsrv"
)

// TestIdleBeforeProgressStarts: a download asked about before its progress
// started (here held behind an abandoned one letting go of the partial
// files; otherwise for the instant its goroutine starts) tells a follower
// it idled since it began, not since the epoch, which a follower reads as
// a stall and leaves at once for the source (a second copy).
func TestIdleBeforeProgressStarts(t *testing.T) {
	m, origin := weightsrv.New(t)
	m.Files["m/v/w.gguf"] = weightsrv.RandomBytes(64<<10, 91)
	const stall = 10 * time.Second
	c := newCache(t, Options{StallAfter: stall})
	src := origin.URL + "/m/v/w.gguf"
	prev := &call{done: make(chan struct{}), abandoned: true, cancel: func() {}, watch: map[int]func(Progress){}}
	c.mu.Lock()
	c.inflight[src] = prev
	c.mu.Unlock()
	done := make(chan error, 1)
	go func() { _, err := c.Resolve(context.Background(), src, nil); done <- err }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		c.mu.Lock()
		started := c.inflight[src] != prev
		c.mu.Unlock()
		if started {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the new download never started")
		}
	}
	req := httptest.NewRequest(http.MethodHead, PeerPrefix+Key(src)+"/", nil)
	req.Header.Set(followHeader, "1")
	rec := httptest.NewRecorder()
	c.PeerHandler().ServeHTTP(rec, req)
	ms, err := strconv.ParseInt(rec.Header().Get(idleHeader), 10, 64)
	if rec.Code != http.StatusServiceUnavailable || err != nil || time.Duration(ms)*time.Millisecond > stall {
		t.Errorf("asked before its progress started: %d, %s %q, want 503 and idle under %s", rec.Code, idleHeader, rec.Header().Get(idleHeader), stall)
	}
	close(prev.done)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
