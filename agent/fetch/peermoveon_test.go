package fetch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/llmgw/internal/download"
	"github.com/llmgw/llmgw/testkit/weightsrv"
)

// nodeTag is the header a test node's client marks its requests to the
// source with (taggedClient), so the source answers each node its own way.
const nodeTag = "X-Test-Node"

// taggedClient is a client whose requests carry nodeTag: node.
func taggedClient(node string) *http.Client {
	return &http.Client{Transport: tagTransport(node)}
}

type tagTransport string

func (t tagTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(nodeTag, string(t))
	return http.DefaultTransport.RoundTrip(r)
}

// nodeAnswers is how the source answers one node's requests.
type nodeAnswers struct {
	// a is the a.bin sent, with its sha256 in the answer when aSum.
	a    []byte
	aSum bool
	// holdB, when not nil, holds b.bin's answer after its last byte
	// until it is closed (the node's fetch goes on, its files whole).
	holdB chan struct{}
}

// taggedOrigin is a mirror whose manifest gives a.bin no sha256 and b.bin
// one. A node marked with nodeTag is answered as nodes says; the node
// under test (no tag) gets the true bytes with their sha256, onFile (when
// not nil) being called with the path before each of its file answers.
type taggedOrigin struct {
	a, b   []byte
	nodes  map[string]nodeAnswers
	onFile func(path string)
	reqs   sync.Map // node + path -> *atomic.Int32
}

func (o *taggedOrigin) count(node, path string) int32 {
	n, _ := o.reqs.LoadOrStore(node+path, new(atomic.Int32))
	return n.(*atomic.Int32).Load()
}

func (o *taggedOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	node := r.Header.Get(nodeTag)
	n, _ := o.reqs.LoadOrStore(node+r.URL.Path, new(atomic.Int32))
	n.(*atomic.Int32).Add(1)
	if r.URL.Path == "/s/v/" {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"model": "s", "version": "v", "files": []map[string]any{
			{"path": "a.bin", "size": len(o.a)},
			{"path": "b.bin", "size": len(o.b), "sha256": weightsrv.SHA256(o.b)},
		}})
		return
	}
	ans, tagged := o.nodes[node]
	if !tagged {
		ans = nodeAnswers{a: o.a, aSum: true}
		if o.onFile != nil {
			o.onFile(r.URL.Path)
		}
	}
	switch r.URL.Path {
	case "/s/v/a.bin":
		if ans.aSum {
			w.Header().Set(download.SHA256Header, weightsrv.SHA256(ans.a))
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(ans.a))
	case "/s/v/b.bin":
		w.Header().Set(download.SHA256Header, weightsrv.SHA256(o.b))
		if ans.holdB == nil {
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(o.b))
			return
		}
		// Every byte, then no end until released (no Content-Length:
		// the answer ends when the body does).
		_, _ = w.Write(o.b)
		w.(http.Flusher).Flush()
		select {
		case <-ans.holdB:
		case <-r.Context().Done():
		}
	default:
		http.NotFound(w, r)
	}
}

