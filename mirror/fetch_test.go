package mirror

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/testkit/hffake"
)

// weights returns n deterministic pseudo-random bytes.
func weights(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.UintN(256))
	}
	return b
}

func newStore(t *testing.T) *Store {
	t.Helper()
	s, err := NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func hfFetcher(hub *hffake.Server) *Fetcher {
	return &Fetcher{HFEndpoint: hub.Endpoint(), HFToken: hffake.Token, RetryDelay: 10 * time.Millisecond}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// checkVersion asserts the version's visible files are exactly want
// (path -> bytes), its manifest lists them, and nothing hidden but the
// sha256 sidecars is left.
func checkVersion(t *testing.T, s *Store, model, version string, want map[string][]byte) {
	t.Helper()
	m, err := s.Manifest(model, version)
	if err != nil {
		t.Fatalf("manifest: %v", err)
	}
	var paths []string
	for _, f := range m.Files {
		paths = append(paths, f.Path)
		if f.SHA256 != sum(want[f.Path]) {
			t.Errorf("%s: manifest sha256 %s, want %s", f.Path, f.SHA256, sum(want[f.Path]))
		}
		got, err := os.ReadFile(filepath.Join(s.Dir, model, version, f.Path))
		if err != nil || !bytes.Equal(got, want[f.Path]) {
			t.Errorf("%s: content differs (%d bytes, want %d; %v)", f.Path, len(got), len(want[f.Path]), err)
		}
	}
	wantPaths := slices.Sorted(func(yield func(string) bool) {
		for p := range want {
			if !yield(p) {
				return
			}
		}
	})
	if !slices.Equal(paths, wantPaths) {
		t.Errorf("files %v, want %v", paths, wantPaths)
	}
	_ = filepath.WalkDir(filepath.Join(s.Dir, model, version), func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".") && !strings.HasSuffix(d.Name(), ".sha256") && d.Name() != lockFile {
			t.Errorf("left behind: %s", p)
		}
		return nil
	})
}

func TestFetchHFFile(t *testing.T) {
	hub := hffake.New(t)
	w := weights(300_000, 1)
	hub.AddFile("org/model-GGUF", "main", "model-q4.gguf", w, true)
	s := newStore(t)
	if err := hfFetcher(hub).Fetch(ctx(t), s, "model", "2026-03", "hf:org/model-GGUF/model-q4.gguf", nil); err != nil {
		t.Fatal(err)
	}
	checkVersion(t, s, "model", "2026-03", map[string][]byte{"model-q4.gguf": w})
}

// TestFetchHFRevisionSet fetches a whole revision: listed over two tree
// pages, pinned to the branch's commit, .gitattributes left out, a small
// git file (no sha256) beside LFS files in a subdirectory.
func TestFetchHFRevisionSet(t *testing.T) {
	hub := hffake.New(t)
	hub.PageSize = 2
	files := map[string][]byte{
		"config.json":                    []byte(`{"arch":"llama"}`),
		"q4/model-00001-of-00002.gguf":   weights(70_000, 2),
		"q4/model-00002-of-00002.gguf":   weights(50_000, 3),
		"tokenizer/tokenizer.model.gguf": weights(10_000, 4),
	}
	for p, b := range files {
		hub.AddFile("org/sharded", "v1.0", p, b, p != "config.json")
	}
	s := newStore(t)
	if err := hfFetcher(hub).Fetch(ctx(t), s, "sharded", "v1.0", "hf:org/sharded@v1.0", nil); err != nil {
		t.Fatal(err)
	}
	checkVersion(t, s, "sharded", "v1.0", files)
}

