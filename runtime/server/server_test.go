package server

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/config"
	"github.com/llmgw/llmgw/runtime/store"
)

func TestLiveReplicasHintRoundTrip(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "llmgw.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := &Server{Store: st, log: slog.New(slog.NewTextHandler(io.Discard, nil)), metaKick: make(chan struct{}, 1)}
	if ids, err := s.liveReplicasHint(ctx); err != nil || ids != nil {
		t.Fatalf("hint on a new store = %v, %v; want none", ids, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { s.writeMeta(wctx); close(done) }()
	s.recordLiveReplicas([]string{"r-1"})
	s.recordLiveReplicas([]string{"r-1", "r-2"})
	deadline := time.Now().Add(10 * time.Second)
	for {
		ids, err := s.liveReplicasHint(ctx)
		if err == nil && len(ids) == 2 && ids[1] == "r-2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hint = %v, %v; want the last recorded set", ids, err)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition
	}
	cancel()
	<-done
	if err := st.PutMeta(ctx, metaLiveReplicas, "not json"); err != nil {
		t.Fatal(err)
	}
	if ids, err := s.liveReplicasHint(ctx); err != nil || ids != nil {
		t.Fatalf("unreadable hint = %v, %v; want it ignored", ids, err)
	}
}

// TestBadStoreNamesTheKey: a store that cannot be opened stops the server
// with an error naming auth.store and the file at fault.
func TestBadStoreNamesTheKey(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-file")
	cfg := config.Default()
	cfg.Auth.Store = "@" + missing
	_, err := New(context.Background(), cfg, "test", slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "auth.store") || !strings.Contains(err.Error(), missing) {
		t.Fatalf("New with a missing store address file = %v; want an error naming auth.store and %s", err, missing)
	}
}
