package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/models"
	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/spec"
)

// routed is a harness whose reconciler routes through a real router on the
// harness's clock, as the server wires them.
type routed struct {
	*harness
	rt         *router.Router
	ports      int
	apiCatalog bool
}

func newRouted(t *testing.T, ms ...spec.Model) *routed {
	t.Helper()
	h := newHarness(t, ms...)
	r := &routed{harness: h, ports: 9000}
	r.rt = router.New(router.WithClock(func() time.Time { return h.now }))
	h.rec.opts.Endpoints = r.rt
	h.rec.opts.Routing = r.rt
	h.rec.started = h.now
	// The fleet on the same clock, every node just heard from.
	h.fleet.SetClock(func() time.Time { return h.now })
	r.heartbeat()
	return r
}

func (r *routed) heartbeat(except ...string) {
	for id := range r.conns {
		if !slices.Contains(except, id) {
			r.fleet.Heartbeat(id, &agentv1.Heartbeat{})
		}
	}
}

// live returns the live replicas of model.
func (r *routed) live(model string) []fleet.Replica {
	var out []fleet.Replica
	for _, rep := range r.fleet.Replicas() {
		if rep.Model == model && rep.Live() {
			out = append(out, rep)
		}
	}
	return out
}

// readyAll reports every starting shard of model ready.
func (r *routed) readyAll(model string) {
	for _, rep := range r.live(model) {
		if rep.State != fleet.ReplicaStarting {
			continue
		}
		for _, s := range rep.Shards {
			r.ports++
			port := r.ports
			start := &agentv1.StartShard{ShardId: s.ID, ReplicaId: rep.ID, Model: model, Rank: int32(s.Rank)}
			r.report(s.Node, start, agentv1.ShardState_SHARD_STATE_READY, func(st *agentv1.ShardStatus) {
				st.Endpoint = fmt.Sprintf("127.0.0.1:%d", port)
			})
		}
	}
}

func (r *routed) stopped(model string) int {
	n := 0
	for _, rep := range r.fleet.Replicas() {
		if rep.Model == model && rep.State == fleet.ReplicaStopping {
			n++
		}
	}
	return n
}

func onDemand(name string, tp int, idle time.Duration) spec.Model {
	return spec.Model{Name: name, Source: "sim://" + name, RoutingProfile: "chat",
		Scaling:  spec.Scaling{Min: 0, Max: 1, IdleTimeout: spec.Duration(idle)},
		Profiles: []spec.Profile{{Name: "gpu", Engine: "sim", GPUClass: "h100-80g", TP: tp, Weight: 1}}}
}

// TestOnDemandLoadsOnRequestAndStopsWhenIdle: a model at min 0 has no
// replica until a request asks for it; the request is told it is loading;
// a replica is placed at once; once it served, a later cold start is told
// the measured load time; after idle_timeout without requests the replica
// is stopped, but never while a request is in flight on it.
func TestOnDemandLoadsOnRequestAndStopsWhenIdle(t *testing.T) {
	h := newRouted(t, onDemand("od", 1, 5*time.Minute))
	h.rec.Pass()
	if n := len(h.live("od")); n != 0 {
		t.Fatalf("%d replicas of an on-demand model nobody asked for", n)
	}
	_, err := h.rt.Pick("od", "")
	var nr *router.NotReadyError
	if !errors.As(err, &nr) || !nr.Loading {
		t.Fatalf("first request: %v, want loading", err)
	}
	h.rec.Pass()
	if n := len(h.live("od")); n != 1 {
		t.Fatalf("%d replicas after the first request, want 1", n)
	}
	h.now = h.now.Add(40 * time.Second)
	h.readyAll("od")
	h.rec.Pass()
	l, err := h.rt.Pick("od", "")
	if err != nil {
		t.Fatalf("request once the replica is ready: %v", err)
	}

	// Idle for longer than idle_timeout, but a request is in flight: kept.
	h.now = h.now.Add(6 * time.Minute)
	h.rec.Pass()
	if h.stopped("od") != 0 || len(h.live("od")) != 1 {
		t.Fatal("the replica a request is in flight on was stopped")
	}
	l.Done()
	h.rec.Pass()
	if h.stopped("od") != 1 {
		t.Fatalf("not stopped after idle_timeout with nothing in flight: %+v", h.live("od"))
	}
	if _, err := h.rt.Pick("od", ""); err == nil {
		t.Fatal("a stopped replica is still routed")
	}

	// The next request: placed again, and told the measured load time.
	h.rec.Pass()
	_, err = h.rt.Pick("od", "")
	if !errors.As(err, &nr) || !nr.Loading {
		t.Fatalf("request after the replica was stopped: %v, want loading", err)
	}
	if want := h.now.Add(40 * time.Second); !nr.ETA.Equal(want) {
		t.Errorf("ETA %v, want %v: placed now, loading as long as the last time (40s)", nr.ETA, want)
	}
	// A load longer than the last one: no ETA (the gateway's default
	// Retry-After), not one a second away.
	h.now = h.now.Add(41 * time.Second)
	h.rec.Pass()
	_, err = h.rt.Pick("od", "")
	if !errors.As(err, &nr) || !nr.Loading || !nr.ETA.IsZero() {
		t.Errorf("request once the load overran the last one: %v (ETA %v), want loading with no ETA", err, nr.ETA)
	}
}