func TestFetchHFErrors(t *testing.T) {
	hub := hffake.New(t)
	hub.AddFile("org/gated", "main", "w.gguf", weights(1000, 5), true)
	hub.Gate("org/gated")
	s := newStore(t)
	for _, tc := range []struct {
		name, source string
		token        string
		want         string
	}{
		{"gated without token", "hf:org/gated/w.gguf", "", "401"},
		{"gated set without token", "hf:org/gated@main", "", "401"},
		{"missing file", "hf:org/gated/nope.gguf", hffake.Token, "404"},
		{"missing revision", "hf:org/gated@v9", hffake.Token, "404"},
		{"not a source", "ftp://x/y", "", "use hf:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &Fetcher{HFEndpoint: hub.Endpoint(), HFToken: tc.token, RetryDelay: time.Millisecond}
			err := f.Fetch(ctx(t), s, "gated", "v", tc.source, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
			if !isPermanent(err) {
				t.Errorf("%v is retried; a refusal cannot be fixed by retrying", err)
			}
			if strings.Contains(err.Error(), hffake.Token) {
				t.Errorf("the token leaks into the error: %v", err)
			}
		})
	}
	f := hfFetcher(hub)
	if err := f.Fetch(ctx(t), s, "gated", "v", "hf:org/gated/w.gguf", nil); err != nil {
		t.Fatalf("with the token: %v", err)
	}
}

