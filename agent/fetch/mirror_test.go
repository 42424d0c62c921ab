package fetch

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// testMirror follows the mirror's byte protocol: GET <model>/<version>/<path>
// answers the file with Range support, Content-Length and X-Llmgw-Sha256;
// GET <model>/<version>/ answers the set's manifest. It can cut a
// connection after a random number of bytes, ignore Range, corrupt a byte,
// and hold answers until released; it counts what it served.
type testMirror struct {
	t     *testing.T
	files map[string][]byte // "model/version/path" -> bytes

	mu   sync.Mutex
	cuts int // connections still to cut
	// plan, when set, is how many bytes each next answer sends before its
	// connection is cut, in order.
	plan        []int64
	rng         *rand.Rand
	ignoreRange bool
	corrupt     bool
	hold        chan struct{}
	requests    map[string]int
	ranges      []string
	served      int64
	status      int // when set, every file request is answered with it
}

func newTestMirror(t *testing.T) (*testMirror, *httptest.Server) {
	m := &testMirror{t: t, files: map[string][]byte{}, rng: rand.New(rand.NewPCG(1, 2)), requests: map[string]int{}}
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	return m, srv
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func (m *testMirror) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := strings.TrimPrefix(r.URL.Path, "/")
	m.mu.Lock()
	m.requests[p]++
	hold := m.hold
	status := m.status
	m.mu.Unlock()
	if hold != nil {
		<-hold
	}
	if strings.HasSuffix(p, "/") {
		m.manifest(w, p)
		return
	}
	body, ok := m.files[p]
	if !ok {
		http.NotFound(w, r)
		return
	}
	if status != 0 {
		http.Error(w, "test says no", status)
		return
	}
	m.mu.Lock()
	if rg := r.Header.Get("Range"); rg != "" {
		m.ranges = append(m.ranges, rg)
	}
	cut := int64(-1)
	if len(m.plan) > 0 {
		cut, m.plan = m.plan[0], m.plan[1:]
	} else if m.cuts > 0 && len(body) >= 64 {
		m.cuts--
		cut = 1 + m.rng.Int64N(int64(len(body))/8) // five cuts still leave bytes to serve
	}
	ignore, corrupt := m.ignoreRange, m.corrupt
	m.mu.Unlock()
	if corrupt {
		body = bytes.Clone(body)
		body[len(body)/2] ^= 0xff
	}
	w.Header().Set("X-Llmgw-Sha256", sum(m.files[p]))
	if ignore {
		r.Header.Del("Range")
	}
	cw := &cutWriter{ResponseWriter: w, m: m, left: cut}
	http.ServeContent(cw, r, "", time.Time{}, bytes.NewReader(body))
}

func (m *testMirror) manifest(w http.ResponseWriter, prefix string) {
	type file struct {
		Path   string `json:"path"`
		Size   int64  `json:"size"`
		SHA256 string `json:"sha256"`
	}
	parts := strings.SplitN(prefix, "/", 3)
	out := struct {
		Model   string `json:"model"`
		Version string `json:"version"`
		Files   []file `json:"files"`
	}{Model: parts[0], Version: parts[1]}
	for p, b := range m.files {
		if rest, ok := strings.CutPrefix(p, prefix); ok {
			out.Files = append(out.Files, file{Path: rest, Size: int64(len(b)), SHA256: sum(b)})
		}
	}
	if len(out.Files) == 0 {
		http.NotFound(w, nil)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// cutWriter counts the body bytes served and, when left is not negative,
// drops the connection once left bytes went out.
type cutWriter struct {
	http.ResponseWriter
	m    *testMirror
	left int64
}

func (c *cutWriter) Write(b []byte) (int, error) {
	if c.left >= 0 && int64(len(b)) > c.left {
		b = b[:c.left]
	}
	n, err := c.ResponseWriter.Write(b)
	c.m.mu.Lock()
	c.m.served += int64(n)
	c.m.mu.Unlock()
	if c.left >= 0 {
		c.left -= int64(n)
		if c.left == 0 {
			c.ResponseWriter.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // the connection is cut, not closed cleanly
		}
	}
	return n, err
}

func (m *testMirror) count(p string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.requests[p]
}
