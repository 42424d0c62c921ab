package fetch

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/internal/download"
	"github.com/llmgw/llmgw/testkit/weightsrv"
)

// fileSize is the size of p, 0 when it is not there.
func fileSize(p string) int64 {
	st, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return st.Size()
}

// TestPeerFollowsGrowingFetch: two nodes of a fabric start one source at
// once, the first from a slow source, the second naming the first as its
// peer. The second follows the first's partial files as they grow (it
// holds bytes while the first is still fetching), has its files within a
// small margin after it (before its own syncs, which are the disk's),
// rather than a whole transfer later, the source serves
// one copy, and the bytes are verified: against the source's sha256 for a
// mirror's set, against the peer's record for a single URL (which lists
// none before its download).
func TestPeerFollowsGrowingFetch(t *testing.T) {
	const size = 1 << 20
	const rate = 1 << 20 // a second for the peer's download
	for _, tc := range []struct {
		name, path, source string
		files              map[string][]byte
	}{
		{name: "set", source: "/s/v/", files: map[string][]byte{
			"s/v/a.bin":     weightsrv.RandomBytes(size/4, 61),
			"s/v/sub/b.bin": weightsrv.RandomBytes(size*3/4, 62),
		}},
		{name: "single URL", source: "/m/v/w.gguf", files: map[string][]byte{
			"m/v/w.gguf": weightsrv.RandomBytes(size, 63),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, origin := weightsrv.New(t)
			for p, b := range tc.files {
				m.Files[p] = b
			}
			m.Rate = rate
			tlsFor := peerPKI(t, "node01", "node02")
			s1, c1 := tlsFor("node01")
			_, c2 := tlsFor("node02")
			a := newCache(t, Options{PeerClient: c1, StallAfter: 10 * time.Second})
			_, addrA := servePeer(t, a.PeerHandler(), s1(""))
			b := newCache(t, Options{PeerClient: c2, PeerPoll: 20 * time.Millisecond, StallAfter: 10 * time.Second})
			src := origin.URL + tc.source

			type result struct {
				path string
				err  error
				at   time.Time
			}
			// When the follower's files are all in (verified), before its
			// entry is recorded and synced: following ends there, the
			// syncs after it take what the disk takes (behind a writer's
			// fsyncs, its files in 17ms after the peer, its entry 510ms).
			var inMu sync.Mutex
			var bIn time.Time
			b.fetchedAll = func(string) {
				inMu.Lock()
				bIn = time.Now()
				inMu.Unlock()
			}
			start := time.Now()
			aDone, bDone := make(chan result, 1), make(chan result, 1)
			go func() {
				p, err := a.Resolve(context.Background(), src, nil)
				aDone <- result{p, err, time.Now()}
			}()
			// The follower asks once the peer writes (waits_test.go says
			// why): a second copy from the source is what this test counts.
			writing(t, a, src)
			go func() {
				p, err := b.ResolveFrom(context.Background(), src, []Peer{{Node: "node01", Address: addrA}}, nil)
				bDone <- result{p, err, time.Now()}
			}()

			// Half-way through the peer's own download, the follower
			// holds bytes already: the transfers run together.
			for deadline := time.Now().Add(20 * time.Second); m.Served() < size/2; time.Sleep(2 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the peer's download never got half-way")
				}
			}
			var held int64
			_ = filepath.Walk(b.partialDir(src), func(p string, info os.FileInfo, err error) error {
				if err == nil && info.Mode().IsRegular() && filepath.Base(p) != sourceFile {
					held += info.Size()
				}
				return nil
			})
			if held < size/8 {
				t.Errorf("with the peer half-way (%d of %d bytes from the source), the follower holds %d bytes: it waits for the peer to finish rather than following it", m.Served(), size, held)
			}

			ra, rb := <-aDone, <-bDone
			if ra.err != nil || rb.err != nil {
				t.Fatalf("peer: %v; follower: %v", ra.err, rb.err)
			}
			took := ra.at.Sub(start)
			inMu.Lock()
			lag := bIn.Sub(ra.at)
			inMu.Unlock()
			if bIn.IsZero() {
				t.Fatal("the follower's fetch was never told complete")
			}
			t.Logf("peer %s; the follower's files in %s after it, its entry on disk %s after it", took.Round(time.Millisecond), lag.Round(time.Millisecond), rb.at.Sub(ra.at).Round(time.Millisecond))
			if lag > 400*time.Millisecond {
				t.Errorf("the follower's files were in %s after the peer finished (whose download took %s): want within 400ms", lag, took)
			}
			if n := m.Served(); n != size {
				t.Errorf("the source served %d bytes for two nodes, want one copy (%d)", n, size)
			}
			for p, body := range tc.files {
				rel := strings.TrimPrefix(p, strings.TrimPrefix(tc.source, "/"))
				if !strings.HasSuffix(tc.source, "/") {
					rel = filepath.Base(p)
				}
				if got, _ := os.ReadFile(filepath.Join(b.EntryDir(src), rel)); !bytes.Equal(got, body) {
					t.Errorf("%s: the follower's copy differs", rel)
				}
			}
			_, recB, ok := b.entryRecord(Key(src))
			_, recA, _ := a.entryRecord(Key(src))
			if !ok || len(recB.Files) != len(tc.files) {
				t.Fatalf("the follower's record: %+v", recB)
			}
			for i, f := range recB.Files {
				if f.SHA256 != weightsrv.SHA256(tc.files[strings.TrimPrefix(tc.source, "/")+f.Path]) && f.SHA256 != weightsrv.SHA256(tc.files[strings.TrimPrefix(tc.source, "/")]) {
					t.Errorf("%s: sha256 %s is not the source's", f.Path, f.SHA256)
				}
				if f != recA.Files[i] {
					t.Errorf("%s: the follower's record %+v, the peer's %+v", f.Path, f, recA.Files[i])
				}
			}
		})
	}
}

