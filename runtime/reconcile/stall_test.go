package reconcile

import (
	"context"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/spec"
)

// readyAll reports every shard started so far ready.
func (h *harness) readyAll() {
	for node, c := range h.conns {
		for _, s := range c.starts() {
			h.report(node, s, agentv1.ShardState_SHARD_STATE_READY, func(st *agentv1.ShardStatus) {
				if st.GetRank() == 0 {
					st.Endpoint = "127.0.0.1:9" + s.GetShardId()[len(s.GetShardId())-1:]
				}
			})
		}
	}
}

func (h *harness) replicaOf(t *testing.T, model string) string {
	t.Helper()
	for _, r := range h.fleet.Replicas() {
		if r.Model == model && r.Live() {
			return r.ID
		}
	}
	t.Fatalf("no live replica of %s", model)
	return ""
}

// TestDrainCheckNamesReplicaThatCannotMove is issue 18's dev cluster:
// sim-2node spans node01 and node02, the only nodes of fabric ib-a, so a
// drain of either cannot finish; the dry run says so naming the replica
// and the scheduler's reason, while sim-chat, which fits elsewhere, is not
// listed.
func TestDrainCheckNamesReplicaThatCannotMove(t *testing.T) {
	h := newHarness(t, twoNodeModel(), chatModel())
	h.rec.Pass()
	h.readyAll()
	h.rec.Pass()
	rep := h.replicaOf(t, "sim-2node")
	for _, node := range []string{"node01", "node02"} {
		blocked, found := h.rec.DrainCheck(node)
		if !found || len(blocked) != 1 {
			t.Fatalf("DrainCheck(%s) = %q, %v; want one replica that cannot move", node, blocked, found)
		}
		for _, want := range []string{"replica " + rep + " of model sim-2node (on node01, node02) cannot move", "needs 2 nodes in one fabric", node + ": not ready: draining", "node03: no fabric"} {
			if !strings.Contains(blocked[0], want) {
				t.Errorf("DrainCheck(%s) = %q, want it to contain %q", node, blocked[0], want)
			}
		}
	}
	if blocked, found := h.rec.DrainCheck("node03"); !found || len(blocked) != 0 {
		t.Errorf("DrainCheck(node03) = %q, %v; want nothing blocked (sim-chat fits on node01 or node02)", blocked, found)
	}
	if _, found := h.rec.DrainCheck("node09"); found {
		t.Error("DrainCheck(node09) found a node the fleet does not have")
	}
}

// TestDrainCheckLetsRemovedModelsGo: a replica whose model left the
// catalog (the whole configuration is being destroyed) stops with the
// drain, so it blocks nothing.
func TestDrainCheckLetsRemovedModelsGo(t *testing.T) {
	h := newHarness(t)
	if _, err := h.rec.opts.Catalog.Create(context.Background(), twoNodeModel()); err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	h.readyAll()
	h.rec.Pass()
	if blocked, _ := h.rec.DrainCheck("node01"); len(blocked) != 1 {
		t.Fatalf("DrainCheck(node01) = %q, want sim-2node blocked", blocked)
	}
	if err := h.rec.opts.Catalog.Delete(context.Background(), "sim-2node"); err != nil {
		t.Fatal(err)
	}
	if blocked, found := h.rec.DrainCheck("node01"); !found || len(blocked) != 0 {
		t.Fatalf("DrainCheck(node01) after deleting the model = %q, %v; want nothing blocked", blocked, found)
	}
}

// TestDrainBlockedReported: a node drained anyway (forced) whose replica
// cannot move reports why once the stall lasted StallAfter, and stops
// reporting it when the drain is cancelled.
func TestDrainBlockedReported(t *testing.T) {
	h := newHarness(t, twoNodeModel())
	h.rec.Pass()
	h.readyAll()
	h.rec.Pass()
	rep := h.replicaOf(t, "sim-2node")
	h.fleet.SetDraining("node02", true)
	h.rec.Pass()
	if got := h.rec.DrainBlocked("node02"); got != "" {
		t.Fatalf("DrainBlocked at once = %q, want nothing before StallAfter", got)
	}
	h.now = h.now.Add(DefaultStallAfter)
	h.rec.Pass()
	got := h.rec.DrainBlocked("node02")
	for _, want := range []string{"replica " + rep + " of model sim-2node", "cannot move", "node02: not ready: draining"} {
		if !strings.Contains(got, want) {
			t.Errorf("DrainBlocked = %q, want it to contain %q", got, want)
		}
	}
	if got := h.rec.DrainBlocked("node03"); got != "" {
		t.Errorf("DrainBlocked(node03) = %q, want nothing", got)
	}
	h.fleet.SetDraining("node02", false)
	h.rec.Pass()
	if got := h.rec.DrainBlocked("node02"); got != "" {
		t.Errorf("DrainBlocked after cancel = %q, want nothing", got)
	}
}

