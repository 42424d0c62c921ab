package server

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/store"
)

// TestPruneContentDeletesExpired: the pruner runs at start and on every
// tick, and takes what expired, leaving what has not.
func TestPruneContentDeletesExpired(t *testing.T) {
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), "llmgw.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := t.Context()
	if err := st.SetRetention(ctx, store.DefaultProject, store.ContentThreads, 1); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for id, exp := range map[string]time.Time{"resp_old": now.Add(-time.Minute), "resp_new": now.Add(time.Hour)} {
		if err := st.PutResponse(ctx, store.StoredResponse{Project: store.DefaultProject, ID: id, Body: []byte("{}"), History: []byte("[]"), ExpiresAt: exp}); err != nil {
			t.Fatal(err)
		}
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	// The clock jumps two hours on the second prune: resp_new expires too.
	calls := 0
	clock := func() time.Time {
		calls++
		if calls > 1 {
			return now.Add(2 * time.Hour)
		}
		return now
	}
	p := &signalingPruner{st: st, pruned: make(chan int64)}
	go func() {
		pruneContent(pctx, p, 10*time.Millisecond, clock, slog.New(slog.DiscardHandler))
		close(done)
	}()
	gone := func(id string) bool {
		_, err := st.GetResponse(ctx, store.DefaultProject, id, now)
		return err != nil
	}
	// At start: the expired one goes, the other stays.
	if n := p.next(t); n != 1 || !gone("resp_old") || gone("resp_new") {
		t.Fatalf("first prune deleted %d: resp_old gone %v, resp_new gone %v", n, gone("resp_old"), gone("resp_new"))
	}
	// On the next tick, two hours later: the other goes too.
	if n := p.next(t); n != 1 || !gone("resp_new") {
		t.Fatalf("second prune deleted %d: resp_new gone %v", n, gone("resp_new"))
	}
	cancel() // a prune in progress does not wait for a reader then
	<-done
}

// signalingPruner prunes with the store and sends each prune's count.
type signalingPruner struct {
	st     contentPruner
	pruned chan int64
}

func (p *signalingPruner) PruneContent(ctx context.Context, now time.Time) (int64, error) {
	n, err := p.st.PruneContent(ctx, now)
	select {
	case p.pruned <- n:
	case <-ctx.Done():
	}
	return n, err
}

// next waits for the next prune and returns what it deleted.
func (p *signalingPruner) next(t *testing.T) int64 {
	t.Helper()
	select {
	case n := <-p.pruned:
		return n
	case <-time.After(10 * time.Second):
		t.Fatal("no prune within 10s")
		return 0
	}
}
