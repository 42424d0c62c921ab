// Package weightsrv is an HTTP server following the mirror's byte protocol
// (GET <model>/<version>/<path> with Range, Content-Length and
// X-Llmgw-Sha256; GET <model>/<version>/ for a set's manifest) that can
// misbehave on demand: cut connections at chosen or random offsets, ignore
// Range, corrupt a byte, hold answers, answer an error status, give no
// sha256 in the manifest or the answers. Tests of the downloader and of the agent's weights cache share it.
package weightsrv

import (
	"bytes"
	"context"
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

// Server follows the mirror's byte protocol: GET <model>/<version>/<path>
// answers the file with Range support, Content-Length and X-Llmgw-Sha256;
// GET <model>/<version>/ answers the set's manifest. It can cut a
// connection after a random number of bytes, ignore Range, corrupt a byte,
// and hold answers until released; it counts what it served.
type Server struct {
	t     testing.TB
	Files map[string][]byte // "model/version/path" -> bytes

	Mu   sync.Mutex
	Cuts int // connections still to cut
	// Plan, when set, is how many bytes each next answer sends before its
	// connection is cut, in order.
	Plan        []int64
	rng         *rand.Rand
	IgnoreRange bool
	Corrupt     bool
	Hold        chan struct{}
	requests    map[string]int
	ranges      []string
	served      int64
	Status      int // when set, every file request is answered with it
	// Rate, when set, paces every file answer to about this many bytes a
	// second (a slow upstream).
	Rate int64
	// Unsummed names files ("model/version/path") whose sha256 the
	// manifest leaves out, as a manifest may.
	Unsummed map[string]bool
	// NoAnswerSHA leaves X-Llmgw-Sha256 out of the file answers (a plain
	// web server).
	NoAnswerSHA bool
}

// New starts a server, closed when the test ends.
func New(t testing.TB) (*Server, *httptest.Server) {
	m := &Server{t: t, Files: map[string][]byte{}, rng: rand.New(rand.NewPCG(1, 2)), requests: map[string]int{}}
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	return m, srv
}

// RandomBytes returns n bytes generated from seed.
func RandomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// SHA256 is the lowercase hex sha256 of b.
func SHA256(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func (m *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := strings.TrimPrefix(r.URL.Path, "/")
	m.Mu.Lock()
	m.requests[p]++
	hold := m.Hold
	status := m.Status
	m.Mu.Unlock()
	if hold != nil {
		<-hold
	}
	if strings.HasSuffix(p, "/") {
		m.manifest(w, p)
		return
	}
	body, ok := m.Files[p]
	if !ok {
		http.NotFound(w, r)
		return
	}
	if status != 0 {
		http.Error(w, "test says no", status)
		return
	}
	m.Mu.Lock()
	if rg := r.Header.Get("Range"); rg != "" {
		m.ranges = append(m.ranges, rg)
	}
	cut := int64(-1)
	if len(m.Plan) > 0 {
		cut, m.Plan = m.Plan[0], m.Plan[1:]
	} else if m.Cuts > 0 && len(body) >= 64 {
		m.Cuts--
		cut = 1 + m.rng.Int64N(int64(len(body))/8) // five cuts still leave bytes to serve
	}
	ignore, corrupt, rate, nosum := m.IgnoreRange, m.Corrupt, m.Rate, m.NoAnswerSHA
	m.Mu.Unlock()
	if corrupt {
		body = bytes.Clone(body)
		body[len(body)/2] ^= 0xff
	}
	if !nosum {
		w.Header().Set("X-Llmgw-Sha256", SHA256(m.Files[p]))
	}
	if ignore {
		r.Header.Del("Range")
	}
	cw := &cutWriter{ResponseWriter: w, m: m, left: cut, rate: rate, start: time.Now(), ctx: r.Context()}
	http.ServeContent(cw, r, "", time.Time{}, bytes.NewReader(body))
}

func (m *Server) manifest(w http.ResponseWriter, prefix string) {
	type file struct {
		Path   string `json:"path"`
		Size   int64  `json:"size"`
		SHA256 string `json:"sha256,omitempty"`
	}
	parts := strings.SplitN(prefix, "/", 3)
	out := struct {
		Model   string `json:"model"`
		Version string `json:"version"`
		Files   []file `json:"files"`
	}{Model: parts[0], Version: parts[1]}
	for p, b := range m.Files {
		if rest, ok := strings.CutPrefix(p, prefix); ok {
			f := file{Path: rest, Size: int64(len(b)), SHA256: SHA256(b)}
			if m.Unsummed[p] {
				f.SHA256 = ""
			}
			out.Files = append(out.Files, f)
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
	m     *Server
	left  int64
	rate  int64
	start time.Time
	sent  int64
	ctx   context.Context
}

func (c *cutWriter) Write(b []byte) (int, error) {
	if c.left >= 0 && int64(len(b)) > c.left {
		b = b[:c.left]
	}
	if c.rate > 0 {
		// Small writes, each sent when the pace allows it.
		const chunk = 16 << 10
		var n int
		for len(b) > 0 {
			k := min(len(b), chunk)
			due := c.start.Add(time.Duration(float64(c.sent) / float64(c.rate) * float64(time.Second)))
			select {
			case <-time.After(time.Until(due)):
			case <-c.ctx.Done():
				return n, c.ctx.Err()
			}
			w, err := c.write(b[:k])
			n += w
			c.sent += int64(w)
			if err != nil {
				return n, err
			}
			b = b[k:]
		}
		return n, nil
	}
	return c.write(b)
}

func (c *cutWriter) write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	if c.rate > 0 {
		c.ResponseWriter.(http.Flusher).Flush()
	}
	c.m.Mu.Lock()
	c.m.served += int64(n)
	c.m.Mu.Unlock()
	if c.left >= 0 {
		c.left -= int64(n)
		if c.left == 0 {
			c.ResponseWriter.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // the connection is cut, not closed cleanly
		}
	}
	return n, err
}

// Count is how many requests asked for p (model/version/path).
func (m *Server) Count(p string) int {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	return m.requests[p]
}

// Ranges are the Range headers of the file requests, in order.
func (m *Server) Ranges() []string {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	return append([]string(nil), m.ranges...)
}

// Served is how many body bytes went out.
func (m *Server) Served() int64 {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	return m.served
}
