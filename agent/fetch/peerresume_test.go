package fetch

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/llmgw/testkit/weightsrv"
)

// logBuffer collects a cache's log lines, safe for its goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(b)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// peerRequests wraps a peer's handler and records the file requests it is
// asked (the Range of each), passing Flush through.
type peerRequests struct {
	h      http.Handler
	mu     sync.Mutex
	ranges map[string][]string // file -> Range headers ("" when none), in order
}

func (p *peerRequests) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && !strings.HasSuffix(r.URL.Path, "/") {
		p.mu.Lock()
		if p.ranges == nil {
			p.ranges = map[string][]string{}
		}
		p.ranges[r.URL.Path] = append(p.ranges[r.URL.Path], r.Header.Get("Range"))
		p.mu.Unlock()
	}
	p.h.ServeHTTP(w, r)
}

func (p *peerRequests) of(file string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for path, rs := range p.ranges {
		if strings.HasSuffix(path, "/"+file) {
			return append([]string(nil), rs...)
		}
	}
	return nil
}

// switchable serves h as a node that offers to be followed until wait is
// set, and from then on as one that has stopped writing files to wait on a
// source of its own: it answers 503 with its progress until its entry is
// complete (what a node waiting on a peer answers).
type switchable struct {
	h    http.Handler
	wait atomic.Bool
}

func (s *switchable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.wait.Load() {
		r = r.Clone(r.Context())
		r.Header.Del(followHeader)
	}
	s.h.ServeHTTP(w, r)
}

// TestFollowerWaitsMidFileOnPeerThatWaits: node02 follows node01, which
// follows node03, which fetches from a slow source. Mid-file, node03 stops
// writing files and waits (it answers 503 with its growing progress until
// its entry is complete), for several times the followers' stall_after.
// node01 waits on it rather than leaving for the source, and stops
// offering its own files meanwhile; node02, mid-file too, waits on node01
// as long as the progress node01 reports grows. Once node03 is complete
// each follower resumes by Range from the bytes it holds: the source
// serves one copy for three nodes, and no byte is asked twice.
func TestFollowerWaitsMidFileOnPeerThatWaits(t *testing.T) {
	const size = 1 << 20
	m, origin := weightsrv.New(t)
	body := weightsrv.RandomBytes(size, 97)
	m.Files["c/v/w.gguf"] = body // a set: the manifest gives its sha256
	m.Rate = size / 3            // three seconds: six times the followers' stall_after
	tlsFor := peerPKI(t, "node01", "node02", "node03")
	s1, c1 := tlsFor("node01")
	_, c2 := tlsFor("node02")
	s3, c3 := tlsFor("node03")
	const stall = 500 * time.Millisecond
	C := newCache(t, Options{PeerClient: c3})
	cSwitch := &switchable{h: C.PeerHandler()}
	cReqs := &peerRequests{h: cSwitch}
	srvC, addrC := servePeer(t, cReqs, s3(""))
	var logA, logB logBuffer
	A := newCache(t, Options{PeerClient: c1, PeerPoll: 20 * time.Millisecond, StallAfter: stall, Logger: logA.logger()})
	aReqs := &peerRequests{h: A.PeerHandler()}
	_, addrA := servePeer(t, aReqs, s1(""))
	B := newCache(t, Options{PeerClient: c2, PeerPoll: 20 * time.Millisecond, StallAfter: stall, Logger: logB.logger()})
	src := origin.URL + "/c/v/"
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node01's log:\n%s\nnode02's log:\n%s", logA.String(), logB.String())
		}
	})

	errs := make(chan error, 3)
	// Each node starts once the one it follows writes (writing): asked
	// before, a peer answers 404 and the follower goes to the source.
	go func() { _, err := C.Resolve(context.Background(), src, nil); errs <- err }()
	writing(t, C, src)
	go func() {
		_, err := A.ResolveFrom(context.Background(), src, []Peer{{Node: "node03", Address: addrC}}, nil)
		errs <- err
	}()
	writing(t, A, src)
	var pathB string
	go func() {
		p, err := B.ResolveFrom(context.Background(), src, []Peer{{Node: "node01", Address: addrA}}, nil)
		pathB = p
		errs <- err
	}()
	// Mid-file on both followers: node03 stops offering its files, and
	// the answer node01 follows is cut.
	awaitHeld(t, B.partialDir(src), "w.gguf", 128<<10, func() string {
		return fmt.Sprintf("node02 never held 128 KiB (node01 holds %d)", heldBytes(A.partialDir(src), "w.gguf"))
	})
	cSwitch.wait.Store(true)
	srvC.CloseClientConnections()
	switched := time.Now()
	heldA, heldB := heldBytes(A.partialDir(src), "w.gguf"), heldBytes(B.partialDir(src), "w.gguf")
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	waited := time.Since(switched)
	t.Logf("node01 held %d, node02 %d when node03 began to wait; all done %s later", heldA, heldB, waited.Round(time.Millisecond))
	if waited < 2*stall {
		t.Fatalf("done %s after node03 began to wait: the wait did not outlast the followers' stall_after (%s), the test proves nothing", waited, stall)
	}
	if got, _ := os.ReadFile(filepath.Join(pathB, "w.gguf")); !bytes.Equal(got, body) {
		t.Error("node02's copy differs")
	}
	if got, _ := os.ReadFile(filepath.Join(A.EntryDir(src), "w.gguf")); !bytes.Equal(got, body) {
		t.Error("node01's copy differs")
	}
	if n := m.Served(); n != size {
		t.Errorf("the source served %d bytes for three nodes, want one copy (%d): a follower left its peer for the source; source ranges %v", n, size, m.Ranges())
	}
	// Each follower asked its peer once from the start, then resumed by
	// Range from at least what it held when the wait began.
	for _, tc := range []struct {
		node   string
		ranges []string
		held   int64
	}{{"node01", cReqs.of("w.gguf"), heldA}, {"node02", aReqs.of("w.gguf"), heldB}} {
		if len(tc.ranges) < 2 || tc.ranges[0] != "" {
			t.Errorf("%s asked its peer for the file with ranges %q: want one request from the start, then resumes", tc.node, tc.ranges)
			continue
		}
		last := tc.ranges[len(tc.ranges)-1]
		var from int64
		if _, err := fmtSscan(last, &from); err != nil || from < tc.held {
			t.Errorf("%s resumed with %q (%v), holding %d when its peer began to wait: bytes were asked twice", tc.node, last, err, tc.held)
		}
	}
	for node, l := range map[string]string{"node01": logA.String(), "node02": logB.String()} {
		if !strings.Contains(l, "a followed peer stopped sending, waiting on it") || !strings.Contains(l, "following a peer again") {
			t.Errorf("%s's log does not say it waited on its peer and followed it again:\n%s", node, l)
		}
	}
}

