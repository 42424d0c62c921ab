package fetch

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/llmgw/internal/download"
)

// The waits of the peer tests: a follower starts once the peer it follows
// can answer for the source (inFlight, or writing when it must already be
// writing files), and a test goes on once bytes are held or files landed.
// Asked before the peer began, a peer answers 404 and the follower takes
// the source itself: a start race, not what any test is about.

// inFlight waits until c runs a download of src (fetchingCall): from then
// on c's peer handler answers for src, with its files or a 503 while it
// waits or writes nothing yet.
func inFlight(t *testing.T, c *Cache, src string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		if _, _, _, ok := c.fetchingCall(Key(src)); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never began fetching %s", c.opts.Dir, src)
		}
	}
}

// writing waits until c's download of src writes files with every size
// known (fetchingCall gives its listing): its followers may follow it.
func writing(t *testing.T, c *Cache, src string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		if _, _, files, ok := c.fetchingCall(Key(src)); ok && files != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never began writing %s", c.opts.Dir, src)
		}
	}
}

// heldBytes is the size of the partial file, or of the landed file, of
// name in dir.
func heldBytes(dir, name string) int64 {
	return max(fileSize(download.PartialName(filepath.Join(dir, name))), fileSize(filepath.Join(dir, name)))
}

// awaitHeld waits until dir holds at least n bytes of name (heldBytes),
// failing with what's message after 20 s.
func awaitHeld(t *testing.T, dir, name string, n int64, what func() string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); heldBytes(dir, name) < n; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(what())
		}
	}
}

// awaitLanded waits until each of names has landed in dir (its final
// file, not a partial one) at the size sizes gives it, failing with msg
// after 20 s. Unlike awaitHeld, a partial file at full size, not yet
// verified and moved, does not count.
func awaitLanded(t *testing.T, dir string, sizes map[string]int64, msg string) {
	t.Helper()
	landed := func() bool {
		for name, n := range sizes {
			if fileSize(filepath.Join(dir, name)) != n {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(20 * time.Second); !landed(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
	}
}

// says is a fixed message for awaitHeld.
func says(msg string) func() string { return func() string { return msg } }

// growingCall sets c up as writing src's one file, body, of which the
// first held bytes are in its partial file: a download in flight (its
// progress begun, no byte since), as a follower finds it. It returns the
// call and the partial file's path.
func growingCall(t *testing.T, c *Cache, src string, body []byte, held int) (*call, string) {
	t.Helper()
	landed := filepath.Join(c.partialDir(src), "w.gguf")
	if err := os.MkdirAll(filepath.Dir(landed), 0o750); err != nil {
		t.Fatal(err)
	}
	partial := download.PartialName(landed)
	if err := os.WriteFile(partial, body[:held], 0o640); err != nil {
		t.Fatal(err)
	}
	p := c.newProgress()
	p.Begin()
	cl := &call{done: make(chan struct{}), cancel: func() {}, watch: map[int]func(Progress){}, progress: p,
		listing: []download.File{{Path: "w.gguf", Size: int64(len(body))}}}
	c.mu.Lock()
	c.inflight[src] = cl
	c.mu.Unlock()
	return cl, partial
}

// follow asks the peer server at base for path of src (empty: its
// entry) as a follower does.
func follow(t *testing.T, ctx context.Context, base, method, src, path string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, base+PeerPrefix+Key(src)+"/"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(followHeader, "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// countingStatus wraps a peer handler and counts the answers it gives
// with code: 503 is a follower told to wait, 404 a node told the peer has
// no such entry (not begun, perhaps).
func countingStatus(h http.Handler, code int) (http.Handler, *atomic.Int64) {
	var n atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		if rec.code == code {
			n.Add(1)
		}
	}), &n
}
