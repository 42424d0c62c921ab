package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/pki"
	"github.com/llmgw/llmgw/runtime/config"
	"github.com/llmgw/llmgw/runtime/leader"
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
	// Written by a release before the lease: still read.
	if err := st.PutMeta(ctx, metaLiveReplicas, `["r-0"]`); err != nil {
		t.Fatal(err)
	}
	if ids, err := s.liveReplicasHint(ctx); err != nil || len(ids) != 1 || ids[0] != "r-0" {
		t.Fatalf("hint from meta = %v, %v; want [r-0]", ids, err)
	}
	// Only the leader records the live replicas, under its token.
	elected := make(chan int64, 1)
	s.ha = &ha{s: s, el: leader.New(leader.Options{Store: st, Name: "cp", OnElected: func(tok int64) { elected <- tok }})}
	ectx, stopElection := context.WithCancel(ctx)
	defer stopElection()
	go s.ha.el.Run(ectx)
	token := <-elected
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
	if err := st.PutFleetState(ctx, token, fleetLiveReplicas, "not json"); err != nil {
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

// testConfig is a configuration on loopback port 0 with a throwaway CA, a
// server certificate and a SQLite store in a temporary directory.
func testConfig(t *testing.T) config.Server {
	t.Helper()
	dir := t.TempDir()
	caFile, _, err := pki.InitCA(filepath.Join(dir, "ca"), pki.CAOptions{Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := pki.IssueServer(filepath.Join(dir, "ca"), "llmgw-server", []string{"127.0.0.1"}, dir, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Listen, cfg.AgentListen, cfg.ManageListen, cfg.MetricsListen, cfg.PprofListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", ""
	cfg.Auth.Store = filepath.Join(dir, "llmgw.db")
	cfg.AgentTLS.CA, cfg.AgentTLS.Cert, cfg.AgentTLS.Key = caFile, cert, key
	cfg.Normalize()
	return cfg
}

// TestNewAssemblesRunServes: New builds every part and binds every
// listener; Run serves on them and, when its context ends, stops and
// returns without error.
func TestNewAssemblesRunServes(t *testing.T) {
	s, err := New(context.Background(), testConfig(t), "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{ListenClient, ListenAgents, ListenManage, ListenMetrics} {
		if s.Addr(name) == "" {
			t.Fatalf("New bound no %s listener", name)
		}
	}
	if s.gateway == nil || s.recorder == nil || s.admission == nil || s.agentSrv == nil || s.manageSrv == nil || s.clientSrv == nil {
		t.Fatal("New left a part for Run to build")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + s.Addr(ListenClient) + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the client API never answered /health: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v after its context ended", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of its context ending")
	}
}

// TestNewReportsBadTLS: a certificate problem stops New, before anything
// runs, with an error naming the key.
func TestNewReportsBadTLS(t *testing.T) {
	cfg := testConfig(t)
	cfg.ManageTLS.Cert = filepath.Join(t.TempDir(), "missing.pem")
	_, err := New(context.Background(), cfg, "test", slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "manage_tls") {
		t.Fatalf("New with a missing manage_tls certificate = %v; want an error naming manage_tls", err)
	}
}
