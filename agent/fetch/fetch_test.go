package fetch

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/llmgw/llmgw/internal/download"
	"github.com/llmgw/llmgw/testkit/hffake"
	"github.com/llmgw/llmgw/testkit/weightsrv"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
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
	m, srv := weightsrv.New(t)
	body := weightsrv.RandomBytes(3<<20+17, 1)
	m.Files["m/v/w.gguf"] = body
	m.Cuts = 5
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
	if n := m.Count("m/v/w.gguf"); n != 6 {
		t.Errorf("%d requests, want 6 (one, then one per cut)", n)
	}
	if len(m.Ranges()) != 5 {
		t.Errorf("Range requests %v, want 5", m.Ranges())
	}
	if over := m.Served() - int64(len(body)); over < 0 || over > 5*64<<10 {
		t.Errorf("served %d bytes for a %d-byte file: a restart, or more than the cuts had in flight", m.Served(), len(body))
	}
	if entries, _ := os.ReadDir(c.opts.Dir); len(entries) != 1 {
		t.Errorf("cache holds %d entries, want only the complete one", len(entries))
	}
	// A second ask is answered from the cache.
	if _, err := c.Resolve(context.Background(), source, nil); err != nil {
		t.Fatal(err)
	}
	if n := m.Count("m/v/w.gguf"); n != 6 {
		t.Errorf("the complete entry was fetched again (%d requests)", n)
	}
}

// TestConcurrentShardsOneDownload: eight callers for one source, all
// waiting at once, cost the server one request.
func TestConcurrentShardsOneDownload(t *testing.T) {
	m, srv := weightsrv.New(t)
	body := weightsrv.RandomBytes(1<<20, 3)
	m.Files["m/v/w.gguf"] = body
	m.Hold = make(chan struct{})
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
	close(m.Hold)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || paths[i] != paths[0] {
			t.Fatalf("caller %d: %s, %v", i, paths[i], errs[i])
		}
	}
	if got := m.Count("m/v/w.gguf"); got != 1 {
		t.Errorf("server saw %d requests for one source asked for %d times, want 1", got, n)
	}
}

// TestSetOfSeveralFiles: a URL ending in / is a set; every file of its
// manifest lands in one directory, complete only when the last is in, even
// with connections cut along the way.
func TestSetOfSeveralFiles(t *testing.T) {
	m, srv := weightsrv.New(t)
	want := map[string][]byte{
		"config.json":                      []byte(`{"x":1}`),
		"model-00001-of-00002.safetensors": weightsrv.RandomBytes(700<<10, 4),
		"model-00002-of-00002.safetensors": weightsrv.RandomBytes(500<<10, 5),
		"tokenizer/tokenizer.json":         weightsrv.RandomBytes(10<<10, 6),
	}
	for p, b := range want {
		m.Files["big/2026-03/"+p] = b
	}
	m.Cuts = 3
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
	_, srv := weightsrv.New(t)
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
	m, srv := weightsrv.New(t)
	m.Files["m/v/w.gguf"] = weightsrv.RandomBytes(1024, 9)
	m.Status = http.StatusServiceUnavailable
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

// TestCallerLeavesDownloadCancelled: when every caller gave up, the
// download stops; its partial stays for the next ask, which resumes it.
func TestCallerLeavesDownloadCancelled(t *testing.T) {
	m, srv := weightsrv.New(t)
	body := weightsrv.RandomBytes(1<<20, 11)
	m.Files["m/v/w.gguf"] = body
	m.Hold = make(chan struct{})
	c := newCache(t, Options{})
	source := srv.URL + "/m/v/w.gguf"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { _, err := c.Resolve(ctx, source, nil); done <- err }()
	for deadline := time.Now().Add(10 * time.Second); m.Count("m/v/w.gguf") == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the download never reached the server")
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want canceled", err)
	}
	close(m.Hold)
	m.Mu.Lock()
	m.Hold = nil
	m.Mu.Unlock()
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
	m, srv := weightsrv.New(t)
	m.Files["m/v/w.gguf"] = weightsrv.RandomBytes(10<<10, 13)
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
	if n := m.Count("m/v/w.gguf"); n != 1 {
		t.Errorf("%d requests: the damaged entry was fetched over", n)
	}
}

// TestWholeRevisionAndS3: hf:org/repo@rev (every file of the revision) and
// an s3:// prefix are sets: the engine gets the entry directory holding
// every file; an hf: or s3:// single file gets its path in the entry.
func TestWholeRevisionAndS3(t *testing.T) {
	hub := hffake.New(t)
	a, b := weightsrv.RandomBytes(50<<10, 21), weightsrv.RandomBytes(20<<10, 22)
	hub.AddFile("org/m", "v1", "model.safetensors", a, true)
	hub.AddFile("org/m", "v1", "cfg/config.json", b, false)

	fake := gofakes3.New(s3mem.New()).Server()
	s3srv := httptest.NewServer(fake)
	t.Cleanup(s3srv.Close)
	s3cfg := download.S3Config{Endpoint: s3srv.URL, Region: "us-east-1", AccessKey: "AKIAFAKE", SecretKey: "fake-secret"}
	cl, err := minio.New(strings.TrimPrefix(s3srv.URL, "http://"), &minio.Options{Creds: credentials.NewStaticV4("AKIAFAKE", "fake-secret", ""), Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.MakeBucket(t.Context(), "wts", minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string][]byte{"m/v/a.bin": a, "m/v/sub/b.bin": b} {
		if _, err := cl.PutObject(t.Context(), "wts", k, bytes.NewReader(v), int64(len(v)), minio.PutObjectOptions{UserMetadata: map[string]string{"sha256": weightsrv.SHA256(v)}}); err != nil {
			t.Fatal(err)
		}
	}
	c := newCache(t, Options{HFEndpoint: hub.Endpoint(), HFToken: hffake.Token, S3: s3cfg})
	for _, tc := range []struct {
		source string
		want   map[string][]byte
		file   string
	}{
		{"hf:org/m@v1", map[string][]byte{"model.safetensors": a, "cfg/config.json": b}, ""},
		{"hf:org/m@v1/cfg/config.json", map[string][]byte{"cfg/config.json": b}, "cfg/config.json"},
		{"s3://wts/m/v/", map[string][]byte{"a.bin": a, "sub/b.bin": b}, ""},
		{"s3://wts/m/v/sub/b.bin", map[string][]byte{"b.bin": b}, "b.bin"},
	} {
		path, err := c.Resolve(context.Background(), tc.source, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.source, err)
		}
		want := c.EntryDir(tc.source)
		if tc.file != "" {
			want = filepath.Join(want, filepath.FromSlash(tc.file))
		}
		if path != want {
			t.Errorf("%s: path %s, want %s", tc.source, path, want)
		}
		for name, data := range tc.want {
			got, err := os.ReadFile(filepath.Join(c.EntryDir(tc.source), filepath.FromSlash(name)))
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("%s: %s differs (%v)", tc.source, name, err)
			}
		}
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
