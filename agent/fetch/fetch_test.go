package fetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func newCache(t *testing.T, opts Options) *Cache {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ProgressEvery == 0 {
		opts.ProgressEvery = 10 * time.Millisecond
	}
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// watchFinalName fails the test if source's entry is ever visible without
// being whole: polled until stop is closed.
func watchFinalName(t *testing.T, c *Cache, source string, want map[string][]byte, stop chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		dir := c.EntryDir(source)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := os.Stat(dir); err == nil {
				if _, err := os.Stat(filepath.Join(dir, CompleteFile)); err != nil {
					t.Errorf("%s exists without %s", dir, CompleteFile)
					return
				}
				for name, b := range want {
					st, err := os.Stat(filepath.Join(dir, name))
					if err != nil || st.Size() != int64(len(b)) {
						t.Errorf("%s is visible in %s before it is whole (%v)", name, dir, err)
						return
					}
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return &wg
}

// TestResumeAfterCuts: a connection cut at random offsets, five times in a
// row, costs a Range request each and never a restart; the file is whole,
// nothing is ever visible under its name before it is, and the bytes served
// stay within the file's size plus what the cuts were in flight.
func TestResumeAfterCuts(t *testing.T) {
	m, srv := newTestMirror(t)
	body := randomBytes(3<<20+17, 1)
	m.files["m/v/w.gguf"] = body
	m.cuts = 5
	c := newCache(t, Options{})
	source := srv.URL + "/m/v/w.gguf"
	stop := make(chan struct{})
	wg := watchFinalName(t, c, source, map[string][]byte{"w.gguf": body}, stop)
	path, err := c.Resolve(context.Background(), source, nil)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(c.EntryDir(source), "w.gguf") {
		t.Errorf("path = %s, want w.gguf in %s", path, c.EntryDir(source))
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("fetched file differs from the served one (%v)", err)
	}
	if n := m.count("m/v/w.gguf"); n != 6 {
		t.Errorf("%d requests, want 6 (one, then one per cut)", n)
	}
	if len(m.ranges) != 5 {
		t.Errorf("Range requests %v, want 5", m.ranges)
	}
	if over := m.served - int64(len(body)); over < 0 || over > 5*64<<10 {
		t.Errorf("served %d bytes for a %d-byte file: a restart, or more than the cuts had in flight", m.served, len(body))
	}
	if entries, _ := os.ReadDir(c.opts.Dir); len(entries) != 1 {
		t.Errorf("cache holds %d entries, want only the complete one", len(entries))
	}
	// A second ask is answered from the cache.
	if _, err := c.Resolve(context.Background(), source, nil); err != nil {
		t.Fatal(err)
	}
	if n := m.count("m/v/w.gguf"); n != 6 {
		t.Errorf("the complete entry was fetched again (%d requests)", n)
	}
}

// TestRestartWhenRangeIgnored: a server that answers a Range request with
// 200 gets the file from the start, and the result is still whole.
func TestRestartWhenRangeIgnored(t *testing.T) {
	m, srv := newTestMirror(t)
	body := randomBytes(1<<20, 2)
	m.files["m/v/w.gguf"] = body
	m.cuts, m.ignoreRange = 2, true
	c := newCache(t, Options{})
	path, err := c.Resolve(context.Background(), srv.URL+"/m/v/w.gguf", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, body) {
		t.Fatal("fetched file differs from the served one")
	}
}

// TestConcurrentShardsOneDownload: eight callers for one source, all
// waiting at once, cost the server one request.
func TestConcurrentShardsOneDownload(t *testing.T) {
	m, srv := newTestMirror(t)
	body := randomBytes(1<<20, 3)
	m.files["m/v/w.gguf"] = body
	m.hold = make(chan struct{})
	c := newCache(t, Options{})
	source := srv.URL + "/m/v/w.gguf"
	const n = 8
	paths := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			paths[i], errs[i] = c.Resolve(context.Background(), source, nil)
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		cl := c.inflight[source]
		waiting := cl != nil && cl.waiters == n
		c.mu.Unlock()
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the callers never all waited on one download")
		}
		time.Sleep(time.Millisecond)
	}
	close(m.hold)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || paths[i] != paths[0] {
			t.Fatalf("caller %d: %s, %v", i, paths[i], errs[i])
		}
	}
	if got := m.count("m/v/w.gguf"); got != 1 {
		t.Errorf("server saw %d requests for one source asked for %d times, want 1", got, n)
	}
}

