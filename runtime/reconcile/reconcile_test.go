package reconcile

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/api/specv1"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/models"
	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/spec"
)

// recordingConn stands in for an agent session.
type recordingConn struct {
	mu   sync.Mutex
	sent []*agentv1.ControlMessage
}

func (c *recordingConn) Send(m *agentv1.ControlMessage) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent = append(c.sent, m)
	return nil
}

func (c *recordingConn) starts() []*agentv1.StartShard {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*agentv1.StartShard
	for _, m := range c.sent {
		if s := m.GetStartShard(); s != nil {
			out = append(out, s)
		}
	}
	return out
}

func (c *recordingConn) stops() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, m := range c.sent {
		if s := m.GetStopShard(); s != nil {
			out = append(out, s.GetShardId())
		}
	}
	return out
}

type endpoints struct {
	mu  sync.Mutex
	eps map[string][]router.Endpoint
}

func (e *endpoints) SetEndpoints(model string, eps []router.Endpoint) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.eps[model] = eps
}

func inventory(fabric string) *agentv1.Inventory {
	inv := &agentv1.Inventory{MemoryTotalBytes: 512 << 30, MemoryAvailableBytes: 500 << 30, DiskFreeBytes: 1 << 40, Avx2: true,
		Engines: []*agentv1.EngineStatus{{Engine: "sim", Available: true}}}
	for i := 0; i < 8; i++ {
		inv.Gpus = append(inv.Gpus, &agentv1.GPU{Index: int32(i), Class: "h100-80g", MemoryMib: 81559})
	}
	if fabric != "" {
		inv.Fabrics = []*agentv1.FabricVerdict{{Name: fabric, Adapters: []string{"mlx5_0"}, InService: true, RateGbps: 200}}
	}
	return inv
}

type harness struct {
	fleet *fleet.Fleet
	conns map[string]*recordingConn
	eps   *endpoints
	rec   *Reconciler
	now   time.Time
}