// TestFollowedPeerDiesMidway: a peer followed while it fetches goes away
// (its listener closes) with one file of a set landed on the follower and
// part of the next one: the follower keeps the landed file (never asked
// of the source again) and the bytes it holds of the next, resuming that
// one from the source with a Range request, and lands the set verified.
func TestFollowedPeerDiesMidway(t *testing.T) {
	m, origin := weightsrv.New(t)
	first := weightsrv.RandomBytes(256<<10, 71)
	second := weightsrv.RandomBytes(1<<20, 72)
	m.Files["s/v/a.bin"] = first
	m.Files["s/v/b.bin"] = second
	m.Rate = 1 << 20
	tlsFor := peerPKI(t, "node01", "node02")
	s1, c1 := tlsFor("node01")
	_, c2 := tlsFor("node02")
	a := newCache(t, Options{PeerClient: c1, StallAfter: 10 * time.Second})
	var logMu sync.Mutex
	var log []string
	inner := a.PeerHandler()
	srvA, addrA := servePeer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		start := time.Now()
		inner.ServeHTTP(rec, r)
		logMu.Lock()
		log = append(log, fmt.Sprintf("%s %s %s %d %s %s", start.Format("05.000"), r.Method, r.URL.Path, rec.code, r.Header.Get("Range"), time.Since(start)))
		logMu.Unlock()
	}), s1(""))
	t.Cleanup(func() {
		if t.Failed() {
			logMu.Lock()
			t.Log(strings.Join(log, "\n"))
			logMu.Unlock()
		}
	})
	b := newCache(t, Options{PeerClient: c2, PeerPoll: 20 * time.Millisecond, StallAfter: 10 * time.Second})
	src := origin.URL + "/s/v/"
	aDone := make(chan error, 1)
	go func() { _, err := a.Resolve(context.Background(), src, nil); aDone <- err }()
	writing(t, a, src)
	bDone := make(chan error, 1)
	var bPath string
	go func() {
		p, err := b.ResolveFrom(context.Background(), src, []Peer{{Node: "node01", Address: addrA}}, nil)
		bPath = p
		bDone <- err
	}()
	// The set's files come in the manifest's order: whichever landed
	// first, the other is part-way.
	files := map[string][]byte{"a.bin": first, "b.bin": second}
	var landedName, partial string
	ready := func() bool {
		for name, body := range files {
			other := "a.bin"
			if name == other {
				other = "b.bin"
			}
			p := download.PartialName(filepath.Join(b.partialDir(src), other))
			if fileSize(filepath.Join(b.partialDir(src), name)) == int64(len(body)) && fileSize(p) >= 128<<10 {
				landedName, partial = name, p
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(20 * time.Second); !ready(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			var held []string
			_ = filepath.Walk(b.opts.Dir, func(p string, info os.FileInfo, err error) error {
				if err == nil {
					held = append(held, fmt.Sprintf("%s %d", p, info.Size()))
				}
				return nil
			})
			t.Fatalf("the follower never held one file and part of the other; it holds %v; the source was asked %d, %d times, ranges %v", held, m.Count("s/v/a.bin"), m.Count("s/v/b.bin"), m.Ranges())
		}
	}
	// The peer is gone, mid-way through the second file: no new
	// connection, and the one it serves is cut.
	_ = srvA.Listener.Close()
	srvA.CloseClientConnections()
	held := fileSize(partial)
	if err := <-bDone; err != nil {
		t.Fatal(err)
	}
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if got, _ := os.ReadFile(filepath.Join(bPath, name)); !bytes.Equal(got, body) {
			t.Errorf("%s: the follower's copy differs", name)
		}
	}
	if n := m.Count("s/v/" + landedName); n != 1 {
		t.Errorf("the source was asked for the landed file %s %d times, want once (by the peer)", landedName, n)
	}
	ranges := m.Ranges()
	if len(ranges) != 1 || !strings.HasPrefix(ranges[0], "bytes=") {
		t.Fatalf("source ranges %v: want one resume of b.bin", ranges)
	}
	var from int64
	if _, err := fmtSscan(ranges[0], &from); err != nil || from < held {
		t.Errorf("the follower resumed from byte %d (%v), holding %d when the peer went: bytes were lost", from, err, held)
	}
}