// TestSetOfSeveralFiles: a URL ending in / is a set; every file of its
// manifest lands in one directory, complete only when the last is in, even
// with connections cut along the way.
func TestSetOfSeveralFiles(t *testing.T) {
	m, srv := newTestMirror(t)
	want := map[string][]byte{
		"config.json":                      []byte(`{"x":1}`),
		"model-00001-of-00002.safetensors": randomBytes(700<<10, 4),
		"model-00002-of-00002.safetensors": randomBytes(500<<10, 5),
		"tokenizer/tokenizer.json":         randomBytes(10<<10, 6),
	}
	for p, b := range want {
		m.files["big/2026-03/"+p] = b
	}
	m.cuts = 3
	c := newCache(t, Options{})
	source := srv.URL + "/big/2026-03/"
	stop := make(chan struct{})
	wg := watchFinalName(t, c, source, want, stop)
	var last Progress
	var mu sync.Mutex
	dir, err := c.Resolve(context.Background(), source, func(p Progress) { mu.Lock(); last = p; mu.Unlock() })
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if dir != c.EntryDir(source) {
		t.Errorf("path = %s, want the entry directory %s", dir, c.EntryDir(source))
	}
	for p, b := range want {
		got, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil || !bytes.Equal(got, b) {
			t.Errorf("%s differs from the served file (%v)", p, err)
		}
	}
	var total int64
	for _, b := range want {
		total += int64(len(b))
	}
	mu.Lock()
	defer mu.Unlock()
	if last.Total != 0 && last.Total != total {
		t.Errorf("progress total %d, want %d (the manifest's sizes)", last.Total, total)
	}
}

// TestCorruptByte: one flipped byte fails the sha256 check; the shard gets
// an error that says so, and nothing is left under the final name or as a
// partial to resume from.
func TestCorruptByte(t *testing.T) {
	m, srv := newTestMirror(t)
	m.files["m/v/w.gguf"] = randomBytes(256<<10, 7)
	m.corrupt = true
	c := newCache(t, Options{})
	source := srv.URL + "/m/v/w.gguf"
	_, err := c.Resolve(context.Background(), source, nil)
	if err == nil || !strings.Contains(err.Error(), "sha256") || !strings.Contains(err.Error(), source) {
		t.Fatalf("err = %v, want a sha256 failure naming the source", err)
	}
	if _, err := os.Stat(c.EntryDir(source)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("entry exists after a failed verification: %v", err)
	}
	if _, err := os.Stat(filepath.Join(c.partialDir(source), ".w.gguf.partial")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the corrupt bytes were kept as a partial: %v", err)
	}
}

// TestDiskFull: a disk that refuses the bytes fails the fetch at once with
// the path written to.
func TestDiskFull(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	m, srv := newTestMirror(t)
	m.files["m/v/w.gguf"] = randomBytes(64<<10, 8)
	c := newCache(t, Options{})
	source := srv.URL + "/m/v/w.gguf"
	partial := filepath.Join(c.partialDir(source), ".w.gguf.partial")
	if err := os.MkdirAll(filepath.Dir(partial), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/full", partial); err != nil {
		t.Fatal(err)
	}
	_, err := c.Resolve(context.Background(), source, nil)
	if err == nil || !strings.Contains(err.Error(), partial) || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("err = %v, want no space left naming %s", err, partial)
	}
	if m.count("m/v/w.gguf") != 1 {
		t.Errorf("a full disk was retried (%d requests)", m.count("m/v/w.gguf"))
	}
}

