package mirror

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// bytesServer serves a store holding m/v/{a.gguf, sub/b.gguf} plus hidden files.
func bytesServer(t *testing.T) (*httptest.Server, string, []byte) {
	t.Helper()
	dir := t.TempDir()
	data := []byte(strings.Repeat("0123456789", 100))
	writeFile(t, filepath.Join(dir, "m", "v", "sub", "b.gguf"), []byte("second file"))
	writeFile(t, filepath.Join(dir, "m", "v", "a.gguf"), data)
	writeFile(t, filepath.Join(dir, "m", "v", ".a.gguf.partial"), []byte("half"))
	writeFile(t, filepath.Join(dir, "secret.txt"), []byte("outside the layout"))
	st, err := NewStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(BytesHandler(st, slog.New(slog.DiscardHandler), nil))
	t.Cleanup(srv.Close)
	return srv, dir, data
}

// answer is a response read whole.
type answer struct {
	StatusCode int
	Header     http.Header
}

func get(t *testing.T, url string, header map[string]string) (answer, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{StatusCode: resp.StatusCode, Header: resp.Header}, body
}

func TestBytesRange(t *testing.T) {
	srv, _, data := bytesServer(t)
	for _, tc := range []struct {
		name, rng  string
		code       int
		body       string
		contentLen string
	}{
		{"full", "", 200, string(data), "1000"},
		{"partial", "bytes=10-19", 206, string(data[10:20]), "10"},
		{"open ended", "bytes=995-", 206, string(data[995:]), "5"},
		{"suffix", "bytes=-3", 206, string(data[997:]), "3"},
		{"beyond the end", "bytes=1000-", 416, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := map[string]string{}
			if tc.rng != "" {
				h["Range"] = tc.rng
			}
			resp, body := get(t, srv.URL+"/m/v/a.gguf", h)
			if resp.StatusCode != tc.code {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.code)
			}
			if tc.code == 416 {
				return
			}
			if string(body) != tc.body {
				t.Errorf("body %q, want %q", body, tc.body)
			}
			if got := resp.Header.Get("Content-Length"); got != tc.contentLen {
				t.Errorf("Content-Length %q, want %q", got, tc.contentLen)
			}
			if got := resp.Header.Get("Accept-Ranges"); got != "bytes" {
				t.Errorf("Accept-Ranges %q", got)
			}
			if got := resp.Header.Get(SHA256Header); got != sum(data) {
				t.Errorf("%s %q, want the whole file's %s", SHA256Header, got, sum(data))
			}
		})
	}
	t.Run("head", func(t *testing.T) {
		resp, err := http.Head(srv.URL + "/m/v/a.gguf")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.ContentLength != 1000 || resp.Header.Get(SHA256Header) != sum(data) {
			t.Errorf("HEAD: %d, length %d, sha %q", resp.StatusCode, resp.ContentLength, resp.Header.Get(SHA256Header))
		}
	})
}

func TestBytesManifest(t *testing.T) {
	srv, dir, data := bytesServer(t)
	resp, body := get(t, srv.URL+"/m/v/", nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("manifest: %d %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	var m Manifest
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	want := Manifest{Model: "m", Version: "v", Files: []File{
		{Path: "a.gguf", Size: 1000, SHA256: sum(data)},
		{Path: "sub/b.gguf", Size: 11, SHA256: sum([]byte("second file"))},
	}}
	if got, _ := json.Marshal(m); string(got) != string(mustJSON(t, want)) {
		t.Errorf("manifest\n got %s\nwant %s", got, mustJSON(t, want))
	}
	// The sum is cached beside the file, keyed by size and mtime: a file
	// replaced by one of another size gets a new sum.
	if _, err := os.Stat(filepath.Join(dir, "m", "v", ".a.gguf.sha256")); err != nil {
		t.Errorf("no sha256 sidecar after the manifest: %v", err)
	}
	other := []byte("replaced")
	writeFile(t, filepath.Join(dir, "m", "v", "a.gguf"), other)
	later := time.Now().Add(time.Minute)
	_ = os.Chtimes(filepath.Join(dir, "m", "v", "a.gguf"), later, later)
	if resp, _ := get(t, srv.URL+"/m/v/a.gguf", nil); resp.Header.Get(SHA256Header) != sum(other) {
		t.Errorf("after replacing the file the sha256 is %q, want %q", resp.Header.Get(SHA256Header), sum(other))
	}
	// A set still downloading has no manifest.
	writeFile(t, filepath.Join(dir, "m", "v", incompleteMarker), nil)
	if resp, _ := get(t, srv.URL+"/m/v/", nil); resp.StatusCode != 404 {
		t.Errorf("manifest of an incomplete set: %d, want 404", resp.StatusCode)
	}
	if resp, _ := get(t, srv.URL+"/m/nope/", nil); resp.StatusCode != 404 {
		t.Errorf("manifest of a missing version: %d, want 404", resp.StatusCode)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBytesRefusesTraversal sends raw request lines, as a client that does
// not clean its paths would.
func TestBytesRefusesTraversal(t *testing.T) {
	srv, _, _ := bytesServer(t)
	for _, p := range []string{
		"/m/v/../../secret.txt",
		"/m/v/sub/../../../secret.txt",
		"/m/v/%2e%2e/%2e%2e/secret.txt",
		"/m/v//etc/passwd",
		"/m/v/.a.gguf.partial",
		"/m/v/.a.gguf.sha256",
		"/../secret.txt",
		"/m/../secret.txt/x",
		"/m/v/sub/",
	} {
		t.Run(p, func(t *testing.T) {
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, "GET "+p+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(conn)
			status, _, _ := strings.Cut(string(raw), "\r\n")
			if !strings.Contains(status, " 400 ") && !strings.Contains(status, " 404 ") {
				t.Errorf("GET %s: %q, want 400 or 404", p, status)
			}
			if strings.Contains(string(raw), "outside the layout") || strings.Contains(string(raw), "half") {
				t.Errorf("GET %s served a file it must not:\n%s", p, raw)
			}
		})
	}
}

// TestBytesSumKeptInMemory: once a file's sha256 is known, answering it
// again reads neither the file nor its sidecar (a sidecar emptied by hand
// changes nothing); a file replaced, or a version deleted and held again,
// is hashed afresh.
func TestBytesSumKeptInMemory(t *testing.T) {
	srv, dir, data := bytesServer(t)
	if resp, _ := get(t, srv.URL+"/m/v/a.gguf", nil); resp.Header.Get(SHA256Header) != sum(data) {
		t.Fatalf("first answer: sha256 %q", resp.Header.Get(SHA256Header))
	}
	side := filepath.Join(dir, "m", "v", ".a.gguf.sha256")
	writeFile(t, side, nil)
	if resp, _ := get(t, srv.URL+"/m/v/a.gguf", nil); resp.Header.Get(SHA256Header) != sum(data) {
		t.Errorf("second answer: sha256 %q, want %q from memory", resp.Header.Get(SHA256Header), sum(data))
	}
	if b, _ := os.ReadFile(side); len(b) != 0 {
		t.Errorf("the sidecar was rewritten (%q): the second answer hashed the file again", b)
	}
	other := []byte("another file of another size")
	writeFile(t, filepath.Join(dir, "m", "v", "a.gguf"), other)
	if resp, _ := get(t, srv.URL+"/m/v/a.gguf", nil); resp.Header.Get(SHA256Header) != sum(other) {
		t.Errorf("after replacing the file: sha256 %q, want %q", resp.Header.Get(SHA256Header), sum(other))
	}
}