// freezable is a transport whose answers can be frozen: while frozen, no
// byte more comes (an upstream that stops sending without closing), until
// it is thawed or the request's context ends.
type freezable struct {
	base   http.RoundTripper
	mu     sync.Mutex
	thawed chan struct{} // nil while not frozen
}

func (f *freezable) freeze() {
	f.mu.Lock()
	f.thawed = make(chan struct{})
	f.mu.Unlock()
}

func (f *freezable) thaw() {
	f.mu.Lock()
	close(f.thawed)
	f.thawed = nil
	f.mu.Unlock()
}

func (f *freezable) wait(ctx context.Context) error {
	f.mu.Lock()
	ch := f.thawed
	f.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *freezable) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := f.wait(r.Context()); err != nil {
		return nil, err
	}
	resp, err := f.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = &freezableBody{ReadCloser: resp.Body, f: f, ctx: r.Context()}
	return resp, nil
}

type freezableBody struct {
	io.ReadCloser
	f   *freezable
	ctx context.Context
}

func (b *freezableBody) Read(p []byte) (int, error) {
	if err := b.f.wait(b.ctx); err != nil {
		return 0, err
	}
	return b.ReadCloser.Read(p)
}

// TestFollowerRidesOutShortPeerPause: node02 follows node01 mid-file when
// node01's own download stops receiving for half of stall_after, then
// goes on: node02 is not cut, gets every byte from node01, and the source
// serves one copy.
func TestFollowerRidesOutShortPeerPause(t *testing.T) {
	const size = 1 << 20
	m, origin := weightsrv.New(t)
	body := weightsrv.RandomBytes(size, 99)
	m.Files["e/v/w.gguf"] = body
	m.Rate = size
	tlsFor := peerPKI(t, "node01", "node02")
	s1, c1 := tlsFor("node01")
	_, c2 := tlsFor("node02")
	const stall = time.Second
	frozen := &freezable{base: http.DefaultTransport}
	A := newCache(t, Options{PeerClient: c1, StallAfter: stall, Client: &http.Client{Transport: frozen}})
	aReqs := &peerRequests{h: A.PeerHandler()}
	_, addrA := servePeer(t, aReqs, s1(""))
	var logB logBuffer
	B := newCache(t, Options{PeerClient: c2, PeerPoll: 20 * time.Millisecond, StallAfter: stall, Logger: logB.logger()})
	src := origin.URL + "/e/v/"
	errs := make(chan error, 2)
	go func() { _, err := A.Resolve(context.Background(), src, nil); errs <- err }()
	writing(t, A, src)
	var pathB string
	go func() {
		p, err := B.ResolveFrom(context.Background(), src, []Peer{{Node: "node01", Address: addrA}}, nil)
		pathB = p
		errs <- err
	}()
	awaitHeld(t, B.partialDir(src), "w.gguf", 128<<10, says("node02 never held 128 KiB"))
	frozen.freeze()
	time.Sleep(stall / 2) // the pause under test: no condition ends it sooner
	frozen.thaw()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(pathB, "w.gguf")); !bytes.Equal(got, body) {
		t.Error("node02's copy differs")
	}
	if n := m.Served(); n != size {
		t.Errorf("the source served %d bytes for two nodes, want one copy (%d); ranges %v", n, size, m.Ranges())
	}
	if rs := aReqs.of("w.gguf"); len(rs) != 1 {
		t.Errorf("node02 asked node01 for the file %d times (ranges %q): a pause shorter than stall_after cut it", len(rs), rs)
	}
	if l := logB.String(); strings.Contains(l, "stopped sending") {
		t.Errorf("node02 logged a pause shorter than stall_after as its peer stopping:\n%s", l)
	}
}

