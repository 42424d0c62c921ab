package reconcile

import (
	"context"
	"testing"
	"time"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/spec"
)

func (r *routed) ackStops() {
	for node, c := range r.conns {
		for _, id := range c.stops() {
			for _, rep := range r.fleet.Replicas() {
				for _, sh := range rep.Shards {
					if sh.ID == id {
						r.fleet.ApplyShardStatus(node, &agentv1.ShardStatus{ShardId: id, ReplicaId: rep.ID, Model: rep.Model, State: agentv1.ShardState_SHARD_STATE_STOPPED})
					}
				}
			}
		}
	}
}

// Stale replicas held by a manual rollout on a node that goes silent are
// all replaced at once, like current ones.
func TestSilentNodeStaleReplicasReplacedAtOnce(t *testing.T) {
	m := chatModel()
	m.Scaling = spec.Scaling{Min: 2, Max: 2}
	m.Profiles[0].TP = 4
	m.Rollout = spec.RolloutManual
	h := newRouted(t)
	h.rec.opts.SuspectAfter = 6 * time.Second
	h.add(t, m)
	h.rec.Pass()
	h.readyAll("sim-chat")
	h.rec.Pass()
	nodes := map[string]int{}
	for _, r := range h.live("sim-chat") {
		nodes[r.Shards[0].Node]++
	}
	t.Logf("nodes %v", nodes)
	m.Profiles[0].Args = []string{"--x"}
	if _, err := h.rec.opts.Catalog.Update(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	var silent []string
	for n := range nodes {
		silent = append(silent, n)
	}
	h.now = h.now.Add(7 * time.Second)
	h.heartbeat(silent...)
	h.rec.Pass()
	h.rec.Pass()
	cur := 0
	e, _ := h.rec.opts.Catalog.Get("sim-chat")
	for _, r := range h.live("sim-chat") {
		if !e.Stale(r.Profile.Name, r.Generation) {
			cur++
		}
	}
	if cur != 2 {
		t.Errorf("node(s) %v silent, both replicas on them (stale, manual hold): %d replacements placed, want 2 at once", silent, cur)
	}
}

// A failing replacement for a replica on a silent node earns a backoff the
// next replacement waits for.
func TestSilentNodeReplacementWaitsOwnBackoff(t *testing.T) {
	h := newRouted(t, chatModel())
	h.rec.opts.SuspectAfter = 6 * time.Second
	h.rec.Pass()
	h.readyAll("sim-chat")
	h.rec.Pass()
	node := h.live("sim-chat")[0].Shards[0].Node
	h.now = h.now.Add(7 * time.Second)
	h.heartbeat(node)
	h.rec.Pass()
	placed := 0
	for i := 0; i < 10; i++ {
		for _, rep := range h.live("sim-chat") {
			if rep.Shards[0].Node != node && rep.State == fleet.ReplicaStarting {
				placed++
				for _, s := range rep.Shards {
					h.report(s.Node, &agentv1.StartShard{ShardId: s.ID, ReplicaId: rep.ID, Model: rep.Model, Rank: int32(s.Rank)},
						agentv1.ShardState_SHARD_STATE_FAILED, func(st *agentv1.ShardStatus) { st.Error = "exit status 1" })
				}
			}
		}
		h.rec.Pass()
		h.ackStops()
		h.rec.Pass()
	}
	t.Logf("backoff %+v", h.rec.backoff["sim-chat"])
	if placed > 4 {
		t.Errorf("%d failing replacements placed in 20 passes at one instant: backoff ignored", placed)
	}
}

func TestDrainReplacementWaitsOwnBackoff(t *testing.T) {
	h := newRouted(t, chatModel())
	h.rec.Pass()
	h.readyAll("sim-chat")
	h.rec.Pass()
	node := h.live("sim-chat")[0].Shards[0].Node
	h.fleet.SetDraining(node, true)
	h.rec.Pass()
	placed := 0
	for i := 0; i < 30; i++ {
		h.now = h.now.Add(100 * time.Millisecond)
		h.heartbeat()
		for _, rep := range h.live("sim-chat") {
			if rep.Shards[0].Node != node && rep.State == fleet.ReplicaStarting {
				placed++
				for _, s := range rep.Shards {
					h.report(s.Node, &agentv1.StartShard{ShardId: s.ID, ReplicaId: rep.ID, Model: rep.Model, Rank: int32(s.Rank)},
						agentv1.ShardState_SHARD_STATE_FAILED, func(st *agentv1.ShardStatus) { st.Error = "exit status 1" })
				}
			}
		}
		h.rec.Pass()
		h.ackStops()
	}
	t.Logf("backoff %+v", h.rec.backoff["sim-chat"])
	if placed > 4 {
		t.Errorf("%d crashing replacements placed within 3s for a drained node: no backoff", placed)
	}
}

// Rollout in progress, then the node of the current-generation replica goes
// silent: the stale replica keeps serving until the replacement is ready.
func TestSilentCurrentReplicaStaleServesUntilReplaced(t *testing.T) {
	m := chatModel()
	m.Scaling = spec.Scaling{Min: 2, Max: 2}
	m.Profiles[0].TP = 8
	h := newRouted(t)
	h.rec.opts.SuspectAfter = 6 * time.Second
	h.add(t, m)
	h.rec.Pass()
	h.readyAll("sim-chat")
	h.rec.Pass()
	m.Profiles[0].Args = []string{"--x"}
	e, err := h.rec.opts.Catalog.Update(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	h.rec.Pass() // one replacement placed on node03
	h.readyAll("sim-chat")
	h.rec.Pass() // ready: one stale stopped
	h.ackStops()
	h.rec.Pass()
	var cur, stale fleet.Replica
	for _, r := range h.live("sim-chat") {
		if !e.Stale(r.Profile.Name, r.Generation) {
			cur = r
		} else {
			stale = r
		}
	}
	t.Logf("cur on %s (%s), stale on %s", cur.Shards[0].Node, cur.State, stale.Shards[0].Node)
	silent := cur.Shards[0].Node
	h.now = h.now.Add(7 * time.Second)
	h.heartbeat(silent)
	h.rec.Pass()
	h.readyAll("sim-chat")
	h.heartbeat(silent)
	h.rec.Pass()
	healthy := 0
	for _, r := range h.live("sim-chat") {
		n, _ := h.fleet.Node(r.Shards[0].Node)
		t.Logf("live %s gen=%v node=%s silent=%v state=%v", r.ID, !e.Stale(r.Profile.Name, r.Generation), r.Shards[0].Node, n.Silent, r.State)
		if !n.Silent && r.State == fleet.ReplicaReady {
			healthy++
		}
	}
	if healthy < 2 {
		t.Errorf("%d ready replicas on healthy nodes, want 2 (the stale one should serve until the second replacement is ready)", healthy)
	}
}

// Stale replicas held by a manual rollout are scaled down like current ones
// (here: an on-demand model idle past its idle_timeout goes to none).
func TestManualHeldStaleReplicasScaleDown(t *testing.T) {
	m := onDemand("od", 1, time.Minute)
	m.Rollout = spec.RolloutManual
	h := newRouted(t)
	h.add(t, m)
	_, _ = h.rt.Pick("od", "")
	h.rec.Pass()
	h.readyAll("od")
	h.rec.Pass()
	m.Profiles[0].Args = []string{"--x"}
	if _, err := h.rec.opts.Catalog.Update(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		h.now = h.now.Add(time.Minute)
		h.heartbeat()
		h.rec.Pass()
	}
	if n := len(h.live("od")); n != 0 {
		t.Errorf("on-demand idle for 10m with idle_timeout 1m: %d live (stale, manual-held) replicas, want 0", n)
	}
}
