package reconcile

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/api/specv1"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/spec"
)

// scaledDown is a routed harness with a model between min 1 and max 2
// scaled up to two ready replicas, one request held on each (the load is
// low: each replica carries 10), then left below the down target for
// down_after: the pass that scales it down has run. victim is the replica
// scaled down, lease the request in flight on it, kept the other one.
type scaledDown struct {
	*routed
	model         string
	victim, kept  fleet.Replica
	lease, onKept router.Lease
	stopsBefore   int
}

func newScaledDown(t *testing.T, others ...spec.Model) *scaledDown {
	t.Helper()
	h, m, held := newScaledUp(t, others...)
	for _, l := range held {
		l.Done()
	}
	// One request on each replica: the one scaled down has one in flight
	// whichever it is.
	a, err1 := h.rt.Pick(m.Name, "")
	b, err2 := h.rt.Pick(m.Name, "")
	if err1 != nil || err2 != nil || a.Endpoint().ReplicaID == b.Endpoint().ReplicaID {
		t.Fatalf("two requests went to %q and %q (%v, %v), want one on each replica", a.Endpoint().ReplicaID, b.Endpoint().ReplicaID, err1, err2)
	}
	s := &scaledDown{routed: h, model: m.Name}
	s.stopsBefore = s.stops()
	h.rec.Pass()
	h.now = h.now.Add(5*time.Minute + time.Second)
	h.heartbeat()
	h.rec.Pass()

	var draining []string
	for _, ep := range h.rt.Snapshot()[m.Name] {
		if ep.Draining {
			draining = append(draining, ep.ReplicaID)
		}
	}
	if len(draining) != 1 {
		t.Fatalf("draining endpoints after down_after: %v, want one", draining)
	}
	for _, rep := range h.live(m.Name) {
		if rep.ID == draining[0] {
			s.victim = rep
		} else {
			s.kept = rep
		}
	}
	if s.victim.ID == "" || s.kept.ID == "" {
		t.Fatalf("live replicas %+v, want the one draining and the other", h.live(m.Name))
	}
	s.lease, s.onKept = a, b
	if b.Endpoint().ReplicaID == s.victim.ID {
		s.lease, s.onKept = b, a
	}
	return s
}

