package fetch

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/llmgw/llmgw/testkit/weightsrv"
)

// TestPeerNotBegunYet: two nodes told to fetch a source at once, the one
// naming the other as its peer asking first: the peer answers 404 until
// its own order arrives, and the node asks again rather than go to the
// source, which serves one copy. A peer that still has no such entry once
// PeerStartGrace is over is left for the source.
func TestPeerNotBegunYet(t *testing.T) {
	m, origin := weightsrv.New(t)
	m.Files["m/v/w.gguf"] = weightsrv.RandomBytes(300<<10, 41)
	src := origin.URL + "/m/v/w.gguf"
	tlsFor := peerPKI(t, "node01", "node02")
	s1, c1 := tlsFor("node01")
	_, c2 := tlsFor("node02")
	a := newCache(t, Options{PeerClient: c1})
	peerA, notFound := countingStatus(a.PeerHandler(), http.StatusNotFound)
	_, addrA := servePeer(t, peerA, s1(""))
	b := newCache(t, Options{PeerClient: c2, PeerPoll: 20 * time.Millisecond})

	bDone := make(chan error, 1)
	go func() {
		_, err := b.ResolveFrom(context.Background(), src, []Peer{{Node: "node01", Address: addrA}}, nil)
		bDone <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); notFound.Load() == 0; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("node02 never asked node01")
		}
	}
	// node01's order arrives.
	if _, err := a.Resolve(context.Background(), src, nil); err != nil {
		t.Fatal(err)
	}
	if err := <-bDone; err != nil {
		t.Fatal(err)
	}
	if n := m.Count("m/v/w.gguf"); n != 1 {
		t.Errorf("the source served the file %d times, want once: node02 went to it rather than wait for its peer", n)
	}

	// A peer that never begins: left once the grace is over.
	m.Files["n/v/w.gguf"] = weightsrv.RandomBytes(10<<10, 42)
	c := newCache(t, Options{PeerClient: c2, PeerPoll: 20 * time.Millisecond, PeerStartGrace: 200 * time.Millisecond})
	start := time.Now()
	if _, err := c.ResolveFrom(context.Background(), origin.URL+"/n/v/w.gguf", []Peer{{Node: "node01", Address: addrA}}, nil); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Errorf("left a peer answering 404 after %s, before the grace of 200ms", took)
	}
	if n := m.Count("n/v/w.gguf"); n != 1 {
		t.Errorf("the source served the file %d times, want once (from the source, the peer never holding it)", n)
	}
}