// TestStalledRollout is issue 18's tp 1 → 9: the new generation cannot be
// placed while the old replica serves. Stalled says so, naming the
// generation, why, and the replica that keeps serving, once that lasted
// StallAfter; a replica stopping elsewhere (room may appear) restarts the
// clock.
func TestStalledRollout(t *testing.T) {
	h := newHarness(t)
	m := chatModel()
	if _, err := h.rec.opts.Catalog.Create(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	h.readyAll()
	h.rec.Pass()
	old := h.replicaOf(t, "sim-chat")
	m.Profiles[0].TP = 9
	e, err := h.rec.opts.Catalog.Update(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	if got := h.rec.Stalled("sim-chat", e.Generation); got != "" {
		t.Fatalf("Stalled at once = %q, want nothing before StallAfter", got)
	}
	h.now = h.now.Add(DefaultStallAfter - time.Second)
	h.rec.Pass()
	if got := h.rec.Stalled("sim-chat", e.Generation); got != "" {
		t.Fatalf("Stalled after %s = %q, want nothing yet", DefaultStallAfter-time.Second, got)
	}
	h.now = h.now.Add(time.Second)
	h.rec.Pass()
	got := h.rec.Stalled("sim-chat", e.Generation)
	for _, want := range []string{"generation " + e.Generation + " cannot be placed", "no node can hold profile h100", "replica " + old + " (stale, profile h100, on "} {
		if !strings.Contains(got, want) {
			t.Errorf("Stalled = %q, want it to contain %q", got, want)
		}
	}
	// Back to what fits: the new generation is not reported stalled, even
	// before the reconciler has tried it (a rollout's first poll), and
	// once it has, the rollout proceeds.
	m.Profiles[0].TP = 2
	e2, err := h.rec.opts.Catalog.Update(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	if got := h.rec.Stalled("sim-chat", e2.Generation); got != "" {
		t.Errorf("Stalled(new generation) before a pass = %q, want nothing: the stall was the old generation's", got)
	}
	h.rec.Pass()
	if got := h.rec.Stalled("sim-chat", e2.Generation); got != "" {
		t.Errorf("Stalled after a fitting update = %q, want nothing", got)
	}
}

// TestStallClockRestartsWhileRoomFrees: while a replica is stopping (its
// GPUs come back when its engine exits) the stall is not reported.
func TestStallClockRestartsWhileRoomFrees(t *testing.T) {
	big := spec.Model{Name: "big", Source: "sim://big", Scaling: spec.Scaling{Min: 1, Max: 1},
		Profiles: []spec.Profile{{Name: "x8", Engine: "sim", GPUClass: "h100-80g", TP: 8}}}
	h := newHarness(t)
	ctx := context.Background()
	if _, err := h.rec.opts.Catalog.Create(ctx, big); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c"} {
		m := big
		m.Name, m.Source = name, "sim://"+name
		m.Profiles = []spec.Profile{{Name: "x8", Engine: "sim", GPUClass: "h100-80g", TP: 8}}
		if _, err := h.rec.opts.Catalog.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	h.rec.Pass()
	h.readyAll()
	h.rec.Pass()
	stalled := ""
	for _, name := range []string{"a", "b", "c", "big"} {
		if _, ok := h.rec.stalls[name]; ok {
			stalled = name
		}
	}
	if stalled == "" {
		t.Fatal("four 8-GPU models on three 8-GPU nodes: one should not place")
	}
	// Another model leaves: its replica stops (its agent has not reported
	// the engine gone yet) and room may appear.
	var other string
	for _, name := range []string{"a", "b", "c", "big"} {
		if name != stalled {
			other = name
			break
		}
	}
	if err := h.rec.opts.Catalog.Delete(ctx, other); err != nil {
		t.Fatal(err)
	}
	gen := h.rec.stalls[stalled].generation
	h.now = h.now.Add(DefaultStallAfter)
	h.rec.Pass()
	if got := h.rec.Stalled(stalled, gen); got != "" {
		t.Errorf("Stalled(%s) while %s's replica stops = %q, want nothing", stalled, other, got)
	}
	// Room freeing elsewhere puts the report off only so long: a fleet
	// where something is always stopping still reports the stall.
	for range 2 * stallPatience {
		h.now = h.now.Add(DefaultStallAfter / 2)
		h.rec.Pass()
	}
	if !h.rec.freeing {
		t.Fatalf("%s's replica no longer stops; the test needs it stopping", other)
	}
	if got := h.rec.Stalled(stalled, gen); !strings.Contains(got, "cannot be placed") && !strings.Contains(got, "no node can hold") {
		t.Errorf("Stalled(%s) after %s of room freeing elsewhere = %q, want the stall reported", stalled, stallPatience*DefaultStallAfter, got)
	}
}
