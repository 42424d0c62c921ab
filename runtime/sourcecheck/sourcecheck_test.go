package sourcecheck

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestCheck: a present file and a set's manifest pass silently, a missing
// file is refused naming the source and the answer, an unreachable or
// silent source passes with a warning that the check was skipped, sources
// that are not fetched are not asked.
func TestCheck(t *testing.T) {
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.Method+" "+r.URL.Path)
		switch r.URL.Path {
		case "/m/v/weights.bin", "/m/v/", "/org/repo/resolve/main/f.gguf", "/org/repo/resolve/v2/f.gguf", "/api/models/org/repo/revision/main":
			w.WriteHeader(http.StatusOK)
		case "/gone.bin":
			w.WriteHeader(http.StatusGone)
		case "/gated/repo/resolve/main/f.gguf":
			w.WriteHeader(http.StatusUnauthorized)
		case "/slow.bin":
			time.Sleep(500 * time.Millisecond)
		case "/broken.bin":
			w.WriteHeader(http.StatusBadGateway)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	refused := "http://" + closed.Addr().String() + "/m/v/weights.bin"
	closed.Close()

	c := &Checker{HFEndpoint: srv.URL, Timeout: 200 * time.Millisecond}
	ctx := context.Background()
	for _, src := range []string{srv.URL + "/m/v/weights.bin", srv.URL + "/m/v/", "hf:org/repo/f.gguf", "hf:org/repo@v2/f.gguf", "hf:org/repo", "sim://chat", "/models/x.gguf", "Org/Name", ""} {
		if w, err := c.Check(ctx, src); w != "" || err != nil {
			t.Errorf("%q: warning %q, err %v; want neither", src, w, err)
		}
	}
	if want := []string{"HEAD /m/v/weights.bin", "GET /m/v/", "HEAD /org/repo/resolve/main/f.gguf", "HEAD /org/repo/resolve/v2/f.gguf", "GET /api/models/org/repo/revision/main"}; strings.Join(asked, ",") != strings.Join(want, ",") {
		t.Errorf("asked %v, want %v", asked, want)
	}
	for _, tc := range []struct{ src, status string }{
		{srv.URL + "/m/v/typo.bin", "404 Not Found"},
		{srv.URL + "/m/nope/", "404 Not Found"},
		{srv.URL + "/gone.bin", "410 Gone"},
		{"hf:org/nope/f.gguf", "404 Not Found"},
		{"hf:org/repo@v9", "404 Not Found"},
	} {
		w, err := c.Check(ctx, tc.src)
		var miss *MissError
		if !errors.As(err, &miss) || w != "" {
			t.Errorf("%q: warning %q, err %v; want a miss", tc.src, w, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, tc.src) || !strings.Contains(msg, tc.status) {
			t.Errorf("%q: error %q does not name the source and %s", tc.src, msg, tc.status)
		}
	}
	for _, tc := range []struct{ src, says string }{
		{refused, "cannot reach it"},
		{srv.URL + "/slow.bin", "no answer within 200ms"},
		{srv.URL + "/broken.bin", "502 Bad Gateway"},
		{"hf:gated/repo/f.gguf", "no hub token"},
		{"s3://bucket/m/w.gguf", "nodes' credentials"},
	} {
		w, err := c.Check(ctx, tc.src)
		if err != nil || !strings.Contains(w, "check skipped") || !strings.Contains(w, tc.says) || !strings.Contains(w, tc.src) {
			t.Errorf("%q: warning %q, err %v; want a skipped check saying %q", tc.src, w, err, tc.says)
		}
	}
	// With a token the hub's 401 is the hub's word: refused.
	c.HFToken = "t"
	if _, err := c.Check(ctx, "hf:gated/repo/f.gguf"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("gated with a token: err %v, want a 401 refusal", err)
	}
}