// TestDeletedModelForgotten: what was asked of a model deleted before the
// reconciler acted on it does not place a replica of a model created later
// under its name (Terraform's replace deletes, then creates).
func TestDeletedModelForgotten(t *testing.T) {
	h := newRouted(t)
	h.add(t, onDemand("od", 1, time.Hour))
	h.rec.Pass()
	_, _ = h.rt.Pick("od", "")
	if err := h.rec.opts.Catalog.Delete(context.Background(), "od"); err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	h.now = h.now.Add(time.Minute)
	h.add(t, onDemand("od", 1, time.Hour))
	h.rec.Pass()
	if n := len(h.live("od")); n != 0 {
		t.Fatalf("%d replicas of a re-created model nobody asked for since", n)
	}
	if d := h.rt.Demand("od"); d.Pending || !d.LastRequest.IsZero() {
		t.Errorf("the router still holds the deleted model's requests: %+v", d)
	}
}

// TestIdleTimeoutDefaults: a model at min 0 without idle_timeout stops
// after the default 15 minutes, not at once and not never.
func TestIdleTimeoutDefaults(t *testing.T) {
	h := newRouted(t, onDemand("od", 1, 0))
	_, _ = h.rt.Pick("od", "")
	h.rec.Pass()
	h.readyAll("od")
	h.rec.Pass()
	h.now = h.now.Add(14 * time.Minute)
	h.rec.Pass()
	if h.stopped("od") != 0 {
		t.Fatal("stopped before the default idle timeout")
	}
	h.now = h.now.Add(2 * time.Minute)
	h.rec.Pass()
	if h.stopped("od") != 1 {
		t.Fatal("not stopped after the default idle timeout of 15m")
	}
}

