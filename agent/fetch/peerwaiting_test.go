package fetch

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/llmgw/llmgw/testkit/weightsrv"
)

// TestWaitOnPeerIsOneFact: a node that writes files and goes on to wait
// on a peer of its own (after the peer it followed cut its answer, before
// that peer answered 503) says so the same way to everyone following it:
// its progress says it is not idle (X-Llmgw-Fetching-Idle 0), and a
// follower at the end of its growing file is cut at once, to ask how it
// fares and wait on it, rather than kept on a file that grows no more
// until stall_after.
func TestWaitOnPeerIsOneFact(t *testing.T) {
	const stall = 30 * time.Second
	c := newCache(t, Options{StallAfter: stall})
	src := "https://mirror.invalid/m/v/w.gguf"
	body := weightsrv.RandomBytes(128<<10, 95)
	half := len(body) / 2
	cl, _ := growingCall(t, c, src, body, half)
	defer close(cl.done)
	c.waitingOn(cl, true)
	defer c.waitingOn(cl, false)

	srv := httptest.NewServer(c.PeerHandler())
	defer srv.Close()
	hresp := follow(t, context.Background(), srv.URL, http.MethodHead, src, "")
	hresp.Body.Close()
	if got := hresp.Header.Get(idleHeader); got != "0" {
		t.Errorf("waiting on a peer of its own, the node says %s %q, want 0", idleHeader, got)
	}

	// A bound on the wait for the cut, well under stall_after (which
	// would cut the follower too, for another reason).
	ctx, cancel := context.WithTimeout(context.Background(), stall/3)
	defer cancel()
	resp := follow(t, ctx, srv.URL, http.MethodGet, src, "w.gguf")
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	switch {
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil:
		t.Fatalf("the follower was not cut within %s while the node waits on a peer of its own (it says it is not idle): read %d bytes", stall/3, len(b))
	case err == nil || len(b) != half:
		t.Errorf("the follower read %d bytes (%v), want the %d written and then a cut", len(b), err, half)
	}
}