func newHarness(t *testing.T, ms ...spec.Model) *harness {
	t.Helper()
	reg, err := models.New(ms, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{fleet: fleet.New(), conns: map[string]*recordingConn{}, eps: &endpoints{eps: map[string][]router.Endpoint{}}, now: time.Unix(1_700_000_000, 0)}
	for _, n := range []struct{ id, fabric string }{{"node01", "ib-a"}, {"node02", "ib-a"}, {"node03", ""}} {
		c := &recordingConn{}
		h.conns[n.id] = c
		h.fleet.Connect(&agentv1.Hello{NodeId: n.id, Address: "127.0.0.1", Inventory: inventory(n.fabric)}, n.id, nil, false, c)
	}
	h.rec = New(Options{Fleet: h.fleet, Catalog: reg, Endpoints: h.eps, Grace: time.Hour, Now: func() time.Time { return h.now }})
	return h
}

func (h *harness) report(node string, s *agentv1.StartShard, state agentv1.ShardState, mut func(*agentv1.ShardStatus)) {
	st := &agentv1.ShardStatus{ShardId: s.GetShardId(), ReplicaId: s.GetReplicaId(), Model: s.GetModel(), Rank: s.GetRank(), State: state}
	if mut != nil {
		mut(st)
	}
	h.fleet.ApplyShardStatus(node, st)
}

func (h *harness) startsFor(model string) map[string][]*agentv1.StartShard {
	out := map[string][]*agentv1.StartShard{}
	for node, c := range h.conns {
		for _, s := range c.starts() {
			if s.GetModel() == model {
				out[node] = append(out[node], s)
			}
		}
	}
	return out
}

func chatModel() spec.Model {
	m := spec.Model{Name: "sim-chat", Aliases: []string{"chat"}, Source: "sim://chat", Scaling: spec.Scaling{Min: 1, Max: 2},
		Profiles: []spec.Profile{{Name: "h100", Engine: "sim", GPUClass: "h100-80g", TP: 1, Env: map[string]string{"SIM_X": "1"}}}}
	return m
}

func twoNodeModel() spec.Model {
	return spec.Model{Name: "sim-2node", Source: "sim://2node", Scaling: spec.Scaling{Min: 1, Max: 1},
		Profiles: []spec.Profile{{Name: "x2", Engine: "sim", GPUClass: "h100-80g", TP: 4, Nodes: 2}}}
}

func TestSingleNodeReplicaLifecycle(t *testing.T) {
	h := newHarness(t, chatModel())
	h.rec.Pass()
	starts := h.startsFor("sim-chat")
	if len(starts) != 1 {
		t.Fatalf("want one StartShard for sim-chat, got %v", starts)
	}
	var node string
	var s *agentv1.StartShard
	for n, ss := range starts {
		node, s = n, ss[0]
	}
	if s.GetProfile().GetNodes() != 1 || len(s.GetGpuIndices()) != 1 || s.GetModelGeneration() == "" || s.GetProfile().GetEnv()["SIM_X"] != "1" {
		t.Fatalf("bad StartShard: %v", s)
	}
	// A second pass while it starts places nothing more.
	h.rec.Pass()
	if n := len(h.startsFor("sim-chat")[node]); n != 1 {
		t.Fatalf("replica placed twice while starting: %d starts", n)
	}
	if eps := h.eps.eps["sim-chat"]; len(eps) != 0 {
		t.Fatalf("endpoints before ready: %v", eps)
	}
	h.report(node, s, agentv1.ShardState_SHARD_STATE_READY, func(st *agentv1.ShardStatus) { st.Endpoint = "127.0.0.1:9000" })
	h.rec.Pass()
	eps := h.eps.eps["sim-chat"]
	if len(eps) != 1 || eps[0].URL != "http://127.0.0.1:9000" {
		t.Fatalf("endpoints after ready = %v", eps)
	}

	// The engine dies: the replica fails, is stopped and removed, and after
	// the backoff a new one is placed.
	h.report(node, s, agentv1.ShardState_SHARD_STATE_FAILED, func(st *agentv1.ShardStatus) { st.Error = "exit status 1" })
	h.rec.Pass()
	if eps := h.eps.eps["sim-chat"]; len(eps) != 0 {
		t.Fatalf("failed replica still routed: %v", eps)
	}
	if stops := h.conns[node].stops(); len(stops) != 1 || stops[0] != s.GetShardId() {
		t.Fatalf("stops = %v, want %s", stops, s.GetShardId())
	}
	if got := h.rec.LastFailure("sim-chat"); got == "" {
		t.Fatal("last failure not recorded")
	}
	total := func() int {
		n := 0
		for _, ss := range h.startsFor("sim-chat") {
			n += len(ss)
		}
		return n
	}
	if total() != 1 {
		t.Fatalf("replaced during backoff")
	}
	h.now = h.now.Add(2 * time.Second)
	h.rec.Pass()
	if total() != 2 {
		t.Fatalf("not replaced after backoff: %d starts", total())
	}
}

func TestMultiNodeReplicaStaysInOneFabricAndStartsWorkersAfterRendezvous(t *testing.T) {
	h := newHarness(t, twoNodeModel())
	h.rec.Pass()
	starts := h.startsFor("sim-2node")
	if len(starts) != 1 {
		t.Fatalf("want rank 0 started alone first, got %v", starts)
	}
	var r0node string
	var r0 *agentv1.StartShard
	for n, ss := range starts {
		r0node, r0 = n, ss[0]
	}
	if r0.GetRank() != 0 || r0.GetProfile().GetNodes() != 2 || r0.GetFabric() != "ib-a" {
		t.Fatalf("rank 0 start = %v", r0)
	}
	if r0node == "node03" {
		t.Fatal("multi-node shard placed on a node without a fabric")
	}
	h.report(r0node, r0, agentv1.ShardState_SHARD_STATE_STARTING, func(st *agentv1.ShardStatus) { st.RendezvousAddr = "127.0.0.1:7000" })
	h.rec.Pass()
	starts = h.startsFor("sim-2node")
	if len(starts) != 2 {
		t.Fatalf("worker not started after rendezvous: %v", starts)
	}
	var w *agentv1.StartShard
	var wnode string
	for n, ss := range starts {
		if n != r0node {
			wnode, w = n, ss[0]
		}
	}
	if wnode == "node03" || w.GetRank() != 1 || w.GetRendezvousAddr() != "127.0.0.1:7000" {
		t.Fatalf("worker start on %s = %v", wnode, w)
	}
	// Rank 0 ready but the worker not: the replica is not ready.
	h.report(r0node, r0, agentv1.ShardState_SHARD_STATE_READY, func(st *agentv1.ShardStatus) { st.Endpoint = "127.0.0.1:9001" })
	h.rec.Pass()
	if eps := h.eps.eps["sim-2node"]; len(eps) != 0 {
		t.Fatalf("replica routed with a shard not ready: %v", eps)
	}
	h.report(wnode, w, agentv1.ShardState_SHARD_STATE_READY, nil)
	h.rec.Pass()
	if eps := h.eps.eps["sim-2node"]; len(eps) != 1 {
		t.Fatalf("ready replica not routed: %v", eps)
	}
}

func TestLostNodeFailsItsReplicas(t *testing.T) {
	h := newHarness(t, chatModel())
	h.rec.Pass()
	if len(h.fleet.Replicas()) != 1 {
		t.Fatal("no replica placed")
	}
	// Every node goes silent: with a grace of 1ns they are lost at once
	// (the fleet's own clock has moved on).
	h.rec.opts.Grace = time.Nanosecond
	h.rec.Pass()
	for _, n := range h.fleet.Nodes() {
		if n.State != fleet.NodeLost {
			t.Fatalf("node %s is %s, want lost", n.ID, n.State)
		}
	}
	reps := h.fleet.Replicas()
	if len(reps) != 1 || reps[0].Live() || !strings.Contains(reps[0].Error, "lost") {
		t.Fatalf("replica on a lost node = %+v; want it failed with the reason", reps)
	}
	// Its GPU stays allocated until its engine is known gone (or the stop
	// grace passes): the lost node may still be running it.
	if used := h.fleet.UsedGPUs(); len(used) != 1 {
		t.Fatalf("GPUs in use = %v; want the lost replica's still counted", used)
	}
	h.now = h.now.Add(stopGrace + time.Second)
	h.rec.Pass()
	if reps := h.fleet.Replicas(); len(reps) != 1 || reps[0].State != fleet.ReplicaFailed {
		t.Fatalf("after the stop grace = %+v; want only the failure record", reps)
	}
	if used := h.fleet.UsedGPUs(); len(used) != 0 {
		t.Fatalf("GPUs in use after the stop grace = %v", used)
	}
}

func TestRemovedModelStopsItsReplicas(t *testing.T) {
	reg, err := models.New(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	h.rec.opts.Catalog = reg
	if _, err := reg.Create(context.Background(), chatModel()); err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	if len(h.fleet.Replicas()) != 1 {
		t.Fatal("no replica placed")
	}
	if err := reg.Delete(context.Background(), "sim-chat"); err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	stopped := 0
	var node string
	for n, c := range h.conns {
		stopped += len(c.stops())
		if len(c.stops()) > 0 {
			node = n
		}
	}
	if stopped != 1 {
		t.Fatalf("want one StopShard, got %d", stopped)
	}
	reps := h.fleet.Replicas()
	if len(reps) != 1 || reps[0].State != fleet.ReplicaStopping || len(h.fleet.UsedGPUs()) != 1 {
		t.Fatalf("replicas = %+v; want the removed model's replica stopping and holding its GPU until its engine is gone", reps)
	}
	h.fleet.ApplyShardStatus(node, &agentv1.ShardStatus{ShardId: reps[0].Shards[0].ID, ReplicaId: reps[0].ID, State: agentv1.ShardState_SHARD_STATE_STOPPED})
	h.rec.Pass()
	if len(h.fleet.Replicas()) != 0 || len(h.fleet.UsedGPUs()) != 0 {
		t.Fatalf("after the agent reported the shard stopped: replicas %v, GPUs %v", h.fleet.Replicas(), h.fleet.UsedGPUs())
	}
}

func TestAdoptedReplicaShortOfShardsFailsAfterGrace(t *testing.T) {
	h := newHarness(t, twoNodeModel())
	h.rec.opts.Grace = 10 * time.Second
	gen := spec.ReplicaGeneration(func() spec.Model { m := twoNodeModel(); m.Normalize(); return m }(), "x2")
	// After a control-plane restart only rank 0's agent comes back.
	h.fleet.Connect(&agentv1.Hello{NodeId: "node01", Address: "127.0.0.1", Inventory: inventory("ib-a"), Shards: []*agentv1.ShardStatus{{
		ShardId: "r-old-0", ReplicaId: "r-old", Model: "sim-2node", Rank: 0, Profile: &specv1.Profile{Name: "x2", Nodes: 2},
		ModelGeneration: gen, State: agentv1.ShardState_SHARD_STATE_READY, Endpoint: "127.0.0.1:9100",
	}}}, "node01", nil, false, h.conns["node01"])
	h.rec.Pass()
	if n := len(h.startsFor("sim-2node")); n != 0 {
		t.Fatalf("a replacement was placed while the adopted replica waits for its other shard: %d", n)
	}
	if eps := h.eps.eps["sim-2node"]; len(eps) != 0 {
		t.Fatalf("a replica short of shards is routed: %v", eps)
	}
	h.now = time.Now().Add(time.Minute)
	h.rec.Pass() // fails it
	h.rec.Pass() // retires it
	if got := h.rec.LastFailure("sim-2node"); !strings.Contains(got, "only 1 of 2 shards") {
		t.Fatal("the adopted replica short of a shard was not failed after the grace period")
	}
}

func TestPlacementHeldAfterRestart(t *testing.T) {
	h := newHarness(t, chatModel())
	h.rec.opts.Expected = []string{"r-before"}
	h.rec.opts.HoldPlacementUntil = h.now.Add(10 * time.Second)
	var recorded [][]string
	h.rec.opts.OnLiveReplicas = func(ids []string) { recorded = append(recorded, ids) }
	h.rec.Pass()
	if h.rec.Ready() {
		t.Fatal("ready while holding for agents after a restart")
	}
	if n := len(h.startsFor("sim-chat")); n != 0 {
		t.Fatalf("placed %d replicas while holding for agents to report", n)
	}
	if len(recorded) != 0 {
		t.Fatalf("live replicas recorded while holding: %v (would forget the expected ones)", recorded)
	}
	h.now = h.now.Add(11 * time.Second)
	h.rec.Pass()
	starts := h.startsFor("sim-chat")
	if n := len(starts); n != 1 {
		t.Fatalf("placed %d replicas after the hold, want 1", n)
	}
	if !h.rec.Ready() {
		t.Fatal("not ready after the hold")
	}
	if len(recorded) != 1 || len(recorded[0]) != 1 {
		t.Fatalf("recorded live replicas = %v, want the one placed", recorded)
	}
}

func TestPlacementHoldEndsWhenExpectedReplicasAreBack(t *testing.T) {
	h := newHarness(t, chatModel(), twoNodeModel())
	h.rec.opts.HoldPlacementUntil = h.now.Add(time.Hour)
	h.rec.opts.Expected = []string{"r-old"}
	h.rec.Pass()
	if n := len(h.startsFor("sim-2node")) + len(h.startsFor("sim-chat")); n != 0 {
		t.Fatalf("placed %d while r-old is missing", n)
	}
	chat := chatModel()
	chat.Normalize()
	h.fleet.Connect(&agentv1.Hello{NodeId: "node03", Address: "127.0.0.1", Inventory: inventory(""), Shards: []*agentv1.ShardStatus{{
		ShardId: "r-old-0", ReplicaId: "r-old", Model: "sim-chat", Profile: &specv1.Profile{Name: "h100", Nodes: 1},
		ModelGeneration: spec.ReplicaGeneration(chat, "h100"), State: agentv1.ShardState_SHARD_STATE_READY, Endpoint: "127.0.0.1:9200",
	}}}, "node03", nil, false, h.conns["node03"])
	h.rec.Pass()
	if n := len(h.startsFor("sim-chat")); n != 0 {
		t.Fatalf("sim-chat placed anew although its replica was adopted: %d", n)
	}
	if n := len(h.startsFor("sim-2node")); n != 1 {
		t.Fatalf("sim-2node not placed once the hold ended: %d", n)
	}
}

func TestDrainMovesReplicaReplacementFirst(t *testing.T) {
	h := newHarness(t, chatModel())
	h.rec.Pass()
	var node string
	var s *agentv1.StartShard
	for n, ss := range h.startsFor("sim-chat") {
		node, s = n, ss[0]
	}
	h.report(node, s, agentv1.ShardState_SHARD_STATE_READY, func(st *agentv1.ShardStatus) { st.Endpoint = "127.0.0.1:9300" })
	h.rec.Pass()
	if _, ok := h.fleet.SetDraining(node, true); !ok {
		t.Fatal("node not found")
	}
	h.rec.Pass()
	var repl *agentv1.StartShard
	var replNode string
	for n, ss := range h.startsFor("sim-chat") {
		for _, x := range ss {
			if x.GetShardId() != s.GetShardId() {
				replNode, repl = n, x
			}
		}
	}
	if repl == nil || replNode == node {
		t.Fatalf("no replacement placed off the draining node %s", node)
	}
	if stops := h.conns[node].stops(); len(stops) != 0 {
		t.Fatalf("the original stopped before its replacement was ready: %v", stops)
	}
	if eps := h.eps.eps["sim-chat"]; len(eps) != 1 {
		t.Fatalf("the original must keep serving while the replacement starts: %v", eps)
	}
	h.report(replNode, repl, agentv1.ShardState_SHARD_STATE_READY, func(st *agentv1.ShardStatus) { st.Endpoint = "127.0.0.1:9301" })
	h.rec.Pass()
	if stops := h.conns[node].stops(); len(stops) != 1 || stops[0] != s.GetShardId() {
		t.Fatalf("stops on the draining node = %v, want the original", stops)
	}
	if eps := h.eps.eps["sim-chat"]; len(eps) != 1 || eps[0].URL != "http://127.0.0.1:9301" {
		t.Fatalf("endpoints after the drain = %v", eps)
	}
}

// TestStartTimeoutCountsFromFetchActivity: a replica whose shard is still
// fetching weights, bytes moving, is not failed by the start timeout
// counted from its placement; once the fetch moves nothing, the timeout
// runs from the last byte and fails it.
func TestStartTimeoutCountsFromFetchActivity(t *testing.T) {
	h := newHarness(t, chatModel())
	h.fleet.SetClock(func() time.Time { return h.now })
	h.rec.Pass()
	var node string
	var s *agentv1.StartShard
	for n, ss := range h.startsFor("sim-chat") {
		node, s = n, ss[0]
	}
	start := h.now
	fetching := func(done int64) func(*agentv1.ShardStatus) {
		return func(st *agentv1.ShardStatus) {
			st.Fetch = &agentv1.FetchProgress{Source: "http://m/v/w.gguf", BytesDone: done, BytesTotal: 1 << 40}
		}
	}
	h.now = start.Add(5 * time.Minute)
	h.report(node, s, agentv1.ShardState_SHARD_STATE_STARTING, fetching(10))
	h.now = start.Add(11 * time.Minute) // past 10m30s from placement
	h.report(node, s, agentv1.ShardState_SHARD_STATE_STARTING, fetching(10))
	h.rec.Pass()
	h.rec.Pass()
	if stops := h.conns[node].stops(); len(stops) != 0 {
		t.Fatalf("a replica fetching its weights was failed by the start timeout: stops %v", stops)
	}
	h.now = start.Add(16 * time.Minute) // 11m since the last byte moved
	h.report(node, s, agentv1.ShardState_SHARD_STATE_STARTING, fetching(10))
	h.rec.Pass() // fails it
	h.rec.Pass() // stops it
	if stops := h.conns[node].stops(); len(stops) != 1 {
		t.Fatalf("a fetch that moved nothing for 11m was not failed: stops %v", stops)
	}
	if got := h.rec.LastFailure("sim-chat"); !strings.Contains(got, "not ready within") {
		t.Errorf("last failure %q", got)
	}
}

// TestRoutingEditKeepsReplicasAndReweighs: editing a profile's weight and
// priority stops and starts nothing (same replica, no StopShard, no second
// StartShard) and the router gets the new weight for the running replica;
// a tp edit still rolls, replacement first.
func TestRoutingEditKeepsReplicasAndReweighs(t *testing.T) {
	reg, err := models.New(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	h.rec.opts.Catalog = reg
	rt := router.New()
	h.rec.opts.Endpoints = rt
	routed := func() []router.EndpointLoad { return rt.Snapshot()["sim-chat"] }
	ctx := context.Background()
	m := chatModel()
	m.Scaling = spec.Scaling{Min: 1, Max: 1}
	if _, err := reg.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	var node string
	var s *agentv1.StartShard
	for n, ss := range h.startsFor("sim-chat") {
		node, s = n, ss[0]
	}
	h.report(node, s, agentv1.ShardState_SHARD_STATE_READY, func(st *agentv1.ShardStatus) { st.Endpoint = "127.0.0.1:9400" })
	h.rec.Pass()
	if eps := routed(); len(eps) != 1 || eps[0].Weight != 1 {
		t.Fatalf("endpoints = %+v, want one of weight 1", eps)
	}
	starts := func() int {
		n := 0
		for _, ss := range h.startsFor("sim-chat") {
			n += len(ss)
		}
		return n
	}

	m.Profiles[0].Weight, m.Profiles[0].Priority = 7, 50
	if _, err := reg.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	h.rec.Pass()
	if n := starts(); n != 1 {
		t.Fatalf("a weight and priority edit started %d shards, want only the original", n)
	}
	if stops := h.conns[node].stops(); len(stops) != 0 {
		t.Fatalf("a weight and priority edit stopped %v", stops)
	}
	eps := routed()
	if len(eps) != 1 || eps[0].ReplicaID != s.GetReplicaId() || eps[0].Weight != 7 {
		t.Fatalf("endpoints after the weight edit = %+v, want the router to weigh replica %s 7", eps, s.GetReplicaId())
	}
	reps := h.fleet.Replicas()
	if len(reps) != 1 || reps[0].Profile.Weight != 7 || reps[0].Profile.Priority != 50 {
		t.Fatalf("replica after the edit = %+v, want weight 7 priority 50", reps)
	}

	m.Profiles[0].TP = 2
	if _, err := reg.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	if n := starts(); n != 2 {
		t.Fatalf("a tp edit started %d shards in all, want a replacement", n)
	}
	if stops := h.conns[node].stops(); len(stops) != 0 {
		t.Fatalf("the original stopped before its replacement was ready: %v", stops)
	}
}

// TestRolloutOneAtATime: an edit that changes how replicas are built
// replaces three ready replicas one at a time: one replacement starts,
// the oldest old replica stops only once it is ready, and never fewer than
// three replicas serve. With rollout "manual" the stale replicas keep
// serving and nothing is placed until RequestRollout, which then rolls
// them the same way; or until the model's rollout is set to auto, which
// releases them (docs/configuration.md, "Changing a model"; the
// provider's plan names them as replaced: TestPlanRolloutPolicyChange).
func TestRolloutOneAtATime(t *testing.T) {
	for _, name := range []string{"auto", "manual", "manual then auto", "auto then manual"} {
		manual := strings.HasPrefix(name, "manual")
		t.Run(name, func(t *testing.T) {
			reg, err := models.New(nil, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			h := newHarness(t)
			h.rec.opts.Catalog = reg
			ctx := context.Background()
			m := chatModel()
			m.Scaling = spec.Scaling{Min: 3, Max: 3}
			if manual {
				m.Rollout = spec.RolloutManual
			}
			if _, err := reg.Create(ctx, m); err != nil {
				t.Fatal(err)
			}
			port := 9500
			reported := map[string]bool{}
			// readyAll reports every started, unreported shard ready.
			readyAll := func() int {
				n := 0
				for node, ss := range h.startsFor("sim-chat") {
					for _, s := range ss {
						if !reported[s.GetShardId()] {
							reported[s.GetShardId()] = true
							port++
							h.report(node, s, agentv1.ShardState_SHARD_STATE_READY, func(st *agentv1.ShardStatus) { st.Endpoint = "127.0.0.1:" + itoa(port) })
							n++
						}
					}
				}
				return n
			}
			stops := func() int {
				n := 0
				for _, c := range h.conns {
					n += len(c.stops())
				}
				return n
			}
			// stopAcked has the agents report the stopped shards stopped.
			stopAcked := func() {
				for node, c := range h.conns {
					for _, id := range c.stops() {
						for _, rep := range h.fleet.Replicas() {
							for _, sh := range rep.Shards {
								if sh.ID == id {
									h.fleet.ApplyShardStatus(node, &agentv1.ShardStatus{ShardId: id, ReplicaId: rep.ID, Model: rep.Model, State: agentv1.ShardState_SHARD_STATE_STOPPED})
								}
							}
						}
					}
				}
			}
			serving := func() int { return len(h.eps.eps["sim-chat"]) }
			h.rec.Pass()
			if n := readyAll(); n != 3 {
				t.Fatalf("first placement started %d shards, want 3 at once", n)
			}
			h.rec.Pass()
			gen0, _ := reg.Get("sim-chat")

			m.Profiles[0].Args = []string{"--new-flag"}
			e, err := reg.Update(ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			if manual {
				for range 3 {
					h.rec.Pass()
				}
				if n := readyAll(); n != 0 || stops() != 0 || serving() != 3 {
					t.Fatalf("manual: an edit started %d, stopped %d, %d serving; want 0, 0, 3", n, stops(), serving())
				}
				if name == "manual then auto" {
					m.Rollout = spec.RolloutAuto
					if _, err := reg.Update(ctx, m); err != nil {
						t.Fatal(err)
					}
				} else if stale := h.rec.RequestRollout(e); len(stale) != 3 {
					t.Fatalf("RequestRollout named %v, want the 3 stale replicas", stale)
				}
			}
			for round := 1; round <= 3; round++ {
				h.rec.Pass()
				h.rec.Pass()
				started := readyAll()
				if started != 1 {
					t.Fatalf("round %d: %d replacements started, want 1", round, started)
				}
				if stops() != round-1 || serving() < 3 {
					t.Fatalf("round %d: %d stopped before the replacement was ready, %d serving", round, stops(), serving())
				}
				h.rec.Pass() // the replacement is ready: one old replica stops
				if stops() != round || serving() < 3 {
					t.Fatalf("round %d: %d stopped, %d serving; want %d and at least 3", round, stops(), serving(), round)
				}
				stopAcked()
				if name == "auto then manual" && round == 1 {
					// Set to manual mid-rollout: the rollout stops where
					// it is. The two stale replicas left keep serving,
					// held until RequestRollout, beside the one
					// replacement ready; the next replacement, placed
					// already but not ready, is stopped (above
					// scaling.min), and none is placed.
					m.Rollout = spec.RolloutManual
					e, err := reg.Update(ctx, m)
					if err != nil {
						t.Fatal(err)
					}
					for range 3 {
						h.rec.Pass()
					}
					live, stale := 0, 0
					for _, rep := range h.fleet.Replicas() {
						if rep.Live() {
							live++
							if rep.Generation == gen0.ReplicaGeneration(rep.Profile.Name) {
								stale++
							}
						}
					}
					if live != 3 || stale != 2 || serving() != 3 || stops() != 2 {
						t.Fatalf("auto then manual: after the switch %d live (%d stale), %d serving, %d stopped; want 3 (2 stale), 3, 2 (the first stale one and the replacement not ready)", live, stale, serving(), stops())
					}
					if names := h.rec.RequestRollout(e); len(names) != 2 {
						t.Fatalf("RequestRollout named %v, want the 2 stale replicas left", names)
					}
					return
				}
			}
			h.rec.Pass()
			if n := readyAll(); n != 0 || stops() != 3 || serving() != 3 {
				t.Fatalf("after the rollout: %d more started, %d stopped, %d serving; want 0, 3, 3", n, stops(), serving())
			}
			for _, rep := range h.fleet.Replicas() {
				if rep.Live() && rep.Generation == gen0.ReplicaGeneration(rep.Profile.Name) {
					t.Errorf("replica %s of the old generation still live", rep.ID)
				}
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestRolloutReplacementFailuresBackOff: a replacement that fails waits out
// the model's backoff before the next one is placed, although the old
// replica serving meanwhile is ready (it used to clear the backoff on
// every pass, so a broken edit was retried as fast as passes ran).
func TestRolloutReplacementFailuresBackOff(t *testing.T) {
	reg, err := models.New(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	h.rec.opts.Catalog = reg
	ctx := context.Background()
	m := chatModel()
	m.Scaling = spec.Scaling{Min: 1, Max: 1}
	if _, err := reg.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	starts := func() []*agentv1.StartShard {
		var out []*agentv1.StartShard
		for _, ss := range h.startsFor("sim-chat") {
			out = append(out, ss...)
		}
		return out
	}
	first := starts()[0]
	for node := range h.startsFor("sim-chat") {
		h.report(node, first, agentv1.ShardState_SHARD_STATE_READY, func(st *agentv1.ShardStatus) { st.Endpoint = "127.0.0.1:9600" })
	}
	h.rec.Pass()
	m.Profiles[0].Args = []string{"--broken"}
	if _, err := reg.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	if n := len(starts()); n != 2 {
		t.Fatalf("%d starts after the edit, want the replacement", n)
	}
	// starts() gathers a map of nodes: the replacement is the start that
	// is not the first replica's.
	var repl *agentv1.StartShard
	for _, s := range starts() {
		if s.GetShardId() != first.GetShardId() {
			repl = s
		}
	}
	for node, ss := range h.startsFor("sim-chat") {
		for _, s := range ss {
			if s.GetShardId() == repl.GetShardId() {
				h.report(node, s, agentv1.ShardState_SHARD_STATE_FAILED, func(st *agentv1.ShardStatus) { st.Error = "exit status 1" })
			}
		}
	}
	h.rec.Pass()
	h.rec.Pass()
	if n := len(starts()); n != 2 {
		t.Fatalf("%d starts right after the replacement failed, want none more before the backoff", n)
	}
	h.now = h.now.Add(2 * time.Second)
	h.rec.Pass()
	if n := len(starts()); n != 3 {
		t.Fatalf("%d starts after the backoff, want the next replacement", n)
	}
}

// TestWorkersFetchAheadOfRank0: placing a multi-node replica of a fetched
// source asks the worker's node to fetch the weights at once, beside rank
// 0's start, not after rank 0's rendezvous; a source nobody fetches asks
// nothing.
func TestWorkersFetchAheadOfRank0(t *testing.T) {
	m := twoNodeModel()
	m.Source = "http://mirror:8081/big/v1/"
	h := newHarness(t, m)
	h.rec.Pass()
	var r0node string
	for n, ss := range h.startsFor("sim-2node") {
		r0node = n
		if len(ss) != 1 || ss[0].GetRank() != 0 {
			t.Fatalf("starts %v", ss)
		}
	}
	for n, c := range h.conns {
		var fetches []string
		c.mu.Lock()
		for _, msg := range c.sent {
			if f := msg.GetFetchWeights(); f != nil {
				fetches = append(fetches, f.GetSource())
			}
		}
		c.mu.Unlock()
		worker := n != r0node && n != "node03"
		if worker && (len(fetches) != 1 || fetches[0] != m.Source) {
			t.Errorf("worker node %s was asked to fetch %v, want %s once", n, fetches, m.Source)
		}
		if !worker && len(fetches) != 0 {
			t.Errorf("node %s was asked to fetch %v", n, fetches)
		}
	}

	h2 := newHarness(t, twoNodeModel())
	h2.rec.Pass()
	for n, c := range h2.conns {
		for _, msg := range c.sent {
			if msg.GetFetchWeights() != nil {
				t.Errorf("node %s asked to fetch a sim:// source", n)
			}
		}
	}
}

// TestPlacementPrefersTheNodeHoldingTheWeights: of two otherwise equal
// nodes, the one whose weights cache reports the model's source gets the
// replica, whichever sorts first.
func TestPlacementPrefersTheNodeHoldingTheWeights(t *testing.T) {
	m := chatModel()
	m.Source = "http://mirror:8081/chat/v1/w.gguf"
	for _, holder := range []string{"node01", "node03"} {
		h := newHarness(t, m)
		h.fleet.Heartbeat(holder, &agentv1.Heartbeat{WeightsCache: &agentv1.WeightsCache{Entries: []*agentv1.CacheEntry{{Key: spec.WeightsKey(m.Source), Source: m.Source, SizeBytes: 1 << 30}}}})
		h.rec.Pass()
		starts := h.startsFor("sim-chat")
		if len(starts[holder]) != 1 || len(starts) != 1 {
			t.Errorf("holder %s: starts %v, want the replica there", holder, starts)
		}
	}
}

// TestDiskIsTheWeightsCaches: min_disk_gb is checked against the free space
// of the filesystem holding the node's weights cache when the node reports
// it, not the state directory's.
func TestDiskIsTheWeightsCaches(t *testing.T) {
	m := chatModel()
	m.Source = "http://mirror:8081/chat/v1/w.gguf"
	m.Profiles[0].MinDiskGB = 100
	h := newHarness(t, m)
	for _, n := range []string{"node01", "node02"} {
		h.fleet.Heartbeat(n, &agentv1.Heartbeat{WeightsCache: &agentv1.WeightsCache{DiskFreeBytes: 10 << 30, DiskTotalBytes: 500 << 30}})
	}
	h.rec.Pass()
	starts := h.startsFor("sim-chat")
	if len(starts) != 1 || len(starts["node03"]) != 1 {
		t.Errorf("starts %v: want the replica on node03, the only node whose weights disk has 100 GB free", starts)
	}
}

// passCounter records, at each SetEndpoints, how many passes the
// reconciler said had completed.
type passCounter struct {
	rec  *Reconciler
	seen []uint64
}

func (p *passCounter) SetEndpoints(string, []router.Endpoint) {
	p.seen = append(p.seen, p.rec.Passes())
}

// TestPassesCountCompletedPasses: Passes grows by one per pass, held or
// not, and only once the pass is over: while a pass tells the router its
// routes, the count is still the one before it.
func TestPassesCountCompletedPasses(t *testing.T) {
	h := newHarness(t, chatModel())
	pc := &passCounter{}
	reg, err := models.New([]spec.Model{chatModel()}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.rec = New(Options{Fleet: h.fleet, Catalog: reg, Endpoints: pc, Grace: time.Hour, Now: func() time.Time { return h.now },
		Expected: []string{"r-gone"}, HoldPlacementUntil: h.now.Add(time.Minute)})
	pc.rec = h.rec
	if got := h.rec.Passes(); got != 0 {
		t.Fatalf("Passes before any pass = %d, want 0", got)
	}
	h.rec.Pass() // placement held: still a pass
	if h.rec.Ready() {
		t.Fatal("the first pass did not hold placement; the test needs a held pass")
	}
	h.now = h.now.Add(2 * time.Minute)
	h.rec.Pass()
	h.rec.Pass()
	if got := h.rec.Passes(); got != 3 {
		t.Errorf("Passes after 3 passes = %d, want 3", got)
	}
	if want := []uint64{0, 1, 2}; !slices.Equal(pc.seen, want) {
		t.Errorf("Passes while each pass set the routes = %v, want %v", pc.seen, want)
	}
}