// newScaledUp returns a routed harness with a model between min 1 and max
// 2 scaled up to two ready replicas under load: the requests held, 0.9 per
// unit of weight, are still in flight. others are in the catalog too.
func newScaledUp(t *testing.T, others ...spec.Model) (*routed, spec.Model, []router.Lease) {
	t.Helper()
	m := chatModel()
	m.Scaling = spec.Scaling{Min: 1, Max: 2}
	m.Profiles[0].Weight = 10
	h := newRouted(t, append([]spec.Model{m}, others...)...)
	h.rec.Pass()
	h.readyAll(m.Name)
	h.rec.Pass()
	var held []router.Lease
	for range 9 { // 0.9 per unit of weight, above up_load 0.8
		l, err := h.rt.Pick(m.Name, "")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	h.rec.Pass()
	h.now = h.now.Add(31 * time.Second)
	h.heartbeat()
	h.rec.Pass()
	h.readyAll(m.Name)
	h.rec.Pass()
	if reps := h.live(m.Name); len(reps) != 2 {
		t.Fatalf("%d replicas after 31s of load, want 2", len(reps))
	}
	return h, m, held
}

// stops counts the StopShard messages sent to every node.
func (s *scaledDown) stops() int {
	n := 0
	for _, c := range s.conns {
		n += len(c.stops())
	}
	return n
}

// stoppedVictim reports whether a StopShard went to the victim's shard.
func (s *scaledDown) stoppedVictim() bool {
	for _, c := range s.conns {
		if slices.Contains(c.stops(), s.victim.Shards[0].ID) {
			return true
		}
	}
	return false
}

// pass advances the clock by d and runs a pass, every node heard from.
func (s *scaledDown) pass(d time.Duration) {
	s.now = s.now.Add(d)
	s.heartbeat()
	s.rec.Pass()
}

// TestScaleDownDrains: the replica scaled down leaves routing at once,
// but is stopped only once the request in flight on it is done: it is
// not cut mid-stream. While it drains it counts neither as serving (the
// other replica, at min 1, is not scaled down for it) nor as surplus.
func TestScaleDownDrains(t *testing.T) {
	s := newScaledDown(t)
	if s.stoppedVictim() || s.stops() != s.stopsBefore {
		t.Fatal("StopShard sent with a request in flight on the replica scaled down")
	}
	for range 10 {
		l, err := s.rt.Pick(s.model, "")
		if err != nil {
			t.Fatal(err)
		}
		if l.Endpoint().ReplicaID == s.victim.ID {
			t.Fatal("a new request was routed to the replica draining")
		}
		l.Done()
	}
	if d := s.rt.Demand(s.model); d.Capacity != 10 || d.InFlight != 2 {
		t.Errorf("demand while draining: capacity %d in flight %d, want 10 (the kept replica) and 2 (both requests)", d.Capacity, d.InFlight)
	}

	// Long past down_after again: the kept replica stays (min 1), the
	// victim is not stopped while its request runs (within DrainTimeout).
	s.rec.opts.DrainTimeout = time.Hour
	for range 3 {
		s.pass(6 * time.Minute)
	}
	if s.stoppedVictim() || s.stops() != s.stopsBefore {
		t.Fatal("StopShard sent while the request on the draining replica runs")
	}
	if eps := s.rt.Snapshot()[s.model]; len(eps) != 2 || slices.ContainsFunc(eps, func(ep router.EndpointLoad) bool { return ep.ReplicaID == s.kept.ID && ep.Draining }) {
		t.Fatalf("endpoints %+v, want the kept replica serving and the victim draining", eps)
	}

	s.lease.Done()
	s.pass(time.Second)
	if !s.stoppedVictim() {
		t.Fatal("not stopped once the request on it was done")
	}
	if s.stops() != s.stopsBefore+1 {
		t.Errorf("%d StopShard sent, want the victim's alone", s.stops()-s.stopsBefore)
	}
	if reps := s.live(s.model); len(reps) != 1 || reps[0].ID != s.kept.ID {
		t.Fatalf("live replicas %+v, want the kept one alone", reps)
	}
	s.pass(time.Second)
	if eps := s.rt.Snapshot()[s.model]; len(eps) != 1 || eps[0].ReplicaID != s.kept.ID || eps[0].Draining {
		t.Fatalf("endpoints after the victim stopped: %+v, want the kept replica serving", eps)
	}
	s.onKept.Done()
}

// TestScaleDownDrainBounded: a request that never ends holds the replica
// scaled down for DrainTimeout at most; then it is stopped with it.
func TestScaleDownDrainBounded(t *testing.T) {
	s := newScaledDown(t)
	s.rec.opts.DrainTimeout = 20 * time.Minute
	s.pass(19 * time.Minute)
	if s.stoppedVictim() {
		t.Fatal("stopped before the drain timeout with a request in flight")
	}
	s.pass(time.Minute)
	if !s.stoppedVictim() {
		t.Fatal("not stopped once the drain timeout passed")
	}
	if reps := s.live(s.model); len(reps) != 1 || reps[0].ID != s.kept.ID {
		t.Fatalf("live replicas %+v, want the kept one alone", reps)
	}
	s.lease.Done()
	s.onKept.Done()
}

// TestScaleDownUndoneWhileDraining: load that comes back while the replica
// scaled down drains returns it to routing; nothing new is placed and it
// is not stopped.
func TestScaleDownUndoneWhileDraining(t *testing.T) {
	s := newScaledDown(t)
	starts := len(s.startsFor(s.model)[s.victim.Shards[0].Node]) + len(s.startsFor(s.model)[s.kept.Shards[0].Node])
	var held []router.Lease
	for range 9 { // 10 in flight on the kept replica: load 1
		l, err := s.rt.Pick(s.model, "")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	s.pass(time.Second)
	s.pass(31 * time.Second)
	eps := s.rt.Snapshot()[s.model]
	if len(eps) != 2 || slices.ContainsFunc(eps, func(ep router.EndpointLoad) bool { return ep.Draining }) {
		t.Fatalf("endpoints after the load came back: %+v, want both serving", eps)
	}
	if s.stoppedVictim() {
		t.Fatal("the replica wanted again was stopped")
	}
	n := 0
	for _, ss := range s.startsFor(s.model) {
		n += len(ss)
	}
	if reps := s.live(s.model); len(reps) != 2 || n != starts {
		t.Fatalf("%d live replicas, %d starts (want 2 and %d): a replica was placed instead of the draining one returned", len(reps), n, starts)
	}
	for _, l := range append(held, s.lease, s.onKept) {
		l.Done()
	}
}

// TestIdleReplicaDrainsAndReturnsOnRequest: the replica of a model loaded
// on demand stopped for idleness leaves routing first; a request that
// comes while it drains is told the model is loading, and brings it back
// rather than a new replica being placed.
func TestIdleReplicaDrainsAndReturnsOnRequest(t *testing.T) {
	h := newRouted(t, onDemand("od", 1, 5*time.Minute))
	h.rec.opts.DrainSettle = 10 * time.Second // as with standbys: not stopped in the pass that drains it
	_, _ = h.rt.Pick("od", "")
	h.rec.Pass()
	h.readyAll("od")
	h.rec.Pass()
	rep := h.live("od")[0]
	h.now = h.now.Add(6 * time.Minute)
	h.heartbeat()
	h.rec.Pass()
	if eps := h.rt.Snapshot()["od"]; len(eps) != 1 || !eps[0].Draining {
		t.Fatalf("endpoints after idle_timeout: %+v, want the replica draining", eps)
	}
	if stops := h.conns[rep.Shards[0].Node].stops(); len(stops) != 0 {
		t.Fatalf("stopped within DrainSettle: %v", stops)
	}
	_, err := h.rt.Pick("od", "")
	var nr *router.NotReadyError
	if !errors.As(err, &nr) || !nr.Loading {
		t.Fatalf("request while the only replica drains: %v, want loading", err)
	}
	h.now = h.now.Add(time.Second)
	h.rec.Pass()
	l, err := h.rt.Pick("od", "")
	if err != nil || l.Endpoint().ReplicaID != rep.ID {
		t.Fatalf("request after the replica was wanted again: %v on %q, want it on %q", err, l.Endpoint().ReplicaID, rep.ID)
	}
	l.Done()
	if n := len(h.startsFor("od")[rep.Shards[0].Node]); n != 1 || len(h.live("od")) != 1 {
		t.Fatalf("%d starts, %d live replicas: want the draining one returned, none placed", n, len(h.live("od")))
	}

	// Idle again: drained, and stopped once DrainSettle passed.
	h.now = h.now.Add(6 * time.Minute)
	h.heartbeat()
	h.rec.Pass()
	h.now = h.now.Add(10 * time.Second)
	h.heartbeat()
	h.rec.Pass()
	if stops := h.conns[rep.Shards[0].Node].stops(); len(stops) != 1 {
		t.Fatalf("stops %v after idle_timeout and DrainSettle, want the replica's", stops)
	}
}

// drainingEndpoints returns the replicas of model the router has flagged
// draining.
func (r *routed) drainingEndpoints(model string) []string {
	var out []string
	for _, ep := range r.rt.Snapshot()[model] {
		if ep.Draining {
			out = append(out, ep.ReplicaID)
		}
	}
	return out
}

// allStops counts the StopShard messages sent to every node.
func (r *routed) allStops() int {
	n := 0
	for _, c := range r.conns {
		n += len(c.stops())
	}
	return n
}

// TestRestartKeepsScaledUpReplicas: a control plane that starts (a
// restart, a new leader) with two ready replicas of a model between min
// 1 and max 2 under load keeps both: its count starts at what runs, not
// at min.
func TestRestartKeepsScaledUpReplicas(t *testing.T) {
	h, m, held := newScaledUp(t)
	stops := h.allStops()
	h.rec = New(h.rec.opts) // the same fleet and router, a new reconciler
	for _, d := range []time.Duration{0, time.Second, 10 * time.Second} {
		h.now = h.now.Add(d)
		h.heartbeat()
		h.rec.Pass()
		if ids := h.drainingEndpoints(m.Name); len(ids) != 0 {
			t.Fatalf("%s after the restart: %v draining, want both replicas serving", d, ids)
		}
	}
	if n := h.allStops() - stops; n != 0 || len(h.live(m.Name)) != 2 {
		t.Fatalf("%d StopShard, %d live replicas after the restart: want none and 2", n, len(h.live(m.Name)))
	}
	for _, l := range held {
		l.Done()
	}
}

// TestHoldDrainsNothing: while placement is held after a restart (an
// expected replica not reported yet), a model whose load stayed below the
// down target for down_after is not scaled down: its routes are not
// published, so a replica flagged draining would still be sent requests.
// Once the hold ends it is, its load still low for down_after.
func TestHoldDrainsNothing(t *testing.T) {
	h, m, held := newScaledUp(t)
	for _, l := range held {
		l.Done()
	}
	stops := h.allStops()
	opts := h.rec.opts
	for _, rep := range h.live(m.Name) {
		opts.Expected = append(opts.Expected, rep.ID)
	}
	opts.Expected = append(opts.Expected, "r-not-reported")
	opts.HoldPlacementUntil = h.now.Add(10 * time.Minute)
	h.rec = New(opts)
	for _, d := range []time.Duration{0, 6 * time.Minute, time.Second, time.Minute} {
		h.now = h.now.Add(d)
		h.heartbeat()
		h.rec.Pass()
		if len(h.rec.draining) != 0 {
			t.Fatalf("%s into the hold: draining %v, want none", d, h.rec.draining)
		}
	}
	if n := h.allStops() - stops; n != 0 || len(h.live(m.Name)) != 2 {
		t.Fatalf("%d StopShard, %d live replicas during the hold: want none and 2", n, len(h.live(m.Name)))
	}
	h.now = opts.HoldPlacementUntil
	h.heartbeat()
	h.rec.Pass()
	h.now = h.now.Add(5*time.Minute + time.Second)
	h.heartbeat()
	h.rec.Pass()
	if n := h.allStops() - stops; n != 1 || len(h.live(m.Name)) != 1 {
		t.Fatalf("%d StopShard, %d live replicas down_after past the hold's end: want the scale-down (1 and 1)", n, len(h.live(m.Name)))
	}
}

// TestLongDrainDoesNotHoldStalls: a replica draining past DrainSettle,
// waiting for a request that may run for DrainTimeout, is not room about
// to be freed: a model that cannot place meanwhile is reported stalled
// after StallAfter, not put off as long as the drain lasts.
func TestLongDrainDoesNotHoldStalls(t *testing.T) {
	s := newScaledDown(t)
	s.rec.opts.DrainSettle = 2 * time.Second
	s.rec.opts.DrainTimeout = time.Hour
	huge := spec.Model{Name: "huge", Source: "sim://huge", Scaling: spec.Scaling{Min: 1, Max: 1},
		Profiles: []spec.Profile{{Name: "x16", Engine: "sim", GPUClass: "h100-80g", TP: 16}}}
	e, err := s.rec.opts.Catalog.Create(context.Background(), huge)
	if err != nil {
		t.Fatal(err)
	}
	for range 15 {
		s.pass(time.Second)
	}
	if len(s.rec.draining) != 1 {
		t.Fatalf("draining %v, want the victim still draining (its request runs)", s.rec.draining)
	}
	if got := s.rec.Stalled("huge", e.Generation); got == "" {
		t.Errorf("huge has not placed for 15s, %s with nothing but a long drain elsewhere: not reported stalled", DefaultStallAfter)
	}
	s.lease.Done()
	s.onKept.Done()
}

// TestRestartCountsReplicasReportedDuringHold: after a restart the agents
// report the replicas that ran before only after the reconciler's first
// pass; the model's count follows them while placement is held, so the
// pass that ends the hold wants what runs and drains nothing.
func TestRestartCountsReplicasReportedDuringHold(t *testing.T) {
	m := chatModel()
	m.Scaling = spec.Scaling{Min: 1, Max: 2}
	m.Profiles[0].Weight = 10
	h := newRouted(t, m)
	h.rec.opts.Expected = []string{"r-a", "r-b"}
	h.rec.opts.HoldPlacementUntil = h.now.Add(time.Minute)
	h.rec.Pass() // nothing reported yet
	norm := m.Clone()
	norm.Normalize()
	gen := spec.ReplicaGeneration(norm, "h100")
	for node, id := range map[string]string{"node01": "r-a", "node03": "r-b"} {
		h.fleet.Connect(&agentv1.Hello{NodeId: node, Address: "127.0.0.1", Inventory: inventory(""), Shards: []*agentv1.ShardStatus{{
			ShardId: id + "-0", ReplicaId: id, Model: m.Name, Rank: 0, Profile: &specv1.Profile{Name: "h100", Engine: "sim", GpuClass: "h100-80g", Tp: 1},
			ReplicaGeneration: gen, State: agentv1.ShardState_SHARD_STATE_READY, Endpoint: "127.0.0.1:91" + id[len(id)-1:],
		}}}, node, nil, false, h.conns[node])
	}
	h.now = h.now.Add(time.Second)
	h.heartbeat()
	h.rec.Pass() // both reported: the hold ends
	if !h.rec.Ready() {
		t.Fatal("still holding with every expected replica reported")
	}
	if ids := h.drainingEndpoints(m.Name); len(ids) != 0 || h.allStops() != 0 {
		t.Fatalf("endpoints draining %v, %d StopShard once the hold ended: want both replicas serving", ids, h.allStops())
	}
	if eps := h.rt.Snapshot()[m.Name]; len(eps) != 2 {
		t.Fatalf("endpoints %+v, want the two replicas reported", eps)
	}
}
