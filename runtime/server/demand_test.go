package server

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/config"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/leader"
	"github.com/llmgw/llmgw/runtime/models"
	"github.com/llmgw/llmgw/runtime/reconcile"
	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/spec"
	"github.com/llmgw/llmgw/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func record(t *testing.T, rec demandRecord) string {
	t.Helper()
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func ms(v int64) *int64 { return &v }

// TestDemandMerge: the leader counts the records of other control planes
// written within ha.lease, each once, with ages by the database's clock;
// its own record and stale ones count for nothing, but the time of a
// request once reported is kept; a first request counts once, and only
// while recent.
func TestDemandMerge(t *testing.T) {
	h := leaderWith(t, lazyModel("m", 0, 1))
	d := newDemand(h)
	now := time.Now()
	fresh := record(t, demandRecord{Models: map[string]modelDemand{
		"m": {IdleMS: ms(1000), Waiting: 1, InFlight: map[string]int64{"r1": 2}, Asks: 1, AskedMS: 200},
	}})
	rows := []store.PeerDemand{
		{Name: "cp-a", Instance: "a1", Value: record(t, demandRecord{Models: map[string]modelDemand{"m": {InFlight: map[string]int64{"r1": 9}, Waiting: 9}}})},
		{Name: "cp-b", Instance: "b1", Value: fresh, Age: 100 * time.Millisecond},
		{Name: "cp-c", Instance: "c1", Age: 7 * time.Second, Value: record(t, demandRecord{Models: map[string]modelDemand{
			"m": {IdleMS: ms(0), InFlight: map[string]int64{"r1": 5}, Waiting: 3, Asks: 4},
		}})},
		{Name: "cp-d", Instance: "d1", Value: "not json"},
	}
	if !d.merge(rows, now) {
		t.Fatal("a first request through cp-b was not reported as new")
	}
	own := router.Demand{InFlight: 1, LastRequest: now.Add(-time.Minute), Queue: 1, Capacity: 2}
	eps := func() []router.EndpointLoad {
		return []router.EndpointLoad{{Endpoint: router.Endpoint{ReplicaID: "r1"}, InFlight: 1}}
	}
	got := d.merged("m", own, eps)
	wantLast := now.Add(-1100 * time.Millisecond)
	if got.InFlight != 3 || got.Waiting != 1 || !got.Pending || !got.LastRequest.Equal(wantLast) || got.Queue != 3 || got.Capacity != 2 {
		t.Fatalf("merged = %+v; want 3 in flight, 1 waiting, pending, last request %v, queue 3", got, wantLast)
	}
	// The engine's own count already holds part of cp-b's requests.
	engine := func() []router.EndpointLoad {
		return []router.EndpointLoad{{Endpoint: router.Endpoint{ReplicaID: "r1"}, InFlight: 1, Engine: router.EngineLoad{Known: true, Running: 2}}}
	}
	if got := d.merged("m", router.Demand{Queue: 2}, engine); got.Queue != 3 {
		t.Errorf("queue with the engine reporting one of cp-b's two requests = %d, want 3", got.Queue)
	}
	// A draining replica's requests are finishing: they are not load on
	// the replicas that remain.
	draining := func() []router.EndpointLoad {
		return []router.EndpointLoad{{Endpoint: router.Endpoint{ReplicaID: "r1", Draining: true}, InFlight: 1}}
	}
	if got := d.merged("m", router.Demand{Queue: 0, Capacity: 1}, draining); got.Queue != 0 || got.InFlight != 2 {
		t.Errorf("merged with r1 draining = %+v, want queue 0 (cp-b's two requests on r1 left out) and 2 in flight", got)
	}
	snap := d.addInFlight(map[string][]router.EndpointLoad{"m": {{Endpoint: router.Endpoint{ReplicaID: "r1"}, InFlight: 1}}})
	if snap["m"][0].InFlight != 3 {
		t.Errorf("snapshot = %+v; want r1 with 3 in flight", snap)
	}
	if !d.takePending("m") || d.takePending("m") {
		t.Error("a standby's first request was not taken exactly once")
	}
	if d.merge(rows, now) || d.merged("m", router.Demand{}, eps).Pending {
		t.Error("the same first request counted again on the next read")
	}
	// A further ask counts; one reported long after it came does not.
	next := record(t, demandRecord{Models: map[string]modelDemand{"m": {Asks: 2, AskedMS: 100}}})
	if !d.merge([]store.PeerDemand{{Name: "cp-b", Instance: "b1", Value: next}}, now) {
		t.Error("a second first request was not counted")
	}
	d.takePending("m")
	old := record(t, demandRecord{Models: map[string]modelDemand{"m": {Asks: 3, AskedMS: 10_000}}})
	if d.merge([]store.PeerDemand{{Name: "cp-b", Instance: "b1", Value: old}}, now) {
		t.Error("a first request 10 s old counted as new")
	}
	// cp-b's record ages out: nothing in flight or waiting is left, but
	// the request it reported still happened.
	rows[1].Age = 6*time.Second + time.Millisecond
	d.merge(rows, now)
	got = d.merged("m", router.Demand{}, eps)
	if got.InFlight != 0 || got.Waiting != 0 || got.Pending || !got.LastRequest.Equal(wantLast) {
		t.Errorf("after cp-b's record aged out: %+v; want nothing but the last request at %v", got, wantLast)
	}
	if snap := d.addInFlight(map[string][]router.EndpointLoad{}); len(snap) != 0 {
		t.Errorf("snapshot after the record aged out = %+v", snap)
	}
}