// TestRecordCheckFailsNextPeerServes: a node follows two peers in turn,
// both still fetching a set whose source gives a.bin no sha256. It takes
// every file from the first, whose a.bin is not the source's (nothing can
// tell yet), and that peer's fetch then ends without an entry, so its
// record check fails. The node goes on to the second peer: the a.bin it
// took unchecked from the first is not kept to be "resumed" there (with no
// sha256 it would be, and only the second peer's record would tell), but
// taken again from the second, whose record then checks it; the entry
// comes from that peer, not the source, and holds the source's bytes.
func TestRecordCheckFailsNextPeerServes(t *testing.T) {
	a := weightsrv.RandomBytes(192<<10, 95)
	bad := bytes.Clone(a)
	bad[len(bad)/3] ^= 0xff
	gateC := make(chan struct{})
	o := &taggedOrigin{a: a, b: weightsrv.RandomBytes(128<<10, 96), nodes: map[string]nodeAnswers{
		"node01": {a: bad, holdB: make(chan struct{})}, // never ends: its fetch is cancelled
		"node03": {a: a, aSum: true, holdB: gateC},
	}}
	origin := httptest.NewServer(o)
	defer origin.Close()
	src := origin.URL + "/s/v/"
	key := Key(src)
	tlsFor := peerPKI(t, "node01", "node02", "node03")
	s1, _ := tlsFor("node01")
	_, c2 := tlsFor("node02")
	s3, _ := tlsFor("node03")
	A := newCache(t, Options{Client: taggedClient("node01"), StallAfter: 30 * time.Second})
	_, addrA := servePeer(t, A.PeerHandler(), s1(""))
	C := newCache(t, Options{Client: taggedClient("node03"), StallAfter: 30 * time.Second})
	var servedC sync.Map
	var once sync.Once
	// The second peer completes once the node has read its manifest
	// (marked fetching, a.bin with no sha256): the node takes a.bin from
	// it unchecked, then checks it against its record.
	_, addrC := servePeer(t, servedFiles(C.PeerHandler(), &servedC, func(p string) {
		if p == PeerPrefix+key+"/" {
			once.Do(func() { close(gateC) })
		}
	}), s3(""))
	B := newCache(t, Options{PeerClient: c2, PeerPoll: 10 * time.Millisecond, StallAfter: 10 * time.Second})

	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	aDone, cDone, bDone := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	go func() { _, err := A.Resolve(ctxA, src, nil); aDone <- err }()
	go func() { _, err := C.Resolve(context.Background(), src, nil); cDone <- err }()
	writing(t, A, src)
	writing(t, C, src)
	var p string
	go func() {
		var err error
		p, err = B.ResolveFrom(context.Background(), src, []Peer{{Node: "node01", Address: addrA}, {Node: "node03", Address: addrC}}, nil)
		bDone <- err
	}()
	// Every file landed from the first peer: the node checks a.bin
	// against its record, which that peer never writes.
	tmp := B.partialDir(src)
	awaitLanded(t, tmp, map[string]int64{"a.bin": int64(len(a)), "b.bin": int64(len(o.b))}, "the node never held both files from its first peer")
	if got, _ := os.ReadFile(filepath.Join(tmp, "a.bin")); !bytes.Equal(got, bad) {
		t.Fatal("the node's a.bin is not the bytes its first peer was sent")
	}
	cancelA()
	if err := <-aDone; !errors.Is(err, context.Canceled) {
		t.Errorf("the first peer's fetch: %v, want cancelled", err)
	}
	if err := <-bDone; err != nil {
		t.Fatalf("the node: %v", err)
	}
	if err := <-cDone; err != nil {
		t.Fatalf("the second peer: %v", err)
	}
	if n, _ := servedC.Load(PeerPrefix + key + "/a.bin"); n == nil || n.(*atomic.Int32).Load() == 0 {
		t.Error("the second peer never served a.bin: the node kept the a.bin its first peer sent unchecked")
	}
	for _, f := range []string{"a.bin", "b.bin"} {
		if n := o.count("", "/s/v/"+f); n != 0 {
			t.Errorf("the node asked the source for %s %d times, want none: the second peer serves it", f, n)
		}
	}
	for name, want := range map[string][]byte{"a.bin": a, "b.bin": o.b} {
		if got, _ := os.ReadFile(filepath.Join(p, name)); !bytes.Equal(got, want) {
			t.Errorf("the entry's %s is not the source's", name)
		}
	}
	_, rec, ok := B.entryRecord(key)
	if !ok || len(rec.Files) != 2 {
		t.Fatalf("the node's record: %+v (%v)", rec, ok)
	}
	for _, f := range rec.Files {
		if want := map[string][]byte{"a.bin": a, "b.bin": o.b}[f.Path]; f.SHA256 != weightsrv.SHA256(want) {
			t.Errorf("the record gives %s sha256 %s, not the source's", f.Path, f.SHA256)
		}
	}
	if _, err := os.Stat(filepath.Join(p, uncheckedFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the entry holds %s (%v)", uncheckedFile, err)
	}
}

// TestFollowerNotCutWhenPeerFailsOver: a node takes every file of a set
// from a peer still fetching it, then waits for that peer's record to
// check a.bin (which the source gives no sha256 for). The wait lasts past
// stall_after (the idle clock is moved on by that much: laterClock), then
// the peer's fetch ends without an entry, so the check fails and the node
// goes on to the source. Its last byte is then older than stall_after, but
// the move is progress: a follower asking the moment the node asks the
// source is told it idled a moment (X-Llmgw-Fetching-Idle), and one
// following a.bin is not cut but gets it whole as the source's bytes land.
// (The record check giving up at stall_after: TestPeerRecordCheck.)
func TestFollowerNotCutWhenPeerFailsOver(t *testing.T) {
	const stall = 10 * time.Second
	a := weightsrv.RandomBytes(192<<10, 97)
	holdA := make(chan struct{})
	defer close(holdA)
	o := &taggedOrigin{a: a, b: weightsrv.RandomBytes(128<<10, 98), nodes: map[string]nodeAnswers{
		"node01": {a: a, holdB: holdA},
	}}
	origin := httptest.NewServer(o)
	defer origin.Close()
	src := origin.URL + "/s/v/"
	key := Key(src)
	tlsFor := peerPKI(t, "node01", "node02")
	s1, _ := tlsFor("node01")
	_, c2 := tlsFor("node02")
	A := newCache(t, Options{Client: taggedClient("node01"), StallAfter: 30 * time.Second})
	_, addrA := servePeer(t, A.PeerHandler(), s1(""))
	B := newCache(t, Options{PeerClient: c2, PeerPoll: 10 * time.Millisecond, StallAfter: stall})
	advance := laterClock(B)
	followB := httptest.NewServer(B.PeerHandler())
	defer followB.Close()

	// The node's first request to the source, just after it left its
	// peer: a follower asks how it fares, and follows a.bin.
	idle := make(chan string, 1)
	followed := make(chan []byte, 1)
	followErr := make(chan error, 1)
	var once sync.Once
	o.onFile = func(path string) {
		if path != "/s/v/a.bin" {
			return
		}
		once.Do(func() {
			req := httptest.NewRequest(http.MethodHead, PeerPrefix+key+"/", nil)
			req.Header.Set(followHeader, "1")
			rec := httptest.NewRecorder()
			B.PeerHandler().ServeHTTP(rec, req)
			idle <- rec.Header().Get(idleHeader)
			get, err := http.NewRequest(http.MethodGet, followB.URL+PeerPrefix+key+"/a.bin", nil)
			if err != nil {
				followErr <- err
				return
			}
			get.Header.Set(followHeader, "1")
			// Its answer's header is sent once the node decided not to
			// cut it (it holds no byte of a.bin yet); it is cut before.
			headed := make(chan error, 1)
			go func() {
				resp, err := followB.Client().Do(get)
				if err != nil {
					headed <- err
					return
				}
				defer resp.Body.Close()
				headed <- nil
				b, err := io.ReadAll(resp.Body)
				if err != nil {
					followErr <- err
					return
				}
				followed <- b
			}()
			if err := <-headed; err != nil {
				followErr <- err
			}
		})
	}

	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	aDone := make(chan error, 1)
	go func() { _, err := A.Resolve(ctxA, src, nil); aDone <- err }()
	writing(t, A, src)
	var p string
	bDone := make(chan error, 1)
	go func() {
		var err error
		p, err = B.ResolveFrom(context.Background(), src, []Peer{{Node: "node01", Address: addrA}}, nil)
		bDone <- err
	}()
	tmp := B.partialDir(src)
	awaitLanded(t, tmp, map[string]int64{"a.bin": int64(len(a)), "b.bin": int64(len(o.b))}, "the node never held both files from its peer")
	// It waits on the peer's record past stall_after, no byte moving; then
	// the peer's fetch ends without an entry, and the record check fails
	// at once.
	advance(stall + 100*time.Millisecond)
	cancelA()
	cancelled := time.Now()
	if err := <-aDone; !errors.Is(err, context.Canceled) {
		t.Errorf("the peer's fetch, cancelled: %v", err)
	}
	if err := <-bDone; err != nil {
		t.Fatalf("the node: %v", err)
	}
	if d := time.Since(cancelled); d >= stall/2 {
		t.Errorf("the node took %s after its peer's fetch ended to finish from the source, want its record check to fail at once", d)
	}
	if n := o.count("", "/s/v/a.bin"); n != 1 {
		t.Fatalf("the node asked the source for a.bin %d times, want once (after its peer's record check failed)", n)
	}
	if n := o.count("", "/s/v/b.bin"); n != 0 {
		t.Errorf("the node asked the source for b.bin %d times, want none (its peer's copy checked against the source's sha256)", n)
	}
	if ms, err := strconv.ParseInt(<-idle, 10, 64); err != nil || time.Duration(ms)*time.Millisecond >= stall/2 {
		t.Errorf("just after the node left its peer for the source, %s is %dms (%v), want well under stall_after %s", idleHeader, ms, err, stall)
	}
	select {
	case b := <-followed:
		if !bytes.Equal(b, a) {
			t.Errorf("the follower got %d bytes of a.bin, not the source's %d", len(b), len(a))
		}
	case err := <-followErr:
		t.Errorf("the follower of a.bin was cut as the node went on to the source: %v", err)
	case <-time.After(20 * time.Second):
		t.Error("the follower of a.bin never got it whole")
	}
	if got, _ := os.ReadFile(filepath.Join(p, "a.bin")); !bytes.Equal(got, a) {
		t.Error("the entry's a.bin is not the source's")
	}
}
