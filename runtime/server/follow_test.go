package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/config"
	"github.com/llmgw/llmgw/runtime/leader"
	"github.com/llmgw/llmgw/runtime/models"
	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/spec"
)

// cutStore is a store whose fleet state cannot be read while down, as
// when the database cannot be reached; failed counts those reads.
type cutStore struct {
	store.Store
	down   atomic.Bool
	failed atomic.Int64
}

func (c *cutStore) GetFleetState(ctx context.Context, key string) (store.FleetState, error) {
	if c.down.Load() {
		c.failed.Add(1)
		return store.FleetState{}, errors.New("dial unix /run/postgresql/.s.PGSQL.5432: connect: connection refused")
	}
	return c.Store.GetFleetState(ctx, key)
}

// TestStandbyLogsStoreOutageOnce: a standby that cannot read the leader's
// routes (4 times a second) logs it once per outage, and once when it
// reads them again.
func TestStandbyLogsStoreOutageOnce(t *testing.T) {
	ctx := t.Context()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "llmgw.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, ok, err := st.AcquireLease(ctx, store.LeaseClaim{Name: store.FleetLease, Holder: "cp-a", Instance: "a1", TTL: time.Minute}); err != nil || !ok {
		t.Fatal(ok, err)
	}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	cut := &cutStore{Store: st}
	s := &Server{Store: cut, Router: router.New(), log: log}
	if s.Catalog, err = models.New(nil, st, log); err != nil {
		t.Fatal(err)
	}
	s.ha = &ha{s: s, name: "cp-b", cfg: config.HA{Lease: time.Minute},
		el: leader.New(leader.Options{Store: st, Name: "cp-b", TTL: time.Minute, Logger: log})}
	rctx, cancel := context.WithCancel(ctx)
	go s.ha.el.Run(rctx)
	defer func() { cancel(); <-s.ha.el.Done() }()
	waitUntil(t, "cp-b to see cp-a lead", 5*time.Second, func() bool { return s.ha.el.Status().Lease.Holder == "cp-a" })
	done := make(chan struct{})
	go func() { defer close(done); s.ha.follow(rctx) }()
	defer func() { cancel(); <-done }()
	waitUntil(t, "cp-b to follow", 5*time.Second, func() bool {
		s.ha.mu.Lock()
		defer s.ha.mu.Unlock()
		return !s.ha.followedAt.IsZero()
	})

	warnings := func() int { return strings.Count(logs.String(), `msg="following the leader"`) }
	for outage := 1; outage <= 2; outage++ {
		cut.failed.Store(0)
		cut.down.Store(true)
		// Eight failed reads: two seconds of outage.
		waitUntil(t, "eight failed reads", 10*time.Second, func() bool { return cut.failed.Load() >= 8 })
		if n := warnings(); n != outage {
			t.Fatalf("outage %d of 8 failed reads: %d warnings in all, want %d", outage, n, outage)
		}
		cut.down.Store(false)
		n := strings.Count(logs.String(), `msg="following the leader again"`)
		waitUntil(t, "the recovery to be logged", 5*time.Second, func() bool {
			return strings.Count(logs.String(), `msg="following the leader again"`) > n
		})
	}
}

// TestStandbyRoutesAModelItsCatalogLearnsLate: the leader's routes can
// name a model before this standby's catalog (read less often) holds it;
// once the catalog does, the model is routed, although the routes have not
// changed since.
func TestStandbyRoutesAModelItsCatalogLearnsLate(t *testing.T) {
	ctx := t.Context()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "llmgw.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	lease, ok, err := st.AcquireLease(ctx, store.LeaseClaim{Name: store.FleetLease, Holder: "cp-a", Instance: "a1", TTL: time.Minute})
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	log := slog.New(slog.DiscardHandler)
	s := &Server{Store: st, Router: router.New(), log: log}
	if s.Catalog, err = models.New(nil, st, log); err != nil {
		t.Fatal(err)
	}
	s.ha = &ha{s: s, name: "cp-b", cfg: config.HA{Lease: time.Minute},
		el: leader.New(leader.Options{Store: st, Name: "cp-b", TTL: time.Minute, Logger: log})}
	// The leader routes "late" to a replica; the standby reads the routes
	// before its catalog has the model.
	routes, _ := json.Marshal(map[string][]router.Endpoint{"late": {{ReplicaID: "r-1", Model: "late", URL: "http://127.0.0.1:9", Weight: 1}}})
	if err := st.PutFleetState(ctx, lease.Token, fleetRoutes, string(routes)); err != nil {
		t.Fatal(err)
	}
	if err := s.ha.followOnce(ctx, false); err != nil {
		t.Fatal(err)
	}
	// The model reaches the stored catalog; the standby reads it with the
	// same routes.
	m, _ := json.Marshal(spec.Model{Name: "late", Source: "sim://late", Scaling: spec.Scaling{Min: 1, Max: 1},
		Profiles: []spec.Profile{{Name: "p", Engine: "sim", GPUClass: "h100-80g", TP: 1}}})
	if _, err := st.PutModel(ctx, "late", m); err != nil {
		t.Fatal(err)
	}
	if err := s.ha.followOnce(ctx, true); err != nil {
		t.Fatal(err)
	}
	lease2, err := s.Router.Route("late", router.Request{})
	if err != nil {
		t.Fatalf("standby does not route the model its catalog learned after the routes: %v", err)
	}
	defer lease2.Done()
	if got := lease2.Endpoint().ReplicaID; got != "r-1" {
		t.Fatalf("routed to %q, want r-1", got)
	}
}
