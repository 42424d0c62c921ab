package hffake

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func noRedirect() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// answer is a response read whole.
type answer struct {
	StatusCode int
	Header     http.Header
}

func do(t *testing.T, c *http.Client, url, token string) (answer, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header}, string(b)
}

// TestHubAnswers checks the answers the mirror relies on have the hub's
// shape: resolve redirects LFS files with their sha256 in X-Linked-Etag,
// the tree lists lfs.oid, gated repositories want the token, a missing file
// is an EntryNotFound 404.
func TestHubAnswers(t *testing.T) {
	s := New(t)
	data := []byte("weights")
	s.AddFile("org/m", "main", "w.gguf", data, true)
	s.AddFile("org/m", "main", "config.json", []byte("{}"), false)

	resp, _ := do(t, noRedirect(), s.URL+"/org/m/resolve/main/w.gguf", "")
	if resp.StatusCode != http.StatusFound || !strings.HasPrefix(resp.Header.Get("Location"), "/cdn/lfs/") ||
		resp.Header.Get("X-Linked-Etag") != `"`+sha256Hex(data)+`"` || resp.Header.Get("X-Linked-Size") != "7" ||
		resp.Header.Get("X-Repo-Commit") != s.Commit("org/m", "main") {
		t.Errorf("resolve of an LFS file: %d %v", resp.StatusCode, resp.Header)
	}
	resp, body := do(t, http.DefaultClient, s.URL+"/org/m/resolve/main/w.gguf", "")
	if resp.StatusCode != 200 || body != "weights" || resp.Header.Get("ETag") != `"`+sha256Hex(data)+`"` {
		t.Errorf("following the redirect: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	resp, body = do(t, http.DefaultClient, s.URL+"/org/m/resolve/main/config.json", "")
	if resp.StatusCode != 200 || body != "{}" || resp.Header.Get("X-Linked-Etag") != "" {
		t.Errorf("resolve of a git file: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	resp, _ = do(t, http.DefaultClient, s.URL+"/org/m/resolve/main/nope.gguf", "")
	if resp.StatusCode != 404 || resp.Header.Get("X-Error-Code") != "EntryNotFound" {
		t.Errorf("missing file: %d %v", resp.StatusCode, resp.Header)
	}

	_, body = do(t, http.DefaultClient, s.URL+"/api/models/org/m/tree/main?recursive=true", "")
	var tree []struct {
		Type, Path string
		Size       int
		LFS        *struct{ OID string }
	}
	if err := json.Unmarshal([]byte(body), &tree); err != nil {
		t.Fatal(err)
	}
	if len(tree) != 3 || tree[2].Path != "w.gguf" || tree[2].LFS == nil || tree[2].LFS.OID != sha256Hex(data) || tree[1].LFS != nil {
		t.Errorf("tree: %s", body)
	}

	s.Gate("org/m")
	for _, u := range []string{"/org/m/resolve/main/w.gguf", "/api/models/org/m/revision/main", "/api/models/org/m/tree/main"} {
		if resp, _ := do(t, noRedirect(), s.URL+u, ""); resp.StatusCode != 401 {
			t.Errorf("gated %s without token: %d", u, resp.StatusCode)
		}
		if resp, _ := do(t, noRedirect(), s.URL+u, Token); resp.StatusCode >= 400 {
			t.Errorf("gated %s with token: %d", u, resp.StatusCode)
		}
	}
}
