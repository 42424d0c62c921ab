package fetch

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/llmgw/llmgw/testkit/weightsrv"
)

// olderAgent serves h as an agent of an earlier release does: it does not
// offer to be followed, so an entry being fetched is answered 503 with its
// progress until it is complete.
func olderAgent(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.Clone(r.Context())
		r.Header.Del(followHeader)
		h.ServeHTTP(w, r)
	})
}

// TestFollowerWaitsOnPeerWaitingOnOlderAgent: during a rolling upgrade,
// node03 (an earlier release) fetches a model from a slow source, node01
// waits on it, and node02 is given node01 as its peer. node01, writing
// nothing while it waits, answers node02 503 with node03's progress, so
// node02 waits as long as that grows (far beyond stall_after) and copies
// from node01 once node01 has the files: the source serves one copy.
func TestFollowerWaitsOnPeerWaitingOnOlderAgent(t *testing.T) {
	const size = 1 << 20
	m, origin := weightsrv.New(t)
	body := weightsrv.RandomBytes(size, 95)
	m.Files["c/v/w.gguf"] = body // a set: its sizes are known from its listing
	m.Rate = size / 4            // four seconds: eight times the followers' stall_after
	tlsFor := peerPKI(t, "node01", "node02", "node03")
	s1, c1 := tlsFor("node01")
	_, c2 := tlsFor("node02")
	s3, c3 := tlsFor("node03")
	const stall = 500 * time.Millisecond
	C := newCache(t, Options{PeerClient: c3})
	_, addrC := servePeer(t, olderAgent(C.PeerHandler()), s3(""))
	A := newCache(t, Options{PeerClient: c1, PeerPoll: 20 * time.Millisecond, StallAfter: stall})
	peerA, waiting := countingStatus(A.PeerHandler(), http.StatusServiceUnavailable) // node01's 503s to node02: it waited on a waiting peer
	_, addrA := servePeer(t, peerA, s1(""))
	B := newCache(t, Options{PeerClient: c2, PeerPoll: 20 * time.Millisecond, StallAfter: stall})
	src := origin.URL + "/c/v/"

	errs := make(chan error, 3)
	go func() { _, err := C.Resolve(context.Background(), src, nil); errs <- err }()
	inFlight(t, C, src)
	go func() {
		_, err := A.ResolveFrom(context.Background(), src, []Peer{{Node: "node03", Address: addrC}}, nil)
		errs <- err
	}()
	// In flight, not writing: node01 writes nothing while it waits on
	// node03, and node02 is to meet it waiting.
	inFlight(t, A, src)
	var path string
	go func() {
		p, err := B.ResolveFrom(context.Background(), src, []Peer{{Node: "node01", Address: addrA}}, nil)
		path = p
		errs <- err
	}()
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(path, "w.gguf")); !bytes.Equal(got, body) {
		t.Error("node02's copy differs")
	}
	if waiting.Load() == 0 {
		t.Error("node01 never answered node02 503: node02 did not meet it waiting")
	}
	if n := m.Served(); n != size {
		t.Errorf("the source served %d bytes for three nodes, want one copy (%d): node02 gave up on node01 and went to the source", n, size)
	}
	if fileSize(filepath.Join(A.EntryDir(src), "w.gguf")) != size {
		t.Error("node01's entry is not whole")
	}
}
