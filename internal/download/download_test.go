package download

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

	"github.com/llmgw/llmgw/testkit/weightsrv"
)

// fetch lists source and fetches it into dir.
func fetch(t *testing.T, d *Downloader, source, dir string, p *Progress) ([]Landed, error) {
	t.Helper()
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if p == nil {
		p = &Progress{}
	}
	files, err := d.List(t.Context(), source, p)
	if err != nil {
		return nil, err
	}
	return d.Fetch(t.Context(), dir, files, p, nil)
}

// checkDir fails unless dir holds exactly want (hidden names aside).
func checkDir(t *testing.T, dir string, want map[string][]byte) {
	t.Helper()
	got := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		got[filepath.ToSlash(rel)] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range want {
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil || !bytes.Equal(data, b) {
			t.Errorf("%s differs from the served file (%v)", name, err)
		}
		delete(got, name)
	}
	for name := range got {
		t.Errorf("unexpected file %s", name)
	}
}

// watchFinal fails the test if final ever exists with a size other than
// size: polled until stop is closed.
func watchFinal(t *testing.T, final string, size int64, stop chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if st, err := os.Stat(final); err == nil && st.Size() != size {
				t.Errorf("%s is visible with %d of its %d bytes", final, st.Size(), size)
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
	return &wg
}

// TestResumeAfterCuts: a connection cut at random offsets, five times in a
// row, costs a Range request each and never a restart; the file is whole,
// never visible under its name before it is, and the bytes served stay
// within the file's size plus what the cuts had in flight.
func TestResumeAfterCuts(t *testing.T) {
	m, srv := weightsrv.New(t)
	body := weightsrv.RandomBytes(3<<20+17, 1)
	m.Files["m/v/w.gguf"] = body
	m.Cuts = 5
	dir := t.TempDir()
	stop := make(chan struct{})
	wg := watchFinal(t, filepath.Join(dir, "w.gguf"), int64(len(body)), stop)
	p := &Progress{}
	landed, err := fetch(t, &Downloader{}, srv.URL+"/m/v/w.gguf", dir, p)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	checkDir(t, dir, map[string][]byte{"w.gguf": body})
	if len(landed) != 1 || landed[0].SHA256 != weightsrv.SHA256(body) || landed[0].Size != int64(len(body)) {
		t.Errorf("landed %+v", landed)
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
	if p.Bytes() != int64(len(body)) || p.Total() != int64(len(body)) {
		t.Errorf("progress %d/%d", p.Bytes(), p.Total())
	}
}

// TestRestartWhenRangeIgnored: a server that answers a Range request with
// 200 gets the file from the start, and the result is still whole.
func TestRestartWhenRangeIgnored(t *testing.T) {
	m, srv := weightsrv.New(t)
	body := weightsrv.RandomBytes(1<<20, 2)
	m.Files["m/v/w.gguf"] = body
	m.Cuts, m.IgnoreRange = 2, true
	dir := t.TempDir()
	if _, err := fetch(t, &Downloader{}, srv.URL+"/m/v/w.gguf", dir, nil); err != nil {
		t.Fatal(err)
	}
	checkDir(t, dir, map[string][]byte{"w.gguf": body})
}

// TestSetOfSeveralFiles: a URL ending in / is a set: every file of its
// manifest lands, verified, cuts and all.
func TestSetOfSeveralFiles(t *testing.T) {
	m, srv := weightsrv.New(t)
	want := map[string][]byte{
		"config.json":                      []byte(`{"x":1}`),
		"model-00001-of-00002.safetensors": weightsrv.RandomBytes(700<<10, 4),
		"tokenizer/tokenizer.json":         weightsrv.RandomBytes(10<<10, 6),
	}
	for p, b := range want {
		m.Files["big/2026-03/"+p] = b
	}
	m.Cuts = 3
	dir := t.TempDir()
	p := &Progress{}
	if _, err := fetch(t, &Downloader{}, srv.URL+"/big/2026-03/", dir, p); err != nil {
		t.Fatal(err)
	}
	checkDir(t, dir, want)
	if files, done := p.Files(); files != 3 || done != 3 {
		t.Errorf("progress files %d/%d", done, files)
	}
	if !IsSet(srv.URL+"/big/2026-03/") || IsSet(srv.URL+"/big/2026-03/x") {
		t.Error("IsSet")
	}
}

// TestCorruptByte: one flipped byte fails the sha256 check for good, and
// nothing is left under the final name or as a partial to resume from.
func TestCorruptByte(t *testing.T) {
	m, srv := weightsrv.New(t)
	m.Files["m/v/w.gguf"] = weightsrv.RandomBytes(256<<10, 7)
	m.Corrupt = true
	dir := t.TempDir()
	_, err := fetch(t, &Downloader{}, srv.URL+"/m/v/w.gguf", dir, nil)
	if !errors.Is(err, ErrVerify) || !IsPermanent(err) || !strings.Contains(err.Error(), srv.URL+"/m/v/w.gguf") {
		t.Fatalf("err = %v, want a permanent sha256 failure naming the URL", err)
	}
	for _, name := range []string{"w.gguf", ".w.gguf.partial"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists after a failed verification: %v", name, err)
		}
	}
	if m.Count("m/v/w.gguf") != 1 {
		t.Errorf("a corrupt file was fetched %d times", m.Count("m/v/w.gguf"))
	}
}

// TestDiskFull: a disk that refuses the bytes fails at once with the path
// written to.
func TestDiskFull(t *testing.T) {
	m, srv := weightsrv.New(t)
	m.Files["m/v/w.gguf"] = weightsrv.RandomBytes(64<<10, 8)
	dir := t.TempDir()
	partial := filepath.Join(dir, ".w.gguf.partial")
	if err := os.Symlink("/dev/full", partial); err != nil {
		t.Fatal(err)
	}
	_, err := fetch(t, &Downloader{}, srv.URL+"/m/v/w.gguf", dir, nil)
	if err == nil || !strings.Contains(err.Error(), partial) || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("err = %v, want no space left naming %s", err, partial)
	}
	if m.Count("m/v/w.gguf") != 1 {
		t.Errorf("a full disk was retried (%d requests)", m.Count("m/v/w.gguf"))
	}
}

