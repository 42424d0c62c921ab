package fetch

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/testkit/weightsrv"
)

// TestFollowerChainRidesOutStalledHead: node01 fetches from the mirror,
// node02 follows node01 and node03 follows node02. node01's download stops
// receiving. node02 leaves it for the mirror, resuming by Range; node03,
// cut by node02 at the same moment (both measure from the same last byte),
// waits on node02 rather than leaving too, and follows it again once its
// bytes move: the mirror serves the rest once, not once per follower, and
// node03 resumes from the bytes it holds (review-session4c M1).
func TestFollowerChainRidesOutStalledHead(t *testing.T) {
	const size = 1 << 20
	m, origin := weightsrv.New(t)
	body := weightsrv.RandomBytes(size, 77)
	m.Files["z/v/w.gguf"] = body
	m.Rate = size / 2
	tlsFor := peerPKI(t, "node01", "node02", "node03")
	s1, c1 := tlsFor("node01")
	s2, c2 := tlsFor("node02")
	_, c3 := tlsFor("node03")
	const stall = time.Second
	frozen := &freezable{base: http.DefaultTransport}
	A := newCache(t, Options{PeerClient: c1, StallAfter: stall, Client: &http.Client{Transport: frozen}})
	_, addrA := servePeer(t, A.PeerHandler(), s1(""))
	var logB, logC logBuffer
	B := newCache(t, Options{PeerClient: c2, PeerPoll: 20 * time.Millisecond, StallAfter: stall, Logger: logB.logger()})
	bReqs := &peerRequests{h: B.PeerHandler()}
	_, addrB := servePeer(t, bReqs, s2(""))
	C := newCache(t, Options{PeerClient: c3, PeerPoll: 20 * time.Millisecond, StallAfter: stall, Logger: logC.logger()})
	src := origin.URL + "/z/v/"
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node02's log:\n%s\nnode03's log:\n%s", logB.String(), logC.String())
		}
	})
	actx, cancelA := context.WithCancel(context.Background())
	aDone := make(chan struct{})
	go func() { defer close(aDone); _, _ = A.Resolve(actx, src, nil) }()
	t.Cleanup(func() { cancelA(); <-aDone })
	writing(t, A, src)
	errs := make(chan error, 2)
	var pathC string
	go func() {
		_, err := B.ResolveFrom(context.Background(), src, []Peer{{Node: "node01", Address: addrA}}, nil)
		errs <- err
	}()
	writing(t, B, src)
	go func() {
		p, err := C.ResolveFrom(context.Background(), src, []Peer{{Node: "node02", Address: addrB}}, nil)
		pathC = p
		errs <- err
	}()
	awaitHeld(t, C.partialDir(src), "w.gguf", 128<<10, says("node03 never held 128 KiB"))
	frozen.freeze()
	froze := time.Now()
	held := heldBytes(C.partialDir(src), "w.gguf")
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("node03 held %d when node01's download froze; done %s later", held, time.Since(froze).Round(time.Millisecond))
	if got, _ := os.ReadFile(filepath.Join(pathC, "w.gguf")); !bytes.Equal(got, body) {
		t.Error("node03's copy differs")
	}
	if rs := m.Ranges(); len(rs) != 1 {
		t.Errorf("mirror ranges %v: want node02's one resume, the rest served once for the chain", rs)
	}
	if l := logC.String(); strings.Contains(l, "giving up on a followed peer") || !strings.Contains(l, "following a peer again") {
		t.Errorf("node03 did not wait on node02 (which resumed from the mirror) and follow it again")
	}
	rs := bReqs.of("w.gguf")
	if len(rs) < 2 || rs[0] != "" {
		t.Fatalf("node03 asked node02 for the file with ranges %q: want one request from the start, then resumes", rs)
	}
	var from int64
	if _, err := fmtSscan(rs[len(rs)-1], &from); err != nil || from < held {
		t.Errorf("node03 resumed from node02 with %q (%v), holding %d: bytes were asked twice", rs[len(rs)-1], err, held)
	}
}

// TestSilentPeerLeft: a peer that accepts the connection and never answers
// (gone without a reset) is left within stall_after and the source asked.
func TestSilentPeerLeft(t *testing.T) {
	m, origin := weightsrv.New(t)
	body := weightsrv.RandomBytes(64<<10, 78)
	m.Files["y/v/w.gguf"] = body
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { conn.Close() }) // held open, never answered
		}
	}()
	tlsFor := peerPKI(t, "node01", "node02")
	_, c2 := tlsFor("node02")
	const stall = 500 * time.Millisecond
	B := newCache(t, Options{PeerClient: c2, PeerPoll: 20 * time.Millisecond, StallAfter: stall})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	began := time.Now()
	p, err := B.ResolveFrom(ctx, origin.URL+"/y/v/", []Peer{{Node: "node01", Address: ln.Addr().String()}}, nil)
	if err != nil {
		t.Fatalf("after %s: %v", time.Since(began).Round(time.Millisecond), err)
	}
	if took := time.Since(began); took > 2*stall {
		t.Errorf("the silent peer was left after %s: want within stall_after (%s)", took, stall)
	}
	if got, _ := os.ReadFile(filepath.Join(p, "w.gguf")); !bytes.Equal(got, body) {
		t.Error("the copy differs")
	}
}
