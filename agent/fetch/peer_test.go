package fetch

import (
	"bytes"
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/llmgw/pki"
	"github.com/llmgw/llmgw/testkit/weightsrv"
)

// peerPKI makes a CA and node certificates; tlsFor gives a node's peer TLS.
func peerPKI(t *testing.T, nodes ...string) func(node string) (server, client func(string) *tls.Config) {
	dir := t.TempDir()
	if _, _, err := pki.InitCA(dir, pki.CAOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if _, _, err := pki.IssueNode(dir, n, dir, 0); err != nil {
			t.Fatal(err)
		}
	}
	return func(node string) (func(string) *tls.Config, func(string) *tls.Config) {
		s, c, err := PeerTLS(filepath.Join(dir, "ca.pem"), filepath.Join(dir, node+".pem"), filepath.Join(dir, node+"-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		return s, c
	}
}

// servePeer serves h over TLS as node's peer listener; its address.
func servePeer(t *testing.T, h http.Handler, tlsCfg *tls.Config) (*httptest.Server, string) {
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = tlsCfg
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, srv.Listener.Addr().String()
}

// TestPeerFetch: a node whose peer holds a source takes it from the peer
// and never asks the source; a node that waits on a peer still fetching
// gets it from that peer once it landed (the source serves one copy for
// both); a certificate of another node name is refused.
func TestPeerFetch(t *testing.T) {
	m, origin := weightsrv.New(t)
	body := weightsrv.RandomBytes(700<<10, 31)
	m.Files["m/v/w.gguf"] = body
	m.Files["s/v/a.bin"] = weightsrv.RandomBytes(10<<10, 32)
	m.Files["s/v/sub/b.bin"] = weightsrv.RandomBytes(20<<10, 33)
	tlsFor := peerPKI(t, "node01", "node02", "node03")
	s1, c1 := tlsFor("node01")
	_, c2 := tlsFor("node02")
	a := newCache(t, Options{PeerClient: c1})
	peerA, waiting := countingStatus(a.PeerHandler(), http.StatusServiceUnavailable) // a peer waiting on a's own fetch
	_, addrA := servePeer(t, peerA, s1(""))
	b := newCache(t, Options{PeerClient: c2, PeerPoll: 20 * time.Millisecond})

	for _, source := range []string{origin.URL + "/m/v/w.gguf", origin.URL + "/s/v/"} {
		if _, err := a.Resolve(context.Background(), source, nil); err != nil {
			t.Fatal(err)
		}
		// The source's manifest is read (what the peer's bytes are
		// checked against); no file is asked of it.
		before := m.Count("m/v/w.gguf") + m.Count("s/v/a.bin") + m.Count("s/v/sub/b.bin")
		path, err := b.ResolveFrom(context.Background(), source, []Peer{{Node: "node01", Address: addrA}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if after := m.Count("m/v/w.gguf") + m.Count("s/v/a.bin") + m.Count("s/v/sub/b.bin"); after != before {
			t.Errorf("%s: the source was asked for %d more files although the peer held them", source, after-before)
		}
		if path != strings.Replace(must(a.Resolve(context.Background(), source, nil)), a.opts.Dir, b.opts.Dir, 1) {
			t.Errorf("%s: path %s is not the peer's layout", source, path)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(b.EntryDir(origin.URL+"/m/v/w.gguf"), "w.gguf")); !bytes.Equal(got, body) {
		t.Fatal("the file from the peer differs")
	}

	// A peer still fetching: wait for it, then take its copy.
	m.Files["n/v/w.gguf"] = weightsrv.RandomBytes(300<<10, 34)
	m.Mu.Lock()
	hold := make(chan struct{})
	m.Hold = hold
	m.Mu.Unlock()
	src := origin.URL + "/n/v/w.gguf"
	aDone := make(chan error, 1)
	go func() { _, err := a.Resolve(context.Background(), src, nil); aDone <- err }()
	inFlight(t, a, src) // its source holds: in flight, writing nothing
	bDone := make(chan error, 1)
	c := newCache(t, Options{PeerClient: c2, PeerPoll: 20 * time.Millisecond, StallAfter: 10 * time.Second})
	go func() {
		_, err := c.ResolveFrom(context.Background(), src, []Peer{{Node: "node01", Address: addrA}}, nil)
		bDone <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); m.Count("n/v/w.gguf") != 1 || waiting.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a never waited on the source, or c never waited on a")
		}
	}
	m.Mu.Lock()
	m.Hold = nil
	m.Mu.Unlock()
	close(hold)
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	if err := <-bDone; err != nil {
		t.Fatal(err)
	}
	if n := m.Count("n/v/w.gguf"); n != 1 {
		t.Errorf("the source served %d copies to two nodes, want 1", n)
	}

	// A peer whose certificate is another node's is refused.
	_, err := newCache(t, Options{PeerClient: c2}).fromPeer(context.Background(), Peer{Node: "node03", Address: addrA}, Key(src), t.TempDir(), nil, nil, nil)
	if err == nil || !strings.Contains(err.Error(), `names "node01", not node "node03"`) {
		t.Errorf("err = %v, want the name mismatch", err)
	}
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

// TestPeerDiesMidTransfer: a peer that goes away after part of a file
// costs a resume from the source (a Range from the bytes already here),
// never a restart, and the file lands whole and verified.
func TestPeerDiesMidTransfer(t *testing.T) {
	m, origin := weightsrv.New(t)
	body := weightsrv.RandomBytes(2<<20, 41)
	m.Files["m/v/w.gguf"] = body
	source := origin.URL + "/m/v/w.gguf"
	tlsFor := peerPKI(t, "node01", "node02")
	s1, _ := tlsFor("node01")
	_, c2 := tlsFor("node02")
	a := newCache(t, Options{})
	if _, err := a.Resolve(context.Background(), source, nil); err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	var srv *httptest.Server
	inner := a.PeerHandler()
	srv, addr := servePeer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/") && r.Method == http.MethodGet {
			// Send 600 KiB of the file, then the node is gone.
			inner.ServeHTTP(&cutAfter{ResponseWriter: w, left: 600 << 10, sent: &sent, gone: func() { go srv.Close() }}, r)
			return
		}
		inner.ServeHTTP(w, r)
	}), s1(""))
	b := newCache(t, Options{PeerClient: c2})
	path, err := b.ResolveFrom(context.Background(), source, []Peer{{Node: "node01", Address: addr}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, body) {
		t.Fatal("the file differs")
	}
	ranges := m.Ranges()
	if n := m.Count("m/v/w.gguf"); n != 2 || len(ranges) != 1 || ranges[0] != "bytes=614400-" {
		t.Errorf("source requests %d with ranges %v: want the first fetch, then one resume from the 600 KiB the peer sent", n, ranges)
	}
	if sent.Load() != 600<<10 {
		t.Errorf("peer sent %d bytes", sent.Load())
	}
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

// cutAfter sends left bytes, then aborts the connection and calls gone.
type cutAfter struct {
	http.ResponseWriter
	left int64
	sent *atomic.Int64
	gone func()
}

func (c *cutAfter) Write(b []byte) (int, error) {
	if int64(len(b)) > c.left {
		b = b[:c.left]
	}
	n, err := c.ResponseWriter.Write(b)
	c.left -= int64(n)
	c.sent.Add(int64(n))
	if c.left == 0 {
		c.ResponseWriter.(http.Flusher).Flush()
		c.gone()
		panic(http.ErrAbortHandler)
	}
	return n, err
}

// TestCompletePeerFailingIsLeft: a peer whose entry is complete but whose
// file answers keep failing (500) is left for the source once the
// downloader gives up on it (two attempts moving no byte); it is not
// followed again.
func TestCompletePeerFailingIsLeft(t *testing.T) {
	m, origin := weightsrv.New(t)
	body := weightsrv.RandomBytes(300<<10, 43)
	m.Files["m/v/w.gguf"] = body
	source := origin.URL + "/m/v/w.gguf"
	tlsFor := peerPKI(t, "node01", "node02")
	s1, _ := tlsFor("node01")
	_, c2 := tlsFor("node02")
	a := newCache(t, Options{})
	if _, err := a.Resolve(context.Background(), source, nil); err != nil {
		t.Fatal(err)
	}
	var gets atomic.Int64
	inner := a.PeerHandler()
	_, addr := servePeer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/") && r.Method == http.MethodGet {
			gets.Add(1)
			http.Error(w, "disk error", http.StatusInternalServerError)
			return
		}
		inner.ServeHTTP(w, r)
	}), s1(""))
	b := newCache(t, Options{PeerClient: c2, PeerPoll: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path, err := b.ResolveFrom(ctx, source, []Peer{{Node: "node01", Address: addr}}, nil)
	if err != nil {
		t.Fatalf("resolving past a failing complete peer: %v (the peer was asked %d times)", err, gets.Load())
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, body) {
		t.Fatal("the file differs")
	}
	if n := m.Count("m/v/w.gguf"); n != 2 {
		t.Errorf("the source was asked %d times, want 2 (node01's fetch, then node02's once it left node01)", n)
	}
	if n := gets.Load(); n != 2 {
		t.Errorf("the failing peer was asked %d times for its file, want 2 (the downloader's MaxFailures, then it is left)", n)
	}
}

// TestPeerBadProgressHeaderIsLeft: a peer whose progress or idle header is
// not a count is left at once for the source, with the header named,
// rather than waited on as if it had reported nothing yet. A peer that
// refuses keeps its status in the error, whatever header it sends.
func TestPeerBadProgressHeaderIsLeft(t *testing.T) {
	for _, tc := range []struct {
		name            string
		status          int
		fetching, idle  string
		inLog, notInLog string
	}{
		{name: "progress", status: http.StatusServiceUnavailable, fetching: "lots", inLog: fetchingHeader},
		{name: "idle", status: http.StatusServiceUnavailable, fetching: "0", idle: "soon", inLog: idleHeader},
		{name: "refused", status: http.StatusNotFound, fetching: "lots", inLog: "404 Not Found", notInLog: fetchingHeader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, origin := weightsrv.New(t)
			body := weightsrv.RandomBytes(64<<10, 44)
			m.Files["m/v/w.gguf"] = body
			source := origin.URL + "/m/v/w.gguf"
			tlsFor := peerPKI(t, "node01", "node02")
			s1, _ := tlsFor("node01")
			_, c2 := tlsFor("node02")
			_, addr := servePeer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set(fetchingHeader, tc.fetching)
				if tc.idle != "" {
					w.Header().Set(idleHeader, tc.idle)
				}
				w.WriteHeader(tc.status)
			}), s1(""))
			const stall = 10 * time.Second
			var logs logBuffer
			b := newCache(t, Options{PeerClient: c2, PeerPoll: 20 * time.Millisecond, StallAfter: stall, Logger: logs.logger()})
			start := time.Now()
			path, err := b.ResolveFrom(context.Background(), source, []Peer{{Node: "node01", Address: addr}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, body) {
				t.Fatal("the file differs")
			}
			if took := time.Since(start); took > stall/2 {
				t.Errorf("left the peer after %s: it was waited on, not refused", took)
			}
			if !strings.Contains(logs.String(), tc.inLog) {
				t.Errorf("the log does not name %q:\n%s", tc.inLog, logs.String())
			}
			if tc.notInLog != "" && strings.Contains(logs.String(), tc.notInLog) {
				t.Errorf("the log names %q, not the peer's status:\n%s", tc.notInLog, logs.String())
			}
		})
	}
}