// TestNotEnoughSpace: a file larger than the space left fails before a
// byte is written, naming the path, the bytes needed and the bytes free.
func TestNotEnoughSpace(t *testing.T) {
	m, srv := weightsrv.New(t)
	m.Files["m/v/w.gguf"] = weightsrv.RandomBytes(64<<10, 14)
	dir := t.TempDir()
	d := &Downloader{FreeBytes: func(string) (uint64, error) { return 1000, nil }}
	_, err := fetch(t, d, srv.URL+"/m/v/w.gguf", dir, nil)
	if err == nil || !strings.Contains(err.Error(), "65536 more bytes needed") || !strings.Contains(err.Error(), "1000 free") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("err = %v", err)
	}
	if st, err := os.Stat(filepath.Join(dir, ".w.gguf.partial")); err == nil && st.Size() != 0 {
		t.Errorf("%d bytes were written to a disk they do not fit", st.Size())
	}
}

// TestGiveUpAfter: a server that answers 503 moves no byte: the progress
// keeps the last error, and after GiveUpAfter the fetch fails with it.
func TestGiveUpAfter(t *testing.T) {
	m, srv := weightsrv.New(t)
	m.Files["m/v/w.gguf"] = weightsrv.RandomBytes(1024, 9)
	m.Status = http.StatusServiceUnavailable
	p := &Progress{}
	start := time.Now()
	_, err := fetch(t, &Downloader{GiveUpAfter: 500 * time.Millisecond, RetryDelay: 10 * time.Millisecond}, srv.URL+"/m/v/w.gguf", t.TempDir(), p)
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "no byte moved") {
		t.Fatalf("err = %v, want the 503 and no byte moved", err)
	}
	if time.Since(start) < 500*time.Millisecond {
		t.Errorf("gave up after %s", time.Since(start))
	}
	if !strings.Contains(p.LastError(), "503") {
		t.Errorf("last error %q", p.LastError())
	}
}