// TestLocalPathNeverCopied: a local source is checked and given as is; the
// cache stays empty, and a missing one is an error naming it.
func TestLocalPathNeverCopied(t *testing.T) {
	c := newCache(t, Options{})
	f := filepath.Join(t.TempDir(), "w.gguf")
	if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := c.Resolve(context.Background(), f, nil)
	if err != nil || got != f {
		t.Fatalf("Resolve(%s) = %s, %v", f, got, err)
	}
	if entries, _ := os.ReadDir(c.opts.Dir); len(entries) != 0 {
		t.Errorf("a local source left %d entries in the cache", len(entries))
	}
	if _, err := c.Resolve(context.Background(), f+".missing", nil); err == nil || !strings.Contains(err.Error(), f+".missing") {
		t.Errorf("missing local source: err = %v", err)
	}
	for _, s := range []string{"Qwen/Qwen2.5-7B-Instruct", "sim://chat", ""} {
		if got, err := c.Resolve(context.Background(), s, nil); err != nil || got != s {
			t.Errorf("Resolve(%q) = %q, %v; want it as written", s, got, err)
		}
	}
}

// TestFailureNamesSourceAndAnswer: a 404 fails at once, naming the source
// and the status.
func TestFailureNamesSourceAndAnswer(t *testing.T) {
	_, srv := newTestMirror(t)
	c := newCache(t, Options{})
	source := srv.URL + "/m/v/missing.gguf"
	_, err := c.Resolve(context.Background(), source, nil)
	if err == nil || !strings.Contains(err.Error(), source) || !strings.Contains(err.Error(), "404") {
		t.Fatalf("err = %v, want the source and 404", err)
	}
}