// add puts a model into the harness's catalog, which it makes an API one
// (empty at first) on first use.
func (r *routed) add(t *testing.T, m spec.Model) {
	t.Helper()
	if !r.apiCatalog {
		reg, err := models.New(nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.rec.opts.Catalog = reg
		r.apiCatalog = true
	}
	if _, err := r.rec.opts.Catalog.Create(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// TestEvictionRules: a full cluster makes room for a model by stopping one
// idle single-node replica of an on-demand model that has run long
// enough: never a model at min 1, never a multi-node replica, never a
// replica with a request in flight; one at a time.
func TestEvictionRules(t *testing.T) {
	h := newRouted(t)
	big := onDemand("od-2node", 8, time.Hour)
	big.Profiles[0].Nodes = 2
	h.add(t, big) // node01 and node02, the fabric's two nodes, whole
	_, _ = h.rt.Pick("od-2node", "")
	h.rec.Pass()
	h.readyAll("od-2node")
	keep := onDemand("keep", 4, 0)
	keep.Scaling = spec.Scaling{Min: 1, Max: 1}
	h.add(t, keep) // half of node03
	h.rec.Pass()
	h.readyAll("keep")
	h.add(t, onDemand("od-a", 4, time.Hour)) // the other half
	_, _ = h.rt.Pick("od-a", "")
	h.rec.Pass()
	h.readyAll("od-a")
	h.rec.Pass()
	for _, m := range []string{"od-2node", "keep", "od-a"} {
		if reps := h.live(m); len(reps) != 1 || reps[0].State != fleet.ReplicaReady {
			t.Fatalf("%s not serving: %+v", m, h.fleet.Replicas())
		}
	}

	h.add(t, onDemand("od-b", 4, time.Hour))
	inUse, _ := h.rt.Pick("od-a", "")
	h.now = h.now.Add(3 * time.Minute)
	h.heartbeat()
	_, _ = h.rt.Pick("od-b", "")
	h.rec.Pass()
	for _, m := range []string{"od-2node", "od-a", "keep"} {
		if h.stopped(m) != 0 {
			t.Fatalf("%s stopped to make room: multi-node, in use or at min 1 must not be", m)
		}
	}
	inUse.Done()
	h.now = h.now.Add(3 * time.Minute)
	h.heartbeat()
	_, _ = h.rt.Pick("od-b", "")
	h.rec.Pass()
	if h.stopped("od-a") != 1 {
		t.Fatalf("od-a (idle, one node, ran 6m) not evicted for od-b: %+v", h.fleet.Replicas())
	}
	if h.stopped("od-2node") != 0 || h.stopped("keep") != 0 {
		t.Fatal("more than one replica evicted, or the wrong one")
	}
}

// TestEvictionWaitsForAge: a replica just started is not evicted, so two
// models with room for one do not take turns.
func TestEvictionWaitsForAge(t *testing.T) {
	h := newRouted(t, onDemand("od-a", 8, time.Hour), onDemand("od-b", 8, time.Hour), onDemand("od-c", 8, time.Hour), onDemand("od-d", 8, time.Hour))
	for _, m := range []string{"od-a", "od-b", "od-c"} {
		_, _ = h.rt.Pick(m, "")
	}
	h.rec.Pass()
	h.readyAll("od-a")
	h.readyAll("od-b")
	h.readyAll("od-c")
	h.now = h.now.Add(time.Minute)
	h.heartbeat()
	_, _ = h.rt.Pick("od-d", "")
	h.rec.Pass()
	for _, m := range []string{"od-a", "od-b", "od-c"} {
		if h.stopped(m) != 0 {
			t.Fatalf("%s evicted one minute after it started (evict_after 2m)", m)
		}
	}
	h.now = h.now.Add(2 * time.Minute)
	h.heartbeat()
	_, _ = h.rt.Pick("od-b", "") // od-b used recently, od-a and od-c not
	_, _ = h.rt.Pick("od-d", "")
	h.rec.Pass()
	n := h.stopped("od-a") + h.stopped("od-b") + h.stopped("od-c")
	if n != 1 || h.stopped("od-b") != 0 {
		t.Fatalf("evicted a=%d b=%d c=%d, want exactly one of the idle a and c", h.stopped("od-a"), h.stopped("od-b"), h.stopped("od-c"))
	}
}

// TestScaleUpAndDown: a model between min 1 and max 3 gains a replica
// when its load stays above the target for up_after (one at a time, each
// ready first) and loses one when it stays below for down_after.
func TestScaleUpAndDown(t *testing.T) {
	m := chatModel()
	m.Scaling = spec.Scaling{Min: 1, Max: 3}
	h := newRouted(t, m)
	h.rec.Pass()
	h.readyAll(m.Name)
	h.rec.Pass()
	var held []router.Lease
	hold := func(n int) {
		for range n {
			l, err := h.rt.Pick(m.Name, "")
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, l)
		}
	}
	hold(2) // load 2 per unit of weight, above 0.8
	h.rec.Pass()
	h.now = h.now.Add(20 * time.Second)
	h.rec.Pass()
	if n := len(h.live(m.Name)); n != 1 {
		t.Fatalf("%d replicas after 20s of load, want 1 until up_after (30s)", n)
	}
	h.now = h.now.Add(11 * time.Second)
	h.rec.Pass()
	if n := len(h.live(m.Name)); n != 2 {
		t.Fatalf("%d replicas after 31s of load, want 2", n)
	}
	h.now = h.now.Add(time.Minute)
	h.rec.Pass()
	if n := len(h.live(m.Name)); n != 2 {
		t.Fatalf("%d replicas while the second starts, want 2: the next waits for it", n)
	}
	h.readyAll(m.Name)
	h.rec.Pass()
	hold(2) // 4 over capacity 2
	h.now = h.now.Add(31 * time.Second)
	h.rec.Pass()
	h.now = h.now.Add(31 * time.Second)
	h.rec.Pass()
	if n := len(h.live(m.Name)); n != 3 {
		t.Fatalf("%d replicas, want max 3", n)
	}
	h.readyAll(m.Name)
	hold(8)
	h.now = h.now.Add(time.Minute)
	h.rec.Pass()
	h.now = h.now.Add(time.Minute)
	h.rec.Pass()
	if n := len(h.live(m.Name)); n != 3 {
		t.Fatalf("%d replicas, want no more than max 3", n)
	}

	for _, l := range held {
		l.Done()
	}
	h.rec.Pass()
	h.now = h.now.Add(4 * time.Minute)
	h.rec.Pass()
	if h.stopped(m.Name) != 0 {
		t.Fatal("scaled down before down_after (5m)")
	}
	h.now = h.now.Add(61 * time.Second)
	h.heartbeat()
	h.rec.Pass()
	if n := len(h.live(m.Name)); n != 2 {
		t.Fatalf("%d replicas after 5m below the target, want 2", n)
	}
	for range 3 {
		h.now = h.now.Add(6 * time.Minute)
		h.heartbeat()
		h.rec.Pass()
	}
	if n := len(h.live(m.Name)); n != 1 {
		t.Fatalf("%d replicas after a long quiet, want min 1", n)
	}
}

// TestSuspectNodeReplacedAtOnce: a node silent for SuspectAfter has its
// replica replaced elsewhere in the same pass, whatever backoff the model
// earned elsewhere; the old replica serves until the replacement is ready.
func TestSuspectNodeReplacedAtOnce(t *testing.T) {
	h := newRouted(t, chatModel())
	h.rec.opts.SuspectAfter = 6 * time.Second
	h.rec.Pass()
	h.readyAll("sim-chat")
	h.rec.Pass()
	orig := h.live("sim-chat")[0]
	node := orig.Shards[0].Node
	// A failure elsewhere earned the model a long backoff.
	h.rec.backoff["sim-chat"] = backoff{failures: 7, until: h.now.Add(time.Minute)}

	h.now = h.now.Add(7 * time.Second)
	h.heartbeat(node)
	h.rec.Pass()
	reps := h.live("sim-chat")
	if len(reps) != 2 || reps[0].Shards[0].Node == reps[1].Shards[0].Node {
		t.Fatalf("replicas after the node went silent: %+v, want a replacement on another node", reps)
	}
	if eps := h.rt.Snapshot()["sim-chat"]; len(eps) != 1 || eps[0].ReplicaID != orig.ID {
		t.Fatalf("routing while the replacement loads = %+v, want the original still serving", eps)
	}
	if n, _ := h.fleet.Node(node); !n.Suspect {
		t.Fatal("the silent node is not suspect")
	}
	h.readyAll("sim-chat")
	h.fleet.Heartbeat(node, &agentv1.Heartbeat{}) // late: the replacement is ready first
	h.rec.Pass()
	// The node is back, so the count is 2 for 1: one of the two (the one
	// with fewer requests in flight, then the newer) is stopped.
	if n := len(h.live("sim-chat")); n != 1 {
		t.Fatalf("%d live replicas after the replacement was ready, want 1", n)
	}
}

// TestLostNodeEarnsNoBackoff: replicas failed because their node was lost
// are replaced in the next pass, and the model's backoff stays as it was.
func TestLostNodeEarnsNoBackoff(t *testing.T) {
	h := newRouted(t, chatModel())
	h.rec.opts.Grace = 20 * time.Second
	h.rec.opts.SuspectAfter = 20 * time.Second // isolate the lost path
	h.rec.Pass()
	h.readyAll("sim-chat")
	h.rec.Pass()
	node := h.live("sim-chat")[0].Shards[0].Node
	h.now = h.now.Add(21 * time.Second)
	h.heartbeat(node)
	h.rec.Pass()
	reps := h.live("sim-chat")
	if len(reps) != 1 || reps[0].Shards[0].Node == node {
		t.Fatalf("after the node was lost: %+v, want one replacement elsewhere in the same pass", reps)
	}
	if b := h.rec.backoff["sim-chat"]; b.failures != 0 {
		t.Errorf("backoff %+v after a node loss, want none earned", b)
	}
}

// TestRoutingProfileSelectsPolicy: the reconciler gives the router each
// model's policy from its routing_profile.
func TestRoutingProfileSelectsPolicy(t *testing.T) {
	m := chatModel()
	m.RoutingProfile = "round-robin"
	m.Scaling = spec.Scaling{Min: 2, Max: 2}
	h := newRouted(t, m)
	h.rec.Pass()
	h.readyAll(m.Name)
	h.rec.Pass()
	l, _ := h.rt.Pick(m.Name, "")
	first := l.Endpoint().ReplicaID
	// Round-robin goes to the other even though the first is busier.
	l2, _ := h.rt.Pick(m.Name, "")
	l3, _ := h.rt.Pick(m.Name, "")
	if l2.Endpoint().ReplicaID == first || l3.Endpoint().ReplicaID != first {
		t.Errorf("picks %s %s %s, want round-robin alternation", first, l2.Endpoint().ReplicaID, l3.Endpoint().ReplicaID)
	}
}

// TestAgentRestartReplacesNothing: a node whose session ends is suspect at
// once (nothing new is placed on it) but its replicas are replaced only
// when it stays away for SuspectAfter; an agent back within that bound
// (a restart, an upgrade) costs nothing.
func TestAgentRestartReplacesNothing(t *testing.T) {
	h := newRouted(t, chatModel())
	h.rec.opts.SuspectAfter = 6 * time.Second
	h.rec.Pass()
	h.readyAll("sim-chat")
	h.rec.Pass()
	rep := h.live("sim-chat")[0]
	node := rep.Shards[0].Node
	n, _ := h.fleet.Node(node)
	// The session that Connect opened: a newer Connect would replace it.
	id := h.fleet.Connect(&agentv1.Hello{NodeId: node, Address: "127.0.0.1", Inventory: inventory(""),
		Shards: []*agentv1.ShardStatus{{ShardId: rep.Shards[0].ID, ReplicaId: rep.ID, Model: "sim-chat", State: agentv1.ShardState_SHARD_STATE_READY, Endpoint: rep.Shards[0].Endpoint}}},
		node, n.Declaration, n.Declared, h.conns[node])
	h.fleet.Disconnect(node, id)
	h.now = h.now.Add(3 * time.Second)
	h.heartbeat(node)
	h.rec.Pass()
	if n, _ := h.fleet.Node(node); !n.Suspect || n.Silent {
		t.Fatalf("node after its session ended: suspect %v silent %v, want suspect, not yet silent", n.Suspect, n.Silent)
	}
	if reps := h.live("sim-chat"); len(reps) != 1 {
		t.Fatalf("%d replicas 3s after the session ended, want the one (no replacement yet)", len(reps))
	}
	h.now = h.now.Add(4 * time.Second)
	h.heartbeat(node)
	h.rec.Pass()
	reps := h.live("sim-chat")
	if len(reps) != 2 {
		t.Fatalf("%d replicas 7s after the session ended, want a replacement (SuspectAfter 6s)", len(reps))
	}
	for _, r := range reps {
		if r.ID != rep.ID && r.Shards[0].Node == node {
			t.Fatal("the replacement was placed on the suspect node")
		}
	}
}

// TestOnDemandETAFromAnEarlierLeader: a reconciler that has not seen a
// model load gives the load time an earlier control plane measured
// (Options.LoadTimes) as the ETA, and reports what it measures itself
// (Options.OnLoadTime).
func TestOnDemandETAFromAnEarlierLeader(t *testing.T) {
	var measured []time.Duration
	h := newRouted(t, onDemand("od", 1, 5*time.Minute))
	h.rec.opts.LoadTimes = func() map[string]time.Duration { return map[string]time.Duration{"od": 30 * time.Second} }
	h.rec.opts.OnLoadTime = func(model string, took time.Duration) {
		if model == "od" {
			measured = append(measured, took)
		}
	}
	h.rec.Pass()
	var nr *router.NotReadyError
	if _, err := h.rt.Pick("od", ""); !errors.As(err, &nr) || !nr.Loading {
		t.Fatalf("first request: %v, want loading", err)
	}
	h.rec.Pass()
	if _, err := h.rt.Pick("od", ""); !errors.As(err, &nr) || !nr.ETA.Equal(h.now.Add(30*time.Second)) {
		t.Fatalf("while loading: %v (ETA %v), want the earlier leader's 30s from now", err, nr.ETA)
	}
	h.now = h.now.Add(20 * time.Second)
	h.readyAll("od")
	h.rec.Pass()
	if len(measured) != 1 || measured[0] != 20*time.Second {
		t.Errorf("load times reported: %v, want [20s]", measured)
	}
}
