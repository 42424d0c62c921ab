package fetch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
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

// uncheckedOrigin is a mirror whose manifest gives a.bin no sha256 (as a
// manifest may) and b.bin one. Its first answer for a.bin is firstA, with
// the X-Llmgw-Sha256 of the true bytes when sumFirst, none otherwise; its
// later answers are a with its sha256; when gateA is not nil, the first
// answer's last bytes wait for it to be closed. Its first answer for b.bin
// is held after its last byte until holdB is closed (when holdB is not
// nil).
type uncheckedOrigin struct {
	a, b, firstA []byte
	sumFirst     bool
	gateA, holdB chan struct{}
	reqs         sync.Map // path -> *atomic.Int32
}

func (o *uncheckedOrigin) count(p string) int32 {
	n, _ := o.reqs.LoadOrStore(p, new(atomic.Int32))
	return n.(*atomic.Int32).Load()
}

func (o *uncheckedOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n, _ := o.reqs.LoadOrStore(r.URL.Path, new(atomic.Int32))
	nth := n.(*atomic.Int32).Add(1)
	switch r.URL.Path {
	case "/s/v/":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"model": "s", "version": "v", "files": []map[string]any{
			{"path": "a.bin", "size": len(o.a)},
			{"path": "b.bin", "size": len(o.b), "sha256": weightsrv.SHA256(o.b)},
		}})
	case "/s/v/a.bin":
		if nth == 1 {
			// Paced, so that a follower reads it as it arrives.
			if o.sumFirst {
				w.Header().Set(download.SHA256Header, weightsrv.SHA256(o.a))
			}
			w.Header().Set("Content-Length", strconv.Itoa(len(o.firstA)))
			for rest := o.firstA; len(rest) > 0; {
				k := min(len(rest), 16<<10)
				if k == len(rest) && o.gateA != nil {
					select {
					case <-o.gateA:
					case <-r.Context().Done():
						return
					}
				}
				_, _ = w.Write(rest[:k])
				w.(http.Flusher).Flush()
				rest = rest[k:]
				time.Sleep(10 * time.Millisecond)
			}
			return
		}
		w.Header().Set(download.SHA256Header, weightsrv.SHA256(o.a))
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(o.a))
	case "/s/v/b.bin":
		w.Header().Set(download.SHA256Header, weightsrv.SHA256(o.b))
		if nth == 1 && o.holdB != nil {
			// Every byte, then no end until released (no
			// Content-Length: the answer ends when the body does).
			_, _ = w.Write(o.b)
			w.(http.Flusher).Flush()
			select {
			case <-o.holdB:
			case <-r.Context().Done():
			}
			return
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(o.b))
	default:
		http.NotFound(w, r)
	}
}

// servedFiles wraps a peer handler, counting the answers it began by
// path, and calling sent (when not nil) with a path once its answer
// wrote body bytes.
func servedFiles(h http.Handler, n *sync.Map, sent func(path string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			c, _ := n.LoadOrStore(r.URL.Path, new(atomic.Int32))
			c.(*atomic.Int32).Add(1)
			if sent != nil {
				w = &sentWriter{ResponseWriter: w, sent: func() { sent(r.URL.Path) }}
			}
		}
		h.ServeHTTP(w, r)
	})
}

// sentWriter calls sent after each body write.
type sentWriter struct {
	http.ResponseWriter
	sent func()
}

func (s *sentWriter) Write(b []byte) (int, error) {
	n, err := s.ResponseWriter.Write(b)
	if n > 0 {
		s.sent()
	}
	return n, err
}

func (s *sentWriter) Flush() { s.ResponseWriter.(http.Flusher).Flush() }

// TestUncheckedPeerBytesDroppedWhenPeerFails: a node follows a peer whose
// source gives a.bin no sha256. The peer's copy of a.bin turns out corrupt
// (the answer's sha256 says so) once the node has it whole, and the peer's
// fetch fails: the node does not keep the a.bin it took unchecked, but
// fetches it from the source, whose answer's sha256 checks it.
func TestUncheckedPeerBytesDroppedWhenPeerFails(t *testing.T) {
	a := weightsrv.RandomBytes(256<<10, 91)
	bad := bytes.Clone(a)
	bad[len(bad)/2] ^= 0xff
	// The corrupt answer's end waits for the peer to have sent the node
	// bytes of a.bin (so it reads it through a file it holds open).
	o := &uncheckedOrigin{a: a, b: weightsrv.RandomBytes(256<<10, 92), firstA: bad, sumFirst: true, gateA: make(chan struct{})}
	origin := httptest.NewServer(o)
	defer origin.Close()
	tlsFor := peerPKI(t, "node01", "node02")
	s1, c1 := tlsFor("node01")
	_, c2 := tlsFor("node02")
	A := newCache(t, Options{PeerClient: c1, StallAfter: 3 * time.Second})
	var served sync.Map
	src := origin.URL + "/s/v/"
	var once sync.Once
	_, addrA := servePeer(t, servedFiles(A.PeerHandler(), &served, func(p string) {
		if p == PeerPrefix+Key(src)+"/a.bin" {
			once.Do(func() { close(o.gateA) })
		}
	}), s1(""))
	B := newCache(t, Options{PeerClient: c2, PeerPoll: 10 * time.Millisecond, StallAfter: 3 * time.Second})
	aErr := make(chan error, 1)
	go func() { _, err := A.Resolve(context.Background(), src, nil); aErr <- err }()
	inFlight(t, A, src)
	p, err := B.ResolveFrom(context.Background(), src, []Peer{{Node: "node01", Address: addrA}}, nil)
	once.Do(func() { close(o.gateA) }) // had the node not followed, the peer goes on
	if err := <-aErr; !errors.Is(err, download.ErrVerify) {
		t.Fatalf("the peer's fetch: %v; want its sha256 check to fail", err)
	}
	if err != nil {
		t.Fatalf("the node: %v", err)
	}
	if n, _ := served.Load(PeerPrefix + Key(src) + "/a.bin"); n == nil || n.(*atomic.Int32).Load() == 0 {
		t.Fatal("the peer never served a.bin: the node did not follow it")
	}
	if got, _ := os.ReadFile(filepath.Join(p, "a.bin")); !bytes.Equal(got, a) {
		t.Errorf("the node's entry holds the a.bin its peer discarded; the source was asked for a.bin %d times", o.count("/s/v/a.bin"))
	}
	if n := o.count("/s/v/a.bin"); n != 2 {
		t.Errorf("the source was asked for a.bin %d times, want twice (the peer, then the node)", n)
	}
	_, rec, _ := B.entryRecord(Key(src))
	for _, f := range rec.Files {
		if f.Path == "a.bin" && f.SHA256 != weightsrv.SHA256(a) {
			t.Errorf("the node's record gives a.bin sha256 %s, not the source's", f.SHA256)
		}
	}
}

