package fetch

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync/atomic"
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

// laterClock sets c's idle clock (Cache.now, which every download's
// Progress reads: newProgress) to the real one moved on by what the
// returned function adds: a test makes time pass for the idle clock
// without sleeping. Called before c serves or fetches anything.
func laterClock(c *Cache) (advance func(time.Duration)) {
	var ahead atomic.Int64
	c.now = func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	return func(d time.Duration) { ahead.Add(int64(d)) }
}

// TestStalledByIdleClock: the progress sent to the control plane says
// stalled by the same clock followers are told (X-Llmgw-Fetching-Idle):
// stalled once the download moved nothing for stall_after, and not
// stalled as soon as it goes on to the next source, before that source
// sends a byte.
func TestStalledByIdleClock(t *testing.T) {
	const stall = 2 * time.Second
	c := newCache(t, Options{StallAfter: stall})
	advance := laterClock(c)
	reports := make(chan Progress, 1)
	p := c.newProgress()
	p.Begin()
	cl := &call{done: make(chan struct{}), cancel: func() {}, progress: p, watch: map[int]func(Progress){
		0: func(got Progress) {
			select {
			case reports <- got:
			default: // the test reads the latest only when it asks
			}
		},
	}}
	stop, ended := make(chan struct{}), make(chan struct{})
	advance(stall + 100*time.Millisecond) // a wait on a peer that stalled
	go func() {
		defer close(ended)
		c.reportLoop("https://mirror.invalid/m/v/w.gguf", p, cl, stop)
	}()
	defer func() { close(stop); <-ended }()
	if got := <-reports; !got.Stalled {
		t.Fatalf("no byte for longer than stall_after by the idle clock: %+v, want stalled", got)
	}
	p.Moved() // on to the next source, which has sent nothing yet
	for deadline := time.Now().Add(10 * time.Second); ; {
		select {
		case got := <-reports:
			if !got.Stalled {
				return
			}
		case <-time.After(time.Until(deadline)):
			t.Fatal("still reported stalled after the download went on to the next source")
		}
	}
}

// TestGrowingFileNotCutAfterSourceSwitch: a node whose last byte is older
// than stall_after because it just went on to another source (it waited
// on a peer that stalled) keeps serving a follower the file as it grows,
// rather than cutting it at once for the follower to reconnect: the move
// to a new source counts as a move, as it does in X-Llmgw-Fetching-Idle.
func TestGrowingFileNotCutAfterSourceSwitch(t *testing.T) {
	const stall = 2 * time.Second
	c := newCache(t, Options{StallAfter: stall})
	advance := laterClock(c)
	src := "https://mirror.invalid/m/v/w.gguf"
	body := weightsrv.RandomBytes(256<<10, 93)
	half := len(body) / 2
	cl, partial := growingCall(t, c, src, body, half) // its last byte, as far as the follower's server knows
	advance(stall + 100*time.Millisecond)             // the wait on the stalled peer: no byte for longer than stall_after
	cl.progress.Moved()                               // then on to the next source, which has sent nothing yet

	srv := httptest.NewServer(c.PeerHandler())
	defer srv.Close()
	resp := follow(t, context.Background(), srv.URL, http.MethodGet, src, "w.gguf")
	defer resp.Body.Close()
	got := make([]byte, half)
	if _, err := io.ReadFull(resp.Body, got); err != nil {
		t.Fatalf("reading the bytes written so far: %v", err)
	}
	// The new source's bytes land.
	fh, err := os.OpenFile(partial, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.Write(body[half:]); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("the follower was cut after %d bytes, its peer having just gone on to another source: %v", half+len(rest), err)
	}
	if !bytes.Equal(append(got, rest...), body) {
		t.Error("the follower's bytes differ from the file")
	}
	close(cl.done)
}
