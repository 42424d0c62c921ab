package reconcile

import (
	"context"
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
