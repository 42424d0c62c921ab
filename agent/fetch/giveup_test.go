package fetch

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/llmgw/testkit/weightsrv"
)

// TestGiveUpRestartsOnMoveToNewSource: with give_up_after close to
// stall_after, a node waits on a peer for longer than give_up_after (the
// idle clock is moved on by that much: laterClock), no byte moving, until
// the peer says its own fetch stalled; the node then goes on to the
// source, whose first answer is a 503. The move to the source restarts
// the one idle clock the stall report and give_up_after both read, so the
// node retries and the source, answering the next request, delivers: it
// is not given up at the source's first failure for the time it spent
// waiting on the peer.
func TestGiveUpRestartsOnMoveToNewSource(t *testing.T) {
	const stall, giveUp = 10 * time.Second, 12 * time.Second
	m, _ := weightsrv.New(t)
	body := weightsrv.RandomBytes(64<<10, 45)
	m.Files["m/v/w.gguf"] = body
	var asked atomic.Int32
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if asked.Add(1) == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		m.ServeHTTP(w, r)
	}))
	defer origin.Close()
	src := origin.URL + "/m/v/w.gguf"

	tlsFor := peerPKI(t, "node01", "node02")
	s1, _ := tlsFor("node01")
	_, c2 := tlsFor("node02")
	var logs logBuffer
	b := newCache(t, Options{PeerClient: c2, PeerPoll: 10 * time.Millisecond, StallAfter: stall, GiveUpAfter: giveUp, Logger: logs.logger()})
	advance := laterClock(b)
	// The peer waits on a peer of its own (idle 0) holding nothing; by
	// its second answer the node has waited past give_up_after, and then
	// the peer's own fetch has moved nothing for longer than stall_after.
	var polls atomic.Int32
	_, addr := servePeer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		idle := time.Duration(0)
		if polls.Add(1) > 1 {
			idle = stall + time.Second
		} else {
			advance(giveUp + time.Second)
		}
		w.Header().Set(fetchingHeader, "0")
		w.Header().Set(idleHeader, strconv.FormatInt(idle.Milliseconds(), 10))
		w.WriteHeader(http.StatusServiceUnavailable)
	}), s1(""))

	path, err := b.ResolveFrom(context.Background(), src, []Peer{{Node: "node01", Address: addr}}, nil)
	if err != nil {
		t.Fatalf("the fetch, after a wait on a peer longer than give_up_after and a move to the source: %v", err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, body) {
		t.Error("the file differs from the source's")
	}
	if n := polls.Load(); n < 2 {
		t.Fatalf("the peer was asked %d times, want at least 2: the node never waited on it, the test proves nothing", n)
	}
	if n := asked.Load(); n != 2 {
		t.Errorf("the source was asked %d times, want 2 (a 503, then the file)", n)
	}
	if l := logs.String(); !strings.Contains(l, "its own fetch moved no byte") {
		t.Errorf("the node did not leave its peer for a stall, the test proves nothing:\n%s", l)
	}
}