// lazyModel is a model named name with scaling min and max.
func lazyModel(name string, lo, hi int) spec.Model {
	return spec.Model{Name: name, Source: "sim://" + name, Scaling: spec.Scaling{Min: lo, Max: hi},
		Profiles: []spec.Profile{{Name: "p", Engine: "sim", GPUClass: "h100-80g", TP: 1}}}
}

// storeWith opens a store in a test directory and a catalog over it
// holding ms (loaded), and returns both with a silent logger.
func storeWith(t *testing.T, ms ...spec.Model) (store.Store, *models.Registry, *slog.Logger) {
	t.Helper()
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), "llmgw.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.DiscardHandler)
	for i := range ms {
		ms[i].Normalize()
	}
	cat, err := models.New(ms, st, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := cat.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	return st, cat, log
}

// standbyFollowing is a standby named cp-b over st and cat that has read
// what the leader wrote for its router (followLoading, with the catalog).
func standbyFollowing(t *testing.T, st store.Store, cat *models.Registry, log *slog.Logger) *Server {
	t.Helper()
	s := &Server{Store: st, Catalog: cat, Router: router.New(), log: log}
	s.ha = &ha{s: s, name: "cp-b", el: leader.New(leader.Options{Store: st, Name: "cp-b"})}
	if err := s.ha.followLoading(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	return s
}

// leaderWith is the ha part of a leader named cp-a (lease 6 s) whose
// catalog holds ms.
func leaderWith(t *testing.T, ms ...spec.Model) *ha {
	t.Helper()
	reg, err := models.New(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if _, err := reg.Create(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	return &ha{name: "cp-a", cfg: config.HA{Lease: 6 * time.Second, Renew: 2 * time.Second},
		s: &Server{log: slog.New(slog.DiscardHandler), Catalog: reg}}
}

// TestDemandPendingBounded: a standby's first request asks for a replica
// for ha.lease at most, and only while its model is in the catalog and
// loaded on demand: one the reconciler never took (the model was deleted,
// or given a fixed count) does not place a replica of the model created
// or made on demand again later, however long after.
func TestDemandPendingBounded(t *testing.T) {
	h := leaderWith(t, lazyModel("gone", 0, 1), lazyModel("od", 0, 1), lazyModel("fixed", 1, 1))
	d := newDemand(h)
	now := time.Now()
	ask := func(names ...string) []store.PeerDemand {
		rec := demandRecord{Models: map[string]modelDemand{}}
		for _, n := range names {
			rec.Models[n] = modelDemand{IdleMS: ms(10), Asks: 1, AskedMS: 10}
		}
		return []store.PeerDemand{{Name: "cp-b", Instance: "b1", Value: record(t, rec)}}
	}
	if !d.merge(ask("gone"), now) {
		t.Fatal("a first request was not reported as new")
	}
	if err := h.s.Catalog.Delete(context.Background(), "gone"); err != nil {
		t.Fatal(err)
	}
	// The standby stops; an hour of reads of an empty table.
	for i := range 14400 {
		d.merge(nil, now.Add(time.Duration(i)*250*time.Millisecond))
	}
	if d.takePending("gone") {
		t.Error("an ask an hour old, whose record is gone, is still pending")
	}

	// Pending, not taken, for longer than ha.lease: dropped.
	d.reset()
	d.merge(ask("od"), now)
	d.merge(nil, now.Add(6*time.Second+time.Millisecond))
	if d.merged("od", router.Demand{}, nil).Pending || d.takePending("od") {
		t.Error("a first request not taken within ha.lease still asks for a replica")
	}
	// Pending, then the model is deleted: dropped at the next read, and the
	// time of its request with it.
	d.reset()
	d.merge(ask("od"), now)
	if err := h.s.Catalog.Delete(context.Background(), "od"); err != nil {
		t.Fatal(err)
	}
	d.forget("od")
	d.merge(ask("od"), now)
	if _, err := h.s.Catalog.Create(context.Background(), lazyModel("od", 0, 1)); err != nil {
		t.Fatal(err)
	}
	if got := d.merged("od", router.Demand{}, nil); got.Pending || !got.LastRequest.IsZero() || d.takePending("od") {
		t.Errorf("the deleted model's request counts for the model created again: %+v", got)
	}
	// A model at a fixed count is never asked for.
	d.reset()
	if d.merge(ask("fixed"), now) || d.takePending("fixed") {
		t.Error("a first request for a model at a fixed count asks for a replica")
	}
}

// TestNewLeaderCountsRecentAskAgain: a leader that takes over counts once
// more a standby's first request of the last ha.lease (the old leader may
// have died before acting on it), as docs/ha.md says; an older one it does
// not.
func TestNewLeaderCountsRecentAskAgain(t *testing.T) {
	h := leaderWith(t, lazyModel("od", 0, 1))
	old, next := newDemand(h), newDemand(h)
	now := time.Now()
	rows := []store.PeerDemand{{Name: "cp-b", Instance: "b1", Age: time.Second,
		Value: record(t, demandRecord{Models: map[string]modelDemand{"od": {Asks: 1, AskedMS: 2000}}})}}
	if !old.merge(rows, now) || !old.takePending("od") {
		t.Fatal("the old leader did not count the first request")
	}
	if !next.merge(rows, now) || !next.takePending("od") {
		t.Error("a new leader did not count a first request 3 s old")
	}
	rows[0].Value = record(t, demandRecord{Models: map[string]modelDemand{"od": {Asks: 1, AskedMS: 5001}}})
	if later := newDemand(h); later.merge(rows, now) {
		t.Error("a new leader counted a first request older than ha.lease")
	}
}

// haServer runs a control plane named name on dsn until the test ends or
// stop, which returns Run's error.
func haServer(t *testing.T, dsn, name string, log io.Writer) (s *Server, stop func() error) {
	t.Helper()
	cfg := testConfig(t)
	cfg.Auth.Store = dsn
	cfg.Auth.Enabled = false
	cfg.HA.Name = name
	cfg.HA.Lease, cfg.HA.Renew, cfg.HA.Retry = 2*time.Second, 500*time.Millisecond, 250*time.Millisecond
	// A request for a model loading on demand is answered at once.
	cfg.Timeouts.ColdStartWait = 0
	cfg.Models = []spec.Model{{Name: "lazy", Source: "sim://lazy", Scaling: spec.Scaling{Min: 0, Max: 1},
		Profiles: []spec.Profile{{Name: "p", Engine: "sim", GPUClass: "h100-80g", TP: 1}}}}
	cfg.Normalize()
	s, err := New(context.Background(), cfg, "test", slog.New(slog.NewTextHandler(log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stop = sync.OnceValue(func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("the control plane did not stop within 30s")
		}
	})
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
	return s, stop
}

func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition
	}
}

// TestStandbyDemandReachesLeader runs two control planes on one
// PostgreSQL. The standby is ready though no model runs; a request for a
// model loaded on demand through it gets 503 model_loading with
// Retry-After, and the leader's reconciler is asked to place a replica
// within about a second. What the standby has in flight is counted by the
// leader until the standby stops; a record nobody refreshes (a dead
// standby's) ages out after ha.lease.
func TestStandbyDemandReachesLeader(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	var logA syncBuffer
	a, _ := haServer(t, dsn, "cp-a", &logA)
	waitUntil(t, "cp-a to lead", 15*time.Second, func() bool { _, ok := a.ha.leading(); return ok })
	b, stopB := haServer(t, dsn, "cp-b", io.Discard)
	client := "http://" + b.Addr(ListenClient)
	waitUntil(t, "the standby to be ready with no model running", 15*time.Second, func() bool {
		resp, err := http.Get(client + "/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	asked := time.Now()
	req, err := http.NewRequest(http.MethodPost, client+"/v1/chat/completions",
		strings.NewReader(`{"model":"lazy","messages":[{"role":"user","content":"wake up"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	// auth.enabled is off: any key is taken as the default project.
	req.Header.Set("Authorization", "Bearer anything")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), `"model_loading"`) || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("first request for a model loaded on demand through the standby: %d %q Retry-After %q; want 503 model_loading with Retry-After",
			resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	waitUntil(t, "the leader's reconciler to place a replica on demand", 10*time.Second, func() bool {
		return strings.Contains(logA.String(), "model asked for: placing a replica on demand")
	})
	took := time.Since(asked)
	t.Logf("the leader placed on demand %s after the request through the standby", took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("the leader took %s to hear of the first request; want about a second", took)
	}
	if last := (haRouting{a}).Demand("lazy").LastRequest; last.Before(asked.Add(-time.Second)) || last.After(time.Now()) {
		t.Errorf("the leader's last request for lazy = %v; want about %v", last, asked)
	}

	// A request in flight on a replica through the standby.
	b.Router.SetEndpoints("lazy", []router.Endpoint{{ReplicaID: "r-x", URL: "http://127.0.0.1:1"}})
	lease, err := b.Router.Pick("lazy", "")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Done()
	inFlight := func(s *Server) int64 {
		var n int64
		for _, ep := range (haRouting{s}).Snapshot()["lazy"] {
			if ep.ReplicaID == "r-x" {
				n += ep.InFlight
			}
		}
		return n
	}
	waitUntil(t, "the leader to count the standby's request in flight", 5*time.Second, func() bool {
		return inFlight(a) == 1 && (haRouting{a}).Demand("lazy").InFlight == 1
	})

	// A dead control plane's record: written once, never refreshed.
	ghost := record(t, demandRecord{Models: map[string]modelDemand{"lazy": {IdleMS: ms(0), Waiting: 2}}})
	if err := a.Store.PutDemand(t.Context(), "cp-ghost", "g1", ghost); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the leader to count the ghost's waiting requests", 5*time.Second, func() bool {
		return (haRouting{a}).Demand("lazy").Waiting == 2
	})
	written := time.Now()
	waitUntil(t, "the ghost's record to age out", 10*time.Second, func() bool {
		return (haRouting{a}).Demand("lazy").Waiting == 0
	})
	if aged := time.Since(written); aged < time.Second {
		t.Errorf("the ghost's record aged out %s after it was written; ha.lease is 2s", aged)
	}
	// The live standby keeps refreshing its own.
	if n := inFlight(a); n != 1 {
		t.Errorf("the standby's request in flight counted %d times after the ghost aged out; want 1", n)
	}

	// A standby stopping cleanly removes its record once its requests end.
	lease.Done()
	if err := stopB(); err != nil {
		t.Fatalf("the standby stopped with %v", err)
	}
	rows, err := a.Store.ListDemand(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Name == "cp-b" {
			t.Errorf("the standby's record outlived it: %+v", r)
		}
	}
	waitUntil(t, "the leader to forget the standby's request in flight", 5*time.Second, func() bool { return inFlight(a) == 0 })
}

// TestStandbyTakesLeadersETA: the leader keeps a loading model's ETA for
// the standbys (a change under a second is not worth a write); a standby
// configures the model as loaded on demand and tells its requests the
// leader's ETA, or none once it is past, as the leader does.
func TestStandbyTakesLeadersETA(t *testing.T) {
	ctx := t.Context()
	st, cat, log := storeWith(t, lazyModel("lazy", 0, 1))

	// The leader's side.
	lead := &ha{etas: map[string]time.Time{}}
	eta := time.Now().Add(30 * time.Second).Truncate(time.Millisecond)
	lead.setETA("lazy", eta)
	if !lead.etasDirty || !lead.etas["lazy"].Equal(eta) {
		t.Fatalf("after a first ETA: dirty %v, etas %v", lead.etasDirty, lead.etas)
	}
	lead.etasDirty = false
	lead.setETA("lazy", eta.Add(300*time.Millisecond))
	lead.setETA("other", time.Time{})
	if lead.etasDirty {
		t.Error("an ETA moved by 300ms, or none for a model not loading, made a write")
	}
	lead.setETA("lazy", time.Time{})
	if !lead.etasDirty || len(lead.etas) != 0 {
		t.Errorf("the model's replica ready: dirty %v, etas %v; want it gone, written", lead.etasDirty, lead.etas)
	}

	// The standby's side: what the leader wrote, read.
	l, ok, err := st.AcquireLease(ctx, store.LeaseClaim{Name: store.FleetLease, Holder: "cp-a", Instance: "a1", TTL: time.Minute})
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	b, _ := json.Marshal(map[string]int64{"lazy": eta.UnixMilli()})
	if err := st.PutFleetState(ctx, l.Token, fleetLoading, string(b)); err != nil {
		t.Fatal(err)
	}
	s := standbyFollowing(t, st, cat, log)
	_, err = s.Router.Route("lazy", router.Request{})
	nr, _ := errors.AsType[*router.NotReadyError](err)
	if nr == nil || !nr.Loading || !nr.ETA.Equal(eta) {
		t.Fatalf("a request for lazy on the standby: %v (%+v); want loading on demand with the leader's ETA %v", err, nr, eta)
	}
	past := time.Now().Add(-time.Minute)
	b, _ = json.Marshal(map[string]int64{"lazy": past.UnixMilli()})
	if err := st.PutFleetState(ctx, l.Token, fleetLoading, string(b)); err != nil {
		t.Fatal(err)
	}
	if err := s.ha.followLoading(ctx, false); err != nil {
		t.Fatal(err)
	}
	_, err = s.Router.Route("lazy", router.Request{})
	nr, _ = errors.AsType[*router.NotReadyError](err)
	if nr == nil || !nr.Loading || !nr.ETA.IsZero() {
		t.Fatalf("with the leader's ETA past: %v (%+v); want loading with no ETA (the default Retry-After), as the leader says", err, nr)
	}
}

// TestStandbyForgetsDeletedModel: a standby forgets what was asked of a
// model that left its catalog, so a model created later under its name is
// not reported as asked for.
func TestStandbyForgetsDeletedModel(t *testing.T) {
	ctx := t.Context()
	st, cat, log := storeWith(t)
	if _, err := cat.Create(ctx, lazyModel("lazy", 0, 1)); err != nil {
		t.Fatal(err)
	}
	s := standbyFollowing(t, st, cat, log)
	if _, err := s.Router.Route("lazy", router.Request{}); err == nil {
		t.Fatal("a request for a model with no replica was routed")
	}
	if d := s.Router.Demand("lazy"); !d.Pending {
		t.Fatalf("the request did not ask for a replica: %+v", d)
	}
	if err := cat.Delete(ctx, "lazy"); err != nil {
		t.Fatal(err)
	}
	if err := s.ha.followLoading(ctx, true); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Create(ctx, lazyModel("lazy", 0, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.ha.followLoading(ctx, true); err != nil {
		t.Fatal(err)
	}
	if d := s.Router.Demand("lazy"); d.Pending || !d.LastRequest.IsZero() {
		t.Errorf("the deleted model's request counts for the model created again: %+v", d)
	}
}

// TestLeaderPrunesDeadStandbys: the leader removes a record not rewritten
// for 10 × ha.lease (a standby that died without removing its own), and
// keeps the others.
func TestLeaderPrunesDeadStandbys(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "llmgw.db")
	st, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, name := range []string{"cp-dead", "cp-b"} {
		if err := st.PutDemand(ctx, name, name+"-1", `{}`); err != nil {
			t.Fatal(err)
		}
	}
	// cp-dead last wrote a minute ago (10 × a lease of 2 s is 20 s).
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `UPDATE control_plane_demand SET updated_at = updated_at - 60000000 WHERE name = 'cp-dead'`); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	s := &Server{Store: st, Router: router.New(), log: log}
	s.Catalog, err = models.New(nil, st, log)
	if err != nil {
		t.Fatal(err)
	}
	s.ha = &ha{s: s, name: "cp-a", cfg: config.HA{Lease: 2 * time.Second, Renew: 500 * time.Millisecond},
		el: leader.New(leader.Options{Store: st, Name: "cp-a", TTL: 2 * time.Second, Renew: 500 * time.Millisecond, Logger: log})}
	s.ha.demand = newDemand(s.ha)
	rctx, cancel := context.WithCancel(ctx)
	go s.ha.el.Run(rctx)
	defer func() { cancel(); <-s.ha.el.Done() }()
	waitUntil(t, "cp-a to lead", 5*time.Second, func() bool { _, ok := s.ha.leading(); return ok })
	done := make(chan struct{})
	go func() { defer close(done); s.ha.demand.follow(rctx) }()
	defer func() { cancel(); <-done }()
	waitUntil(t, "the dead standby's record to be removed", 5*time.Second, func() bool {
		rows, err := st.ListDemand(ctx)
		return err == nil && !slices.ContainsFunc(rows, func(r store.PeerDemand) bool { return r.Name == "cp-dead" })
	})
	rows, err := st.ListDemand(ctx)
	if err != nil || len(rows) != 1 || rows[0].Name != "cp-b" {
		t.Errorf("records left: %+v, %v; want cp-b's", rows, err)
	}
	if !strings.Contains(logs.String(), "removed the demand records of control planes gone") {
		t.Errorf("the removal was not logged: %s", logs.String())
	}
}

// TestStandbyTakesLeadersNotPlaced: a model loaded on demand that the
// leader cannot load is told why on a standby too, not that it is loading;
// once the leader can load it, loading again.
func TestStandbyTakesLeadersNotPlaced(t *testing.T) {
	ctx := t.Context()
	st, cat, log := storeWith(t, lazyModel("lazy", 0, 1))

	// The leader's side: a reason is written once, and once gone.
	const why = "no node can hold profile p: node01: wrong GPU class"
	lead := &ha{}
	lead.setNotPlaced("lazy", why)
	if !lead.etasDirty || lead.notPlaced["lazy"] != why {
		t.Fatalf("after a reason: dirty %v, notPlaced %v", lead.etasDirty, lead.notPlaced)
	}
	lead.etasDirty = false
	lead.setNotPlaced("lazy", why)
	lead.setNotPlaced("other", "")
	if lead.etasDirty {
		t.Error("the same reason, or none for a model without one, made a write")
	}
	lead.setNotPlaced("lazy", "")
	if !lead.etasDirty || len(lead.notPlaced) != 0 {
		t.Errorf("the model placed: dirty %v, notPlaced %v; want it gone, written", lead.etasDirty, lead.notPlaced)
	}

	// The standby's side.
	l, ok, err := st.AcquireLease(ctx, store.LeaseClaim{Name: store.FleetLease, Holder: "cp-a", Instance: "a1", TTL: time.Minute})
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	b, _ := json.Marshal(map[string]string{"lazy": why})
	if err := st.PutFleetState(ctx, l.Token, fleetNotPlaced, string(b)); err != nil {
		t.Fatal(err)
	}
	s := standbyFollowing(t, st, cat, log)
	_, err = s.Router.Route("lazy", router.Request{})
	nr, _ := errors.AsType[*router.NotReadyError](err)
	if nr == nil || nr.Loading || nr.NotPlaced != why {
		t.Fatalf("a request for lazy on the standby: %v (%+v); want not loading, with the leader's reason", err, nr)
	}
	if err := st.PutFleetState(ctx, l.Token, fleetNotPlaced, "{}"); err != nil {
		t.Fatal(err)
	}
	if err := s.ha.followLoading(ctx, false); err != nil {
		t.Fatal(err)
	}
	_, err = s.Router.Route("lazy", router.Request{})
	if nr, _ = errors.AsType[*router.NotReadyError](err); nr == nil || !nr.Loading {
		t.Fatalf("once the leader can load it: %v (%+v); want loading", err, nr)
	}
}

// TestLoadTimesOutliveTheLeader: the load times the leader's reconciler
// measures are written by its publisher (fleetLoadTimes, in ms); the next
// leader, or this one restarted, reads them when elected, so it gives the
// ETA of a model's last load before it has seen the model load itself; a
// model that left the catalog is forgotten.
func TestLoadTimesOutliveTheLeader(t *testing.T) {
	ctx := t.Context()
	st, cat, log := storeWith(t)
	// The leader: elected, it measures two load times and publishes them.
	s := &Server{Store: st, Catalog: cat, Router: router.New(), log: log, Fleet: fleet.New()}
	s.Reconciler = reconcile.New(reconcile.Options{Fleet: s.Fleet, Catalog: cat})
	elected := make(chan int64, 1)
	s.ha = &ha{s: s, name: "cp-a", published: map[string][]router.Endpoint{}, etas: map[string]time.Time{},
		el: leader.New(leader.Options{Store: st, Name: "cp-a", OnElected: func(tok int64) { elected <- tok }})}
	ectx, stopElection := context.WithCancel(ctx)
	go s.ha.el.Run(ectx)
	<-elected
	s.ha.setLoadTime("lazy", 40*time.Second)
	s.ha.setLoadTime("gone", 10*time.Second)
	s.ha.forget("gone")
	s.ha.publishOnce(ctx)
	fs, err := st.GetFleetState(ctx, fleetLoadTimes)
	if err != nil || fs.Value != `{"lazy":40000}` {
		t.Fatalf("load times written: %q, %v; want lazy's 40 s in ms, gone forgotten", fs.Value, err)
	}
	stopElection()
	<-s.ha.el.Done()

	// The next leader reads them when elected.
	s2 := &Server{Store: st, Catalog: cat, Router: router.New(), log: log}
	s2.ha = &ha{s: s2, name: "cp-b"}
	if err := s2.ha.readLoadTimes(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s2.ha.knownLoadTimes(); len(got) != 1 || got["lazy"] != 40*time.Second {
		t.Errorf("the next leader's load times: %v, want lazy's 40s", got)
	}
}
