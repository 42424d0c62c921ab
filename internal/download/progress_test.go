package download

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// testClock is an idle clock a test moves on by hand.
type testClock struct{ at atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	c.at.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *testClock) now() time.Time          { return time.Unix(0, c.at.Load()) }
func (c *testClock) advance(d time.Duration) { c.at.Add(int64(d)) }

// Bytes held elsewhere (a peer this download waits for) are its bytes, and
// their growth moves its idle clock.
func TestProgressElsewhere(t *testing.T) {
	clk := newTestClock()
	p := Progress{Clock: clk.now}
	p.Elsewhere(0)
	if got := p.Idle(); got != 0 {
		t.Fatalf("Elsewhere(0) on a fresh progress: Idle() = %s, want 0 (the idle clock starts now)", got)
	}
	clk.advance(time.Second)
	p.Elsewhere(0)
	if got := p.Idle(); got != time.Second {
		t.Errorf("Idle() = %s a second after the last move, want 1s (no growth moves the idle clock)", got)
	}
	p.Elsewhere(100)
	if p.Bytes() != 100 {
		t.Errorf("Bytes() = %d, want 100", p.Bytes())
	}
	if got := p.Idle(); got != 0 {
		t.Errorf("growth did not move the idle clock: Idle() = %s, want 0", got)
	}
}

// A download that waits mid-file on a peer holding fewer bytes than it
// does reports its own, not the peer's: Done does not go back for a wait
// (review-session4c N2). The peer's growth still moves the idle clock and
// shows in Moving (what the download's own followers watch), and the
// download's own transfer, started again, is counted afresh.
func TestProgressElsewhereBelowHeld(t *testing.T) {
	clk := newTestClock()
	p := Progress{Clock: clk.now}
	p.start()
	p.received(900)
	clk.advance(time.Second)
	p.Elsewhere(100)
	if got := p.Bytes(); got != 900 {
		t.Errorf("waiting on a peer at 100 bytes, holding 900: Bytes() = %d, want 900", got)
	}
	if got := p.Moving(); got != 100 {
		t.Errorf("Moving() = %d, want the peer's 100", got)
	}
	if got := p.Idle(); got != time.Second {
		t.Errorf("a peer holding fewer bytes than the download moved its idle clock before it grew: Idle() = %s, want 1s", got)
	}
	p.Elsewhere(200)
	if got := p.Idle(); got != 0 {
		t.Errorf("the peer's growth did not move the idle clock: Idle() = %s, want 0", got)
	}
	if got := p.Bytes(); got != 900 {
		t.Errorf("Bytes() = %d, want 900", got)
	}
	p.Elsewhere(1000)
	if got := p.Bytes(); got != 1000 {
		t.Errorf("the peer past the bytes held: Bytes() = %d, want 1000", got)
	}
	if _, err := (&Downloader{}).Fetch(t.Context(), t.TempDir(), nil, &p, nil); err != nil {
		t.Fatal(err)
	}
	if got, moving := p.Bytes(), p.Moving(); got != 0 || moving != 0 {
		t.Errorf("after the download's own Fetch began again: Bytes() = %d, Moving() = %d, want its own (0)", got, moving)
	}
}

// TestMovedRestartsGiveUp: a download whose last byte is older than
// GiveUpAfter (it waited that long on a peer that then failed it) and
// that goes on to a new source (Moved) is not given up at that source's
// first failed attempt: GiveUpAfter reads the same idle clock the move
// restarted, so the source, which answers the next attempt, delivers.
// Without the move the same download is given up at once.
func TestMovedRestartsGiveUp(t *testing.T) {
	const giveUp = time.Minute
	body := []byte("the weights")
	for _, moved := range []bool{true, false} {
		var asked atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if asked.Add(1) == 1 {
				http.Error(w, "busy", http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write(body)
		}))
		clk := newTestClock()
		p := &Progress{Clock: clk.now}
		p.Begin()
		clk.advance(giveUp + time.Second) // the wait on the peer: nothing moved
		if moved {
			p.Moved()
		}
		d := &Downloader{GiveUpAfter: giveUp, RetryDelay: time.Millisecond}
		_, err := fetch(t, d, srv.URL+"/m/v/w.gguf", t.TempDir(), p)
		srv.Close()
		switch {
		case moved && err != nil:
			t.Errorf("after a move to a new source: %v, want the file (the move restarts give_up_after)", err)
		case !moved && (err == nil || !strings.Contains(err.Error(), "no byte moved")):
			t.Errorf("without a move, idle past give_up_after: %v, want given up", err)
		}
	}
}