// TestMaxFailures: attempts that move nothing are counted; the limit ends
// the download with the last error.
func TestMaxFailures(t *testing.T) {
	m, srv := weightsrv.New(t)
	m.Files["m/v/w.gguf"] = weightsrv.RandomBytes(1024, 9)
	m.Status = http.StatusBadGateway
	_, err := fetch(t, &Downloader{MaxFailures: 3, RetryDelay: time.Millisecond}, srv.URL+"/m/v/w.gguf", t.TempDir(), nil)
	if err == nil || !strings.Contains(err.Error(), "giving up after 3 attempts") || !strings.Contains(err.Error(), "502") {
		t.Fatalf("err = %v", err)
	}
	if n := m.Count("m/v/w.gguf"); n != 3 {
		t.Errorf("%d requests, want 3", n)
	}
}

// TestHFResolveRedirect: hf:org/repo/file is fetched from the hub's resolve
// endpoint through its redirect, verified against the sha256 the redirect
// carries in X-Linked-Etag; a wrong one fails. The token goes to the hub
// only, never to where it redirects.
func TestHFResolveRedirect(t *testing.T) {
	body := weightsrv.RandomBytes(300<<10, 10)
	for _, tc := range []struct {
		name, etag string
		ok         bool
	}{{"verified", weightsrv.SHA256(body), true}, {"wrong sha256", weightsrv.SHA256([]byte("other")), false}} {
		t.Run(tc.name, func(t *testing.T) {
			var resolved, cdn int
			cdnSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				cdn++
				if r.Header.Get("Authorization") != "" {
					t.Error("the hub token reached the CDN")
				}
				w.Header().Set("ETag", `"not-a-sha"`)
				http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
			}))
			defer cdnSrv.Close()
			mux := http.NewServeMux()
			mux.HandleFunc("GET /org/repo/resolve/main/sub/w.gguf", func(w http.ResponseWriter, r *http.Request) {
				resolved++
				if r.Header.Get("Authorization") != "Bearer tok" {
					t.Error("no token on the hub's request")
				}
				w.Header().Set("X-Linked-Etag", `"`+tc.etag+`"`)
				w.Header().Set("X-Linked-Size", fmt.Sprint(len(body)))
				http.Redirect(w, r, cdnSrv.URL+"/blob", http.StatusFound)
			})
			hub := httptest.NewServer(mux)
			defer hub.Close()
			dir := t.TempDir()
			d := &Downloader{Upstreams: Upstreams{HFEndpoint: hub.URL, HFToken: "tok"}}
			_, err := fetch(t, d, "hf:org/repo/sub/w.gguf", dir, nil)
			if !tc.ok {
				if !errors.Is(err, ErrVerify) {
					t.Fatalf("err = %v, want a sha256 failure", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkDir(t, dir, map[string][]byte{"sub/w.gguf": body})
			if resolved != 1 || cdn != 1 {
				t.Errorf("resolve %d, cdn %d", resolved, cdn)
			}
		})
	}
}

// TestAlreadyThere: a file the caller says is in place is not asked for.
func TestAlreadyThere(t *testing.T) {
	m, srv := weightsrv.New(t)
	body := weightsrv.RandomBytes(10<<10, 15)
	m.Files["s/v/a"] = body
	m.Files["s/v/b"] = []byte("bee")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a"), body, 0o600); err != nil {
		t.Fatal(err)
	}
	d := &Downloader{Logger: slog.New(slog.DiscardHandler)}
	p := &Progress{}
	files, err := d.List(context.Background(), srv.URL+"/s/v/", p)
	if err != nil {
		t.Fatal(err)
	}
	landed, err := d.Fetch(context.Background(), dir, files, p, func(final string, f File) (string, bool) {
		return f.SHA256, filepath.Base(final) == "a"
	})
	if err != nil {
		t.Fatal(err)
	}
	// Files land in whatever order their downloads finish.
	shaOfA := ""
	for _, f := range landed {
		if f.Path == "a" {
			shaOfA = f.SHA256
		}
	}
	if m.Count("s/v/a") != 0 || m.Count("s/v/b") != 1 || len(landed) != 2 || shaOfA != weightsrv.SHA256(body) {
		t.Errorf("requests a=%d b=%d, landed %+v", m.Count("s/v/a"), m.Count("s/v/b"), landed)
	}
	if p.Bytes() != int64(len(body)+3) {
		t.Errorf("progress %d", p.Bytes())
	}
}