// TestStalledThenGiveUp: a server that answers 503 moves no byte: progress
// says stalled with the last error, and after GiveUpAfter the fetch fails
// with it.
func TestStalledThenGiveUp(t *testing.T) {
	m, srv := newTestMirror(t)
	m.files["m/v/w.gguf"] = randomBytes(1024, 9)
	m.status = http.StatusServiceUnavailable
	c := newCache(t, Options{StallAfter: 50 * time.Millisecond, GiveUpAfter: 700 * time.Millisecond})
	var mu sync.Mutex
	var stalled Progress
	_, err := c.Resolve(context.Background(), srv.URL+"/m/v/w.gguf", func(p Progress) {
		mu.Lock()
		defer mu.Unlock()
		if p.Stalled && p.LastError != "" {
			stalled = p
		}
	})
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "no byte moved") {
		t.Fatalf("err = %v, want the 503 and no byte moved", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(stalled.LastError, "503") {
		t.Errorf("no stalled progress with the last error was reported (last: %+v)", stalled)
	}
}

// TestHFResolveRedirect: hf:org/repo/file is fetched from the hub's resolve
// endpoint through its redirect, verified against the sha256 the redirect
// carries in X-Linked-Etag; a wrong one fails.
func TestHFResolveRedirect(t *testing.T) {
	body := randomBytes(300<<10, 10)
	for _, tc := range []struct {
		name, etag string
		ok         bool
	}{{"verified", sum(body), true}, {"wrong sha256", sum([]byte("other")), false}} {
		t.Run(tc.name, func(t *testing.T) {
			var resolved, cdn int
			mux := http.NewServeMux()
			mux.HandleFunc("GET /org/repo/resolve/main/sub/w.gguf", func(w http.ResponseWriter, r *http.Request) {
				resolved++
				w.Header().Set("X-Linked-Etag", `"`+tc.etag+`"`)
				w.Header().Set("X-Linked-Size", fmt.Sprint(len(body)))
				http.Redirect(w, r, "/cdn/blob", http.StatusFound)
			})
			mux.HandleFunc("GET /cdn/blob", func(w http.ResponseWriter, r *http.Request) {
				cdn++
				w.Header().Set("ETag", `"not-a-sha"`)
				http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
			})
			hub := httptest.NewServer(mux)
			defer hub.Close()
			c := newCache(t, Options{HFEndpoint: hub.URL})
			path, err := c.Resolve(context.Background(), "hf:org/repo/sub/w.gguf", nil)
			if !tc.ok {
				if err == nil || !strings.Contains(err.Error(), "sha256") {
					t.Fatalf("err = %v, want a sha256 failure", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if filepath.Base(path) != "w.gguf" || resolved != 1 || cdn != 1 {
				t.Errorf("path %s, resolve %d, cdn %d", path, resolved, cdn)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, body) {
				t.Error("fetched file differs")
			}
		})
	}
}

// TestCallerLeavesDownloadCancelled: when every caller gave up, the
// download stops; its partial stays for the next ask, which resumes it.
func TestCallerLeavesDownloadCancelled(t *testing.T) {
	m, srv := newTestMirror(t)
	body := randomBytes(1<<20, 11)
	m.files["m/v/w.gguf"] = body
	m.hold = make(chan struct{})
	c := newCache(t, Options{})
	source := srv.URL + "/m/v/w.gguf"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { _, err := c.Resolve(ctx, source, nil); done <- err }()
	for deadline := time.Now().Add(10 * time.Second); m.count("m/v/w.gguf") == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the download never reached the server")
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want canceled", err)
	}
	close(m.hold)
	m.mu.Lock()
	m.hold = nil
	m.mu.Unlock()
	path, err := c.Resolve(context.Background(), source, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, body) {
		t.Error("fetched file differs")
	}
}

// TestDamagedEntryRefused: a complete entry whose file was removed by hand
// is neither given to an engine nor fetched over; the error names it.
func TestDamagedEntryRefused(t *testing.T) {
	m, srv := newTestMirror(t)
	m.files["m/v/w.gguf"] = randomBytes(10<<10, 13)
	c := newCache(t, Options{})
	source := srv.URL + "/m/v/w.gguf"
	path, err := c.Resolve(context.Background(), source, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	_, err = c.Resolve(context.Background(), source, nil)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "remove the entry") {
		t.Fatalf("err = %v, want the damaged entry named", err)
	}
	if n := m.count("m/v/w.gguf"); n != 1 {
		t.Errorf("%d requests: the damaged entry was fetched over", n)
	}
}

// TestNotEnoughSpace: a file larger than the space left fails before a byte
// is written, naming the path, the bytes needed and the bytes free.
func TestNotEnoughSpace(t *testing.T) {
	m, srv := newTestMirror(t)
	m.files["m/v/w.gguf"] = randomBytes(64<<10, 14)
	c := newCache(t, Options{FreeBytes: func(string) (uint64, error) { return 1000, nil }})
	source := srv.URL + "/m/v/w.gguf"
	_, err := c.Resolve(context.Background(), source, nil)
	if err == nil || !strings.Contains(err.Error(), "65536 more bytes needed") || !strings.Contains(err.Error(), "1000 free") || !strings.Contains(err.Error(), c.partialDir(source)) {
		t.Fatalf("err = %v", err)
	}
	if st, err := os.Stat(filepath.Join(c.partialDir(source), ".w.gguf.partial")); err == nil && st.Size() != 0 {
		t.Errorf("%d bytes were written to a disk they do not fit", st.Size())
	}
}

// TestUserAgent: the agent's downloads say what they are and which
// version, so a mirror's or the hub's logs can tell agents apart.
func TestUserAgent(t *testing.T) {
	var mu sync.Mutex
	var agents []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		agents = append(agents, r.UserAgent())
		mu.Unlock()
		_, _ = w.Write([]byte("weights"))
	}))
	t.Cleanup(srv.Close)
	c := newCache(t, Options{})
	if _, err := c.Resolve(context.Background(), srv.URL+"/m/v/w.bin", nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(agents) == 0 {
		t.Fatal("the server saw no request")
	}
	for _, ua := range agents {
		if ua != "llmgw-agent/dev" {
			t.Errorf("User-Agent %q, want llmgw-agent/dev (an unstamped test binary)", ua)
		}
	}
}