// TestFetchResumesAfterCut cuts the connection at random offsets, several
// times in a row: the download resumes with a Range from where the partial
// file stopped (never from 0), and the file lands whole and verified.
func TestFetchResumesAfterCut(t *testing.T) {
	for seed := range uint64(4) {
		hub := hffake.New(t)
		w := weights(200_000+int(seed)*1000, 10+seed)
		hub.AddFile("org/m", "main", "w.gguf", w, true)
		cut := int64(1 + rand.New(rand.NewPCG(seed, 7)).IntN(len(w)/3))
		hub.CutAfter(w, cut, 3)
		s := newStore(t)
		p := &Progress{}
		if err := hfFetcher(hub).Fetch(ctx(t), s, "m", "v", "hf:org/m/w.gguf", p); err != nil {
			t.Fatalf("cut at %d: %v", cut, err)
		}
		checkVersion(t, s, "m", "v", map[string][]byte{"w.gguf": w})
		want := []string{"", "bytes=" + itoa(cut) + "-", "bytes=" + itoa(2*cut) + "-", "bytes=" + itoa(3*cut) + "-"}
		if got := hub.Ranges(); !slices.Equal(got, want) {
			t.Errorf("cut at %d: CDN requests' ranges %q, want %q", cut, got, want)
		}
		if p.Bytes() != int64(len(w)) || p.Total() != int64(len(w)) {
			t.Errorf("progress %d/%d, want %d/%d", p.Bytes(), p.Total(), len(w), len(w))
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestFetchCorruptByte serves a file with one byte flipped: verification
// fails, nothing appears under the final name, the partial file is gone and
// the set stays incomplete (no manifest).
func TestFetchCorruptByte(t *testing.T) {
	hub := hffake.New(t)
	w := weights(100_000, 20)
	good := weights(1000, 21)
	hub.AddFile("org/m", "main", "a.gguf", good, true)
	hub.AddFile("org/m", "main", "b.gguf", w, true)
	hub.Corrupt(w)
	s := newStore(t)
	err := hfFetcher(hub).Fetch(ctx(t), s, "m", "v", "hf:org/m@main", nil)
	if !errors.Is(err, ErrVerify) {
		t.Fatalf("error %v, want a sha256 mismatch", err)
	}
	dir := filepath.Join(s.Dir, "m", "v")
	for _, name := range []string{"b.gguf", ".b.gguf.partial"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			t.Errorf("%s exists after a failed verification", name)
		}
	}
	if _, err := s.Manifest("m", "v"); err == nil {
		t.Error("a set whose last file failed has a manifest")
	}
	hs, _ := s.Holdings()
	if len(hs) != 1 || hs[0].Complete {
		t.Errorf("holdings %+v, want m/v incomplete", hs)
	}

	// One file, whose sum comes from the resolve answer's headers only.
	err = hfFetcher(hub).Fetch(ctx(t), s, "m", "single", "hf:org/m/b.gguf", nil)
	if !errors.Is(err, ErrVerify) {
		t.Fatalf("single file: error %v, want a sha256 mismatch", err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir, "m", "single", "b.gguf")); err == nil {
		t.Error("single file: b.gguf exists after a failed verification")
	}
}

// TestFetchURLFromMirror fetches http(s):// sources from another mirror's
// bytes listener, one file and a whole set: its X-Llmgw-Sha256 is verified,
// and a corrupt copy is refused.
func TestFetchURLFromMirror(t *testing.T) {
	srv, dir, data := bytesServer(t)
	s := newStore(t)
	f := &Fetcher{RetryDelay: time.Millisecond}
	if err := f.Fetch(ctx(t), s, "copy", "v", srv.URL+"/m/v/a.gguf", nil); err != nil {
		t.Fatal(err)
	}
	checkVersion(t, s, "copy", "v", map[string][]byte{"a.gguf": data})

	// A URL ending in "/" is another mirror's set: its manifest, then every file.
	if err := f.Fetch(ctx(t), s, "copy", "set", srv.URL+"/m/v/", nil); err != nil {
		t.Fatal(err)
	}
	checkVersion(t, s, "copy", "set", map[string][]byte{"a.gguf": data, "sub/b.gguf": []byte("second file")})

	// A cached sum that no longer matches the bytes (a disk flipped a bit
	// after hashing, leaving the size and modification time): the fetch
	// refuses them.
	path := filepath.Join(dir, "m", "v", "a.gguf")
	st, _ := os.Stat(path)
	flipped := bytes.Clone(data)
	flipped[10] ^= 1
	if err := os.WriteFile(path, flipped, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := f.Fetch(ctx(t), s, "copy", "v2", srv.URL+"/m/v/a.gguf", nil); !errors.Is(err, ErrVerify) {
		t.Fatalf("error %v, want a sha256 mismatch", err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir, "copy", "v2", "a.gguf")); err == nil {
		t.Error("a.gguf landed although it failed verification")
	}

	if err := f.Fetch(ctx(t), s, "copy", "v3", srv.URL+"/m/v/missing.gguf", nil); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("missing file: %v, want a 404", err)
	}
}

// TestFetchAgainSkipsLanded: fetching a set again reads nothing upstream
// for the files already there (same size and sha256), and fetches only
// what is missing.
func TestFetchAgainSkipsLanded(t *testing.T) {
	hub := hffake.New(t)
	a, b := weights(30_000, 50), weights(40_000, 51)
	hub.AddFile("org/m", "main", "a.gguf", a, true)
	hub.AddFile("org/m", "main", "b.gguf", b, true)
	s := newStore(t)
	f := hfFetcher(hub)
	for range 2 {
		if err := f.Fetch(ctx(t), s, "m", "v", "hf:org/m@main", nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(hub.Ranges()); n != 2 {
		t.Errorf("two fetches of a two-file set asked the CDN %d times, want 2", n)
	}
	if err := os.Remove(filepath.Join(s.Dir, "m", "v", "b.gguf")); err != nil {
		t.Fatal(err)
	}
	if err := f.Fetch(ctx(t), s, "m", "v", "hf:org/m@main", nil); err != nil {
		t.Fatal(err)
	}
	if n := len(hub.Ranges()); n != 3 {
		t.Errorf("after losing one file the CDN was asked %d times in all, want 3", n)
	}
	checkVersion(t, s, "m", "v", map[string][]byte{"a.gguf": a, "b.gguf": b})
}

// TestFetchLockedVersion: a second download into a version another one is
// filling (here: this test holding the lock, as another process would)
// fails at once and touches nothing.
func TestFetchLockedVersion(t *testing.T) {
	hub := hffake.New(t)
	hub.AddFile("org/m", "main", "a.gguf", weights(1000, 52), true)
	s := newStore(t)
	dir := filepath.Join(s.Dir, "m", "v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	unlock, err := lockVersion(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := hfFetcher(hub).Fetch(ctx(t), s, "m", "v", "hf:org/m/a.gguf", nil); !errors.Is(err, ErrBusy) {
		t.Fatalf("error %v, want ErrBusy", err)
	}
	if n := len(hub.Ranges()); n != 0 {
		t.Errorf("the CDN was asked %d times", n)
	}
	if err := s.Delete("m", "v"); !errors.Is(err, ErrBusy) {
		t.Errorf("delete while locked: %v, want ErrBusy", err)
	}
	unlock()
	if err := hfFetcher(hub).Fetch(ctx(t), s, "m", "v", "hf:org/m/a.gguf", nil); err != nil {
		t.Fatalf("after the lock was released: %v", err)
	}
}

// TestFetchStalledConnection: a connection that stops sending without
// closing is given up after StallTimeout and the download resumes from
// where it stopped.
func TestFetchStalledConnection(t *testing.T) {
	hub := hffake.New(t)
	w := weights(80_000, 60)
	hub.AddFile("org/m", "main", "w.gguf", w, true)
	hub.StallAfter(w, 20_000, 1)
	s := newStore(t)
	f := hfFetcher(hub)
	f.StallTimeout = 200 * time.Millisecond
	start := time.Now()
	if err := f.Fetch(ctx(t), s, "m", "v", "hf:org/m/w.gguf", nil); err != nil {
		t.Fatal(err)
	}
	checkVersion(t, s, "m", "v", map[string][]byte{"w.gguf": w})
	if got := hub.Ranges(); !slices.Equal(got, []string{"", "bytes=20000-"}) {
		t.Errorf("CDN ranges %q, want a resume from byte 20000", got)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %s", d)
	}
}

// TestFetchRetriesListing: a source answering 503 to its listing is asked
// again; a 404 is not.
func TestFetchRetriesListing(t *testing.T) {
	_, dir, data := bytesServer(t)
	st, err := NewStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	inner := BytesHandler(st, slog.New(slog.DiscardHandler), nil)
	var mu sync.Mutex
	manifestCalls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") {
			mu.Lock()
			manifestCalls++
			n := manifestCalls
			mu.Unlock()
			if n <= 2 {
				http.Error(w, "busy", http.StatusServiceUnavailable)
				return
			}
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	s := newStore(t)
	f := &Fetcher{RetryDelay: time.Millisecond}
	if err := f.Fetch(ctx(t), s, "m", "v", srv.URL+"/m/v/", nil); err != nil {
		t.Fatal(err)
	}
	checkVersion(t, s, "m", "v", map[string][]byte{"a.gguf": data, "sub/b.gguf": []byte("second file")})
	if manifestCalls != 3 {
		t.Errorf("manifest asked %d times, want 3", manifestCalls)
	}
	if err := f.Fetch(ctx(t), s, "m", "w", srv.URL+"/m/nope/", nil); err == nil || manifestCalls != 4 {
		t.Errorf("missing set: %v after %d manifest requests, want an error after one more", err, manifestCalls)
	}
}

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "tok"), []byte("  hf_abc\n"))
	writeFile(t, filepath.Join(dir, "empty"), []byte("\n"))
	if tok, err := ReadTokenFile(filepath.Join(dir, "tok")); err != nil || tok != "hf_abc" {
		t.Errorf("token %q, %v", tok, err)
	}
	if tok, err := ReadTokenFile(""); err != nil || tok != "" {
		t.Errorf("no file: %q, %v", tok, err)
	}
	for _, name := range []string{"empty", "missing"} {
		if _, err := ReadTokenFile(filepath.Join(dir, name)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestFetchReporting: the CLI's progress ends with the whole size.
func TestFetchReporting(t *testing.T) {
	hub := hffake.New(t)
	w := weights(5000, 70)
	hub.AddFile("org/m", "main", "w.gguf", w, true)
	var out bytes.Buffer
	if err := hfFetcher(hub).FetchReporting(ctx(t), newStore(t), "m", "v", "hf:org/m/w.gguf", &out, time.Hour); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "m/v: 5000/5000 bytes (100%), file 1 of 1") {
		t.Errorf("progress %q", out.String())
	}
}
