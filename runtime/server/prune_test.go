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
	go func() {
		pruneContent(pctx, st, 10*time.Millisecond, clock, slog.New(slog.DiscardHandler))
		close(done)
	}()
	gone := func(id string) bool {
		_, err := st.GetResponse(ctx, store.DefaultProject, id, now)
		return err != nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for !gone("resp_old") || !gone("resp_new") {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: resp_old gone %v, resp_new gone %v", gone("resp_old"), gone("resp_new"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
}