// fmtSscan reads the start of a "bytes=N-" range.
func fmtSscan(rg string, n *int64) (int, error) {
	return fmt.Sscanf(rg, "bytes=%d-", n)
}

// TestPeerRecordCheck: bytes a peer sent while fetching a source that
// lists no sha256 pass only when the peer's record, once complete, gives
// their sha256; a record naming another, a peer whose fetch failed, or one
// still fetching after stall_after is an error (on which fromPeer deletes
// the files it took unchecked, before the next peer:
// TestRecordCheckFailsNextPeerServes).
func TestPeerRecordCheck(t *testing.T) {
	body := []byte("bytes a peer sent while it fetched")
	for _, tc := range []struct {
		name   string
		answer func(w http.ResponseWriter)
		keep   bool
		// waits: the check fails only once stall_after has passed.
		waits bool
	}{
		{"record matches", func(w http.ResponseWriter) {
			fmt.Fprintf(w, `{"source":"s","files":[{"path":"w.gguf","size":%d,"sha256":%q}]}`, len(body), weightsrv.SHA256(body))
		}, true, false},
		{"record differs", func(w http.ResponseWriter) {
			fmt.Fprintf(w, `{"source":"s","files":[{"path":"w.gguf","size":%d,"sha256":%q}]}`, len(body), weightsrv.SHA256([]byte("other")))
		}, false, false},
		{"fetch failed", func(w http.ResponseWriter) { http.NotFound(w, nil) }, false, false},
		{"still fetching after stall_after", func(w http.ResponseWriter) {
			fmt.Fprintf(w, `{"source":"s","fetching":true,"files":[{"path":"w.gguf","size":%d}]}`, len(body))
		}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { tc.answer(w) }))
			defer srv.Close()
			// A short stall_after where the check waits it out; a long one
			// where it must not wait, so a slow round trip on a loaded
			// machine is not taken for a wait.
			stall := 10 * time.Second
			if tc.waits {
				stall = 300 * time.Millisecond
			}
			c := newCache(t, Options{StallAfter: stall, PeerPoll: 10 * time.Millisecond})
			landed := []download.Landed{{Path: "w.gguf", Size: int64(len(body)), SHA256: weightsrv.SHA256(body)}}
			began := time.Now()
			err := c.checkPeerRecord(context.Background(), srv.Client(), srv.URL+"/", Peer{Node: "node01"}, landed, []int{0})
			if tc.keep != (err == nil) {
				t.Fatalf("err %v, want kept %v", err, tc.keep)
			}
			if took := time.Since(began); tc.waits != (took >= stall) {
				t.Errorf("the check took %s (%v) with stall_after %s, want it waited out: %v", took, err, stall, tc.waits)
			}
		})
	}
}
