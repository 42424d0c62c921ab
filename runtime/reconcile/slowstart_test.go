package reconcile

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/models"
	"github.com/llmgw/llmgw/spec"
)

// slowHarness is a harness whose catalog holds m (scaling.min 1) and whose
// first replica of it became ready 5s after it was placed.
func slowHarness(t *testing.T, m spec.Model) (*harness, *models.Registry, string, *agentv1.StartShard) {
	t.Helper()
	reg, err := models.New(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	h.rec.opts.Catalog = reg
	h.fleet.SetClock(func() time.Time { return h.now })
	if _, err := reg.Create(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	var node string
	var s *agentv1.StartShard
	for n, ss := range h.startsFor(m.Name) {
		node, s = n, ss[0]
	}
	if s == nil {
		t.Fatal("no replica placed")
	}
	h.now = h.now.Add(5 * time.Second)
	h.report(node, s, agentv1.ShardState_SHARD_STATE_READY, func(st *agentv1.ShardStatus) { st.Endpoint = "127.0.0.1:9430" })
	h.rec.Pass()
	return h, reg, node, s
}

// onlyOn drains every harness node but node: the next replica goes there.
func onlyOn(h *harness, node string) {
	for _, id := range []string{"node01", "node02", "node03"} {
		if id != node {
			h.fleet.SetDraining(id, true)
		}
	}
}

// newStart is the one StartShard of m other than those of the replicas in
// known, and its node.
func newStart(t *testing.T, h *harness, model string, known ...string) (string, *agentv1.StartShard) {
	t.Helper()
	for n, ss := range h.startsFor(model) {
		for _, x := range ss {
			if !strings.Contains(strings.Join(known, " "), x.GetReplicaId()) {
				return n, x
			}
		}
	}
	t.Fatal("no new replica placed")
	return "", nil
}

// TestSlowStartReportedStalled: profile h100's first replica took 5s to
// become ready; scaling.min raised to 2 places a second replica of the
// same build on the same node (the others drain), which never becomes
// ready: it is not reported at 14s (twice
// 5s, and 10s more than it, is 15s), and at 16s NotReady names it with its
// shard's state and last engine output. A fetch moving bytes puts the
// clock back. Once ready, nothing is reported.
func TestSlowStartReportedStalled(t *testing.T) {
	m := chatModel()
	m.Scaling = spec.Scaling{Min: 1, Max: 2}
	h, reg, node, s := slowHarness(t, m)
	onlyOn(h, node)
	m.Scaling.Min = 2
	e, err := reg.Update(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	replNode, repl := newStart(t, h, m.Name, s.GetReplicaId())
	placed := h.now
	h.now = placed.Add(14 * time.Second)
	h.report(replNode, repl, agentv1.ShardState_SHARD_STATE_STARTING, func(st *agentv1.ShardStatus) {
		st.LastOutput = []string{"loading weights", "waiting for a lock that never comes"}
	})
	h.rec.Pass()
	if got := h.rec.NotReady("sim-chat", e.Generation); got != "" {
		t.Fatalf("NotReady at 14s = %q, want nothing before 15s", got)
	}
	h.now = placed.Add(16 * time.Second)
	h.rec.Pass()
	got := h.rec.NotReady("sim-chat", e.Generation)
	for _, want := range []string{
		"replica " + repl.GetReplicaId() + " (profile h100, on " + replNode + ") not ready after 16s",
		"replicas of profile h100 built the same way were ready there in at most 5s",
		"shard 0 on " + replNode + ": starting, last output: waiting for a lock that never comes",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("NotReady = %q, lacks %q", got, want)
		}
	}
	if got := h.rec.NotReady("sim-chat", "another"); got != "" {
		t.Errorf("NotReady of another generation = %q, want nothing", got)
	}

	// A fetch that moved a byte puts the clock back to then.
	h.report(replNode, repl, agentv1.ShardState_SHARD_STATE_STARTING, func(st *agentv1.ShardStatus) {
		st.Fetch = &agentv1.FetchProgress{Source: "sim://chat", BytesDone: 10, BytesTotal: 100}
	})
	h.rec.Pass()
	if got := h.rec.NotReady("sim-chat", e.Generation); got != "" {
		t.Errorf("NotReady right after fetch progress = %q, want nothing", got)
	}

	h.now = h.now.Add(time.Second)
	h.report(replNode, repl, agentv1.ShardState_SHARD_STATE_READY, func(st *agentv1.ShardStatus) { st.Endpoint = "127.0.0.1:9431" })
	h.rec.Pass()
	if got := h.rec.NotReady("sim-chat", e.Generation); got != "" {
		t.Errorf("NotReady once ready = %q, want nothing", got)
	}
}

// TestSlowStartNewBuildUnbounded: a replica built otherwise than the one
// measured (an args edit's replacement, as a larger model or a longer
// context would load longer) is held to no bound: starting for a minute
// after its profile's last replica took 5s, it is not reported.
func TestSlowStartNewBuildUnbounded(t *testing.T) {
	m := chatModel()
	m.Scaling = spec.Scaling{Min: 1, Max: 1}
	h, reg, _, s := slowHarness(t, m)
	m.Profiles[0].Args = []string{"--decode-tps", "5"}
	e, err := reg.Update(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	replNode, repl := newStart(t, h, m.Name, s.GetReplicaId())
	h.now = h.now.Add(time.Minute)
	h.report(replNode, repl, agentv1.ShardState_SHARD_STATE_STARTING, nil)
	h.rec.Pass()
	if got := h.rec.NotReady("sim-chat", e.Generation); got != "" {
		t.Fatalf("NotReady of a build never measured = %q, want nothing", got)
	}
}

// TestSlowStartNeedsWeightsAtHand: a replica whose weights were not at
// hand on its node when placed is held to no bound, although a replica of
// the same build was measured: a repository id the engine downloads
// itself, and a fetched source the node's cache did not hold (it did when
// the first replica was measured). A fetched source the cache holds, and a
// local path, are bounded.
func TestSlowStartNeedsWeightsAtHand(t *testing.T) {
	for _, tt := range []struct {
		name, source string
		cacheHeld    bool
		wantBound    bool
	}{
		{name: "engine downloads a repository id", source: "Qwen/Qwen2.5-72B-Instruct"},
		{name: "fetched, not in the node's cache", source: "hf:org/repo/model.gguf"},
		{name: "fetched, in the node's cache", source: "hf:org/repo/model.gguf", cacheHeld: true, wantBound: true},
		{name: "local path", source: "/models/chat", wantBound: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := chatModel()
			m.Source = tt.source
			m.Scaling = spec.Scaling{Min: 1, Max: 2}
			reg, err := models.New(nil, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			h := newHarness(t)
			h.rec.opts.Catalog = reg
			h.fleet.SetClock(func() time.Time { return h.now })
			setCache := func(held bool) {
				h.fleet.Update(func(tx *fleet.Tx) {
					for _, id := range []string{"node01", "node02", "node03"} {
						tx.Node(id).Inventory.WeightsCache = nil
						if held {
							tx.Node(id).Inventory.WeightsCache = &agentv1.WeightsCache{Entries: []*agentv1.CacheEntry{{Source: tt.source}}}
						}
					}
				})
			}
			// The first replica is measured with its weights in
			// every node's cache.
			setCache(true)
			ctx := context.Background()
			if _, err := reg.Create(ctx, m); err != nil {
				t.Fatal(err)
			}
			h.rec.Pass()
			node, s := newStart(t, h, m.Name)
			h.now = h.now.Add(5 * time.Second)
			h.report(node, s, agentv1.ShardState_SHARD_STATE_READY, func(st *agentv1.ShardStatus) { st.Endpoint = "127.0.0.1:9430" })
			h.rec.Pass()
			setCache(tt.cacheHeld)
			onlyOn(h, node)
			m.Scaling.Min = 2
			e, err := reg.Update(ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			h.rec.Pass()
			replNode, repl := newStart(t, h, m.Name, s.GetReplicaId())
			h.now = h.now.Add(time.Minute)
			h.report(replNode, repl, agentv1.ShardState_SHARD_STATE_STARTING, nil)
			h.rec.Pass()
			if got := h.rec.NotReady("sim-chat", e.Generation); (got != "") != tt.wantBound {
				t.Fatalf("NotReady after a minute = %q, want reported %v", got, tt.wantBound)
			}
		})
	}
}

// TestSlowStartOtherNodeUnbounded: a second replica of a measured build
// placed on another node (whose page cache and engine caches have not
// seen the build) is held to no bound.
func TestSlowStartOtherNodeUnbounded(t *testing.T) {
	m := chatModel()
	m.Scaling = spec.Scaling{Min: 1, Max: 2}
	h, reg, node, s := slowHarness(t, m)
	m.Scaling.Min = 2
	e, err := reg.Update(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	replNode, repl := newStart(t, h, m.Name, s.GetReplicaId())
	if replNode == node {
		t.Fatalf("the second replica landed on %s, the first one's node: the test needs another", node)
	}
	h.now = h.now.Add(time.Minute)
	h.report(replNode, repl, agentv1.ShardState_SHARD_STATE_STARTING, nil)
	h.rec.Pass()
	if got := h.rec.NotReady("sim-chat", e.Generation); got != "" {
		t.Fatalf("NotReady on a node that never ran the build = %q, want nothing", got)
	}
}

// TestSlowStartMeasuredPerNode: starts are kept per node, and a replica is
// held to the slowest over its nodes when every one has one. Two-node
// replicas on five nodes of one fabric: R1 on node1+node2 is ready in 5s,
// R2 on node3+node4 in 8s. R3, placed on node2+node3 (a set no replica ran
// on), is bounded by 8s: not reported at 17s (twice 8s, and 10s more than
// it, is 18s), reported at 19s. R4 on node1+node5 is never bounded: node5
// has not run the build.
func TestSlowStartMeasuredPerNode(t *testing.T) {
	m := twoNodeModel()
	m.Scaling = spec.Scaling{Min: 4, Max: 4}
	reg, err := models.New([]spec.Model{m}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := reg.Get(m.Name)
	now := time.Unix(1_700_000_000, 0)
	fl := fleet.New()
	fl.SetClock(func() time.Time { return now })
	for i := 1; i <= 5; i++ {
		id := fmt.Sprintf("node%d", i)
		fl.Connect(&agentv1.Hello{NodeId: id, Address: "127.0.0.1", Inventory: inventory("ib-a")}, id, nil, false, &recordingConn{})
	}
	// Placement is held (a replica expected back that never is): the
	// replicas are the test's own.
	rec := New(Options{Fleet: fl, Catalog: reg, Grace: time.Hour, Now: func() time.Time { return now },
		Expected: []string{"r-never"}, HoldPlacementUntil: now.Add(time.Hour)})
	add := func(id string, nodes ...string) {
		rep := &fleet.Replica{ID: id, Model: m.Name, Profile: e.Model.Profiles[0], Generation: e.ReplicaGeneration("x2"), Created: now, WarmStart: true}
		for i, n := range nodes {
			rep.Shards = append(rep.Shards, &fleet.Shard{ID: fmt.Sprintf("%s-%d", id, i), Rank: i, Node: n, GPUs: []int{0, 1, 2, 3}, Sent: true,
				State: agentv1.ShardState_SHARD_STATE_STARTING})
		}
		fl.Update(func(tx *fleet.Tx) { tx.Add(rep) })
	}
	ready := func(id string, nodes ...string) {
		for i, n := range nodes {
			fl.ApplyShardStatus(n, &agentv1.ShardStatus{ShardId: fmt.Sprintf("%s-%d", id, i), ReplicaId: id, Model: m.Name, Rank: int32(i),
				State: agentv1.ShardState_SHARD_STATE_READY, Endpoint: "127.0.0.1:9430"})
		}
	}
	add("R1", "node1", "node2")
	add("R2", "node3", "node4")
	rec.Pass()
	now = now.Add(5 * time.Second)
	ready("R1", "node1", "node2")
	rec.Pass()
	now = now.Add(3 * time.Second)
	ready("R2", "node3", "node4")
	rec.Pass()

	placed := now
	add("R3", "node2", "node3")
	add("R4", "node1", "node5")
	now = placed.Add(17 * time.Second)
	rec.Pass()
	if got := rec.NotReady(m.Name, e.Generation); got != "" {
		t.Fatalf("NotReady at 17s = %q, want nothing before 18s (the slower of its nodes' starts, 8s)", got)
	}
	now = placed.Add(19 * time.Second)
	rec.Pass()
	got := rec.NotReady(m.Name, e.Generation)
	if want := "replica R3 (profile x2, on node2, node3) not ready after 19s; replicas of profile x2 built the same way were ready there in at most 8s"; !strings.Contains(got, want) {
		t.Fatalf("NotReady at 19s = %q, lacks %q", got, want)
	}
	ready("R3", "node2", "node3")
	now = placed.Add(time.Minute)
	rec.Pass()
	if got := rec.NotReady(m.Name, e.Generation); got != "" {
		t.Fatalf("NotReady with R4 (node5 never ran the build) starting a minute = %q, want nothing", got)
	}
}

// TestSlowStartTogetherUnbounded: raising scaling.min places two replicas
// of a measured build at once on the node that measured it (5s): they
// start concurrently, sharing the node, and neither is held to the start
// measured alone, even a minute on. A replica placed there later, once
// they are ready (their shared minute now measured too), starts alone and
// is held to twice that minute.
func TestSlowStartTogetherUnbounded(t *testing.T) {
	m := chatModel()
	m.Scaling = spec.Scaling{Min: 1, Max: 4}
	h, reg, node, s := slowHarness(t, m)
	onlyOn(h, node)
	m.Scaling.Min = 3
	e, err := reg.Update(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	known := []string{s.GetReplicaId()}
	for range 2 {
		n, x := newStart(t, h, m.Name, known...)
		if n != node {
			t.Fatalf("a replica of the scale-up landed on %s, want %s", n, node)
		}
		known = append(known, x.GetReplicaId())
		h.report(n, x, agentv1.ShardState_SHARD_STATE_STARTING, nil)
	}
	h.now = h.now.Add(time.Minute)
	h.rec.Pass()
	if got := h.rec.NotReady("sim-chat", e.Generation); got != "" {
		t.Fatalf("NotReady of replicas placed together on one node = %q, want nothing", got)
	}

	for i, id := range known[1:] {
		for n, ss := range h.startsFor(m.Name) {
			for _, x := range ss {
				if x.GetReplicaId() == id {
					h.report(n, x, agentv1.ShardState_SHARD_STATE_READY, func(st *agentv1.ShardStatus) { st.Endpoint = fmt.Sprintf("127.0.0.1:%d", 9440+i) })
				}
			}
		}
	}
	h.rec.Pass()
	m.Scaling.Min = 4
	if e, err = reg.Update(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	alone, x := newStart(t, h, m.Name, known...)
	h.report(alone, x, agentv1.ShardState_SHARD_STATE_STARTING, nil)
	placed := h.now
	h.now = placed.Add(119 * time.Second)
	h.rec.Pass()
	if got := h.rec.NotReady("sim-chat", e.Generation); got != "" {
		t.Fatalf("NotReady of a replica placed alone after 119s = %q, want nothing before 120s (twice the shared start)", got)
	}
	h.now = placed.Add(121 * time.Second)
	h.rec.Pass()
	if got := h.rec.NotReady("sim-chat", e.Generation); !strings.Contains(got, "replica "+x.GetReplicaId()+" ") {
		t.Fatalf("NotReady of a replica placed alone after 121s = %q, want it named", got)
	}
}

// TestSlowStartOverlapAcrossPasses: a replica of a measured build (5s)
// placed alone on the node that measured it, and a second one placed
// there in a later pass while the first is still starting, start
// concurrently: neither is held to the start measured alone, a minute on,
// although they were placed in different passes. A healthy apply does not
// fail on a stall judged against a start that was not alone.
func TestSlowStartOverlapAcrossPasses(t *testing.T) {
	m := chatModel()
	m.Scaling = spec.Scaling{Min: 1, Max: 3}
	h, reg, node, s := slowHarness(t, m)
	onlyOn(h, node)
	known := []string{s.GetReplicaId()}
	var e models.Entry
	for _, min := range []int{2, 3} {
		m.Scaling.Min = min
		var err error
		if e, err = reg.Update(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		h.rec.Pass()
		n, x := newStart(t, h, m.Name, known...)
		if n != node {
			t.Fatalf("replica %d landed on %s, want %s", min, n, node)
		}
		known = append(known, x.GetReplicaId())
		h.report(n, x, agentv1.ShardState_SHARD_STATE_STARTING, nil)
		h.now = h.now.Add(3 * time.Second)
		h.rec.Pass()
	}
	h.now = h.now.Add(time.Minute)
	h.rec.Pass()
	if got := h.rec.NotReady("sim-chat", e.Generation); got != "" {
		t.Fatalf("NotReady of two starts overlapping across passes on one node = %q, want nothing", got)
	}
}