// copyTree copies the regular files and directories under from to to:
// what a node's disk holds at an instant, for a restart to find.
func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o750)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, in)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestUncheckedPeerBytesAfterRestart: a node has taken every file of a set
// from a peer still fetching it, a.bin (which the source gives no sha256
// for) unchecked, and waits for the peer's entry to be complete to check
// it; the agent stops there (its disk is copied as it is). Started again,
// it does not keep that a.bin, whether it landed or still sat whole in its
// partial file: it fetches it from the source, whose answer's sha256
// checks it, and keeps b.bin, which was checked.
func TestUncheckedPeerBytesAfterRestart(t *testing.T) {
	a := weightsrv.RandomBytes(128<<10, 93)
	first := bytes.Clone(a)
	first[100] ^= 0xff // bytes nothing checks: the source's first answer gives no sha256
	o := &uncheckedOrigin{a: a, b: weightsrv.RandomBytes(128<<10, 94), firstA: first, holdB: make(chan struct{})}
	origin := httptest.NewServer(o)
	defer origin.Close()
	tlsFor := peerPKI(t, "node01", "node02")
	s1, c1 := tlsFor("node01")
	_, c2 := tlsFor("node02")
	A := newCache(t, Options{PeerClient: c1, StallAfter: 30 * time.Second})
	_, addrA := servePeer(t, A.PeerHandler(), s1(""))
	B := newCache(t, Options{PeerClient: c2, PeerPoll: 10 * time.Millisecond, StallAfter: 30 * time.Second})
	src := origin.URL + "/s/v/"
	aDone, bDone := make(chan error, 1), make(chan error, 1)
	go func() { _, err := A.Resolve(context.Background(), src, nil); aDone <- err }()
	writing(t, A, src)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, err := B.ResolveFrom(ctx, src, []Peer{{Node: "node01", Address: addrA}}, nil)
		bDone <- err
	}()
	// Both files landed on the node, the peer still fetching (b.bin's
	// answer held): the node is checking a.bin against the peer's record.
	tmp := B.partialDir(src)
	awaitLanded(t, tmp, map[string]int64{"a.bin": int64(len(a)), "b.bin": int64(len(o.b))}, "the node never held both files from its peer")
	if got, _ := os.ReadFile(filepath.Join(tmp, "a.bin")); !bytes.Equal(got, first) {
		t.Fatal("the node's a.bin is not the bytes its peer was sent")
	}
	landedImage, partialImage := t.TempDir(), t.TempDir()
	copyTree(t, B.opts.Dir, landedImage)
	copyTree(t, B.opts.Dir, partialImage)
	cancel()
	close(o.holdB)
	if err := <-bDone; !errors.Is(err, context.Canceled) {
		t.Errorf("the node, cancelled while it checks: %v", err)
	}
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	// The other image: stopped before a.bin's rename.
	ptmp := filepath.Join(partialImage, filepath.Base(tmp))
	if err := os.Rename(filepath.Join(ptmp, "a.bin"), download.PartialName(filepath.Join(ptmp, "a.bin"))); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, dir string }{
		{"landed", landedImage},
		{"whole partial file", partialImage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, beforeB := o.count("/s/v/a.bin"), o.count("/s/v/b.bin")
			c := newCache(t, Options{Dir: tc.dir})
			p, err := c.Resolve(context.Background(), src, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(filepath.Join(p, "a.bin")); !bytes.Equal(got, a) {
				t.Errorf("the entry holds the a.bin nothing checked; the source was asked for it %d times since", o.count("/s/v/a.bin")-before)
			}
			if got, _ := os.ReadFile(filepath.Join(p, "b.bin")); !bytes.Equal(got, o.b) {
				t.Error("b.bin differs")
			}
			if n := o.count("/s/v/b.bin") - beforeB; n != 0 {
				t.Errorf("the source was asked for b.bin (checked against its sha256) %d times, want none", n)
			}
			if _, err := os.Stat(filepath.Join(p, uncheckedFile)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the entry holds %s (%v)", uncheckedFile, err)
			}
		})
	}
}