// TestFollowerLeavesStalledPeer: node02 follows node01 mid-file when
// node01's own download stops receiving anything. node01 cuts the answer
// once its download moved no byte for stall_after, and node02, finding it
// still stalled, leaves it at once, says so in its log and resumes from
// the source by Range from the bytes it holds, all within twice
// stall_after, rather than asking node01 again for another stall_after
// per attempt. For a single URL (whose listing gives no sha256) the bytes
// held are kept too: the mirror's answer gives the sha256 that checks the
// whole file.
func TestFollowerLeavesStalledPeer(t *testing.T) {
	for _, tc := range []struct{ name, source string }{{"set", "/d/v/"}, {"single URL", "/d/v/w.gguf"}} {
		t.Run(tc.name, func(t *testing.T) { followerLeavesStalledPeer(t, tc.source) })
	}
}

func followerLeavesStalledPeer(t *testing.T, source string) {
	const size = 1 << 20
	m, origin := weightsrv.New(t)
	body := weightsrv.RandomBytes(size, 98)
	m.Files["d/v/w.gguf"] = body
	m.Rate = size / 2
	tlsFor := peerPKI(t, "node01", "node02")
	s1, c1 := tlsFor("node01")
	_, c2 := tlsFor("node02")
	const stall = time.Second
	frozen := &freezable{base: http.DefaultTransport}
	A := newCache(t, Options{PeerClient: c1, StallAfter: stall, Client: &http.Client{Transport: frozen}})
	_, addrA := servePeer(t, A.PeerHandler(), s1(""))
	var logB logBuffer
	B := newCache(t, Options{PeerClient: c2, PeerPoll: 20 * time.Millisecond, StallAfter: stall, Logger: logB.logger()})
	src := origin.URL + source

	actx, cancelA := context.WithCancel(context.Background())
	aDone := make(chan struct{})
	go func() {
		defer close(aDone)
		_, _ = A.Resolve(actx, src, nil)
	}()
	t.Cleanup(func() {
		cancelA()
		<-aDone
	})
	writing(t, A, src)
	bDone := make(chan error, 1)
	var pathB string
	go func() {
		p, err := B.ResolveFrom(context.Background(), src, []Peer{{Node: "node01", Address: addrA}}, nil)
		pathB = p
		bDone <- err
	}()
	awaitHeld(t, B.partialDir(src), "w.gguf", 128<<10, says("node02 never held 128 KiB"))
	frozen.freeze()
	froze := time.Now()
	m.Mu.Lock()
	m.Rate = 0 // the source answers node02 at full speed
	m.Mu.Unlock()
	held := heldBytes(B.partialDir(src), "w.gguf")
	if err := <-bDone; err != nil {
		t.Fatal(err)
	}
	took := time.Since(froze)
	t.Logf("node02 held %d when node01's download froze; done %s later", held, took.Round(time.Millisecond))
	if took > 2*stall+stall/4 {
		t.Errorf("node02 finished %s after node01's download stopped: want within about twice stall_after (%s)", took, stall)
	}
	if strings.HasSuffix(source, "/") {
		pathB = filepath.Join(pathB, "w.gguf")
	}
	if got, _ := os.ReadFile(pathB); !bytes.Equal(got, body) {
		t.Error("node02's copy differs")
	}
	ranges := m.Ranges()
	if len(ranges) != 1 {
		t.Fatalf("source ranges %v: want node02's one resume", ranges)
	}
	var from int64
	if _, err := fmtSscan(ranges[0], &from); err != nil || from < held {
		t.Errorf("node02 resumed from the source with %q (%v), holding %d: bytes were asked twice", ranges[0], err, held)
	}
	if l := logB.String(); !strings.Contains(l, "giving up on a followed peer") || !strings.Contains(l, "held_bytes=") {
		t.Errorf("node02's log does not say it left its stalled peer and what it held:\n%s", l)
	}
}
