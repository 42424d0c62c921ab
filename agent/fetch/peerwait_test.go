package fetch

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/testkit/weightsrv"
)

// A node waiting on a peer that is still fetching reports that wait as
// progress, not as a stalled fetch.
func TestPeerWaitIsNotStalled(t *testing.T) {
	m, origin := weightsrv.New(t)
	m.Files["n/v/w.gguf"] = weightsrv.RandomBytes(300<<10, 34)
	tlsFor := peerPKI(t, "node01", "node02")
	s1, c1 := tlsFor("node01")
	_, c2 := tlsFor("node02")
	a := newCache(t, Options{PeerClient: c1})
	_, addrA := servePeer(t, a.PeerHandler(), s1(""))
	m.Mu.Lock()
	hold := make(chan struct{})
	m.Hold = hold
	m.Mu.Unlock()
	src := origin.URL + "/n/v/w.gguf"
	aDone := make(chan struct{})
	go func() {
		defer close(aDone)
		_, _ = a.Resolve(context.Background(), src, nil)
	}()
	inFlight(t, a, src) // its source holds: in flight, writing nothing
	c := newCache(t, Options{PeerClient: c2, PeerPoll: 20 * time.Millisecond, StallAfter: 10 * time.Second})
	var mu sync.Mutex
	var reports []Progress
	enough := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = c.ResolveFrom(ctx, src, []Peer{{Node: "node01", Address: addrA}}, func(p Progress) {
			mu.Lock()
			reports = append(reports, p)
			if len(reports) == 10 {
				close(enough)
			}
			mu.Unlock()
		})
	}()
	// The peer's source holds until the reports are in; a failed wait
	// releases it too, so nothing is left running.
	release := sync.OnceFunc(func() {
		m.Mu.Lock()
		m.Hold = nil
		m.Mu.Unlock()
		close(hold)
		cancel()
		<-done
		<-aDone // the peer's own fetch ends once the source answers; its files are in a TempDir
	})
	t.Cleanup(release)
	// Ten reports (ProgressEvery 10ms) while the peer's source holds.
	select {
	case <-enough:
	case <-time.After(10 * time.Second):
		mu.Lock()
		n := len(reports)
		mu.Unlock()
		t.Fatalf("%d progress reports in 10s while waiting on a peer that is still fetching, want 10 (one every 10ms): the wait is not reported", n)
	}
	mu.Lock()
	rs := append([]Progress(nil), reports[:10]...)
	mu.Unlock()
	if n := m.Count("n/v/w.gguf"); n != 1 {
		t.Errorf("the source was asked %d times while the node waited, want once (the peer's): the node did not wait on its peer", n)
	}
	release()
	last := rs[len(rs)-1]
	t.Logf("%d reports while waiting on the peer; last %+v", len(rs), last)
	for i, p := range rs {
		if p.Stalled {
			t.Fatalf("report %d of %d: waiting on a peer that is fetching (stall_after 10s) is reported stalled", i, len(rs))
		}
	}
}
