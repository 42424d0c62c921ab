package reconcile

import (
	"testing"

	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/spec"
)

// TestPlanRolloutNamesEachReplacement: two replicas of tp 8 fill two of
// three 8-GPU nodes. The dry run of an args edit places the first
// replacement on the free node, then, with the replica it replaces
// stopped, the second on the node that one freed; a limit of 1 dry-runs
// one and counts the other; an edit that rolls nothing plans nothing, and
// a scaling.min of 3 adds one replica, on the free node.
func TestPlanRolloutNamesEachReplacement(t *testing.T) {
	m := chatModel()
	m.Scaling = spec.Scaling{Min: 2, Max: 2}
	m.Profiles[0].TP = 8
	h := newRouted(t)
	h.add(t, m)
	h.rec.Pass()
	h.readyAll("sim-chat")
	h.rec.Pass()
	live := h.live("sim-chat")
	if len(live) != 2 {
		t.Fatalf("%d live replicas, want 2", len(live))
	}
	busy := map[string]bool{live[0].Shards[0].Node: true, live[1].Shards[0].Node: true}
	free := ""
	for _, n := range []string{"node01", "node02", "node03"} {
		if !busy[n] {
			free = n
		}
	}

	edited := m
	edited.Profiles = []spec.Profile{m.Profiles[0]}
	edited.Profiles[0].Args = []string{"--x"}
	edited.Normalize()
	planned, more := h.rec.PlanRollout(edited, 8)
	if len(planned) != 2 || more != 0 {
		t.Fatalf("PlanRollout = %+v, %d more; want 2 replacements", planned, more)
	}
	for _, p := range planned {
		if !p.Plan.Placed {
			t.Fatalf("replacement of %s did not place: %s", p.Replaces, p.Plan.Explanation.String())
		}
	}
	byReplaced := map[string]string{planned[0].Replaces: planned[0].Plan.Shards[0].NodeID, planned[1].Replaces: planned[1].Plan.Shards[0].NodeID}
	if planned[0].Plan.Shards[0].NodeID != free {
		t.Errorf("first replacement on %s, want the free node %s", planned[0].Plan.Shards[0].NodeID, free)
	}
	// The second goes where the first replaced replica ran.
	if got, want := planned[1].Plan.Shards[0].NodeID, nodeOf(t, live, planned[0].Replaces); got != want {
		t.Errorf("second replacement on %s, want %s, freed by %s (%v)", got, want, planned[0].Replaces, byReplaced)
	}

	planned, more = h.rec.PlanRollout(edited, 1)
	if len(planned) != 1 || more != 1 {
		t.Errorf("PlanRollout with limit 1 = %d planned, %d more; want 1 and 1", len(planned), more)
	}

	priced := m
	priced.Pricing = &spec.Pricing{PromptPer1K: 1}
	priced.Normalize()
	if planned, more := h.rec.PlanRollout(priced, 8); len(planned) != 0 || more != 0 {
		t.Errorf("PlanRollout of a pricing edit = %+v, %d more; want nothing", planned, more)
	}
	bigger := priced
	bigger.Scaling = spec.Scaling{Min: 3, Max: 3}
	planned, more = h.rec.PlanRollout(bigger, 8)
	if len(planned) != 1 || planned[0].Replaces != "" || more != 0 {
		t.Fatalf("PlanRollout of scaling.min 3 = %+v, %d more; want one added replica", planned, more)
	}
	if !planned[0].Plan.Placed || planned[0].Plan.Shards[0].NodeID != free {
		t.Errorf("the added replica: placed %v on %v, want the free node %s", planned[0].Plan.Placed, planned[0].Plan.Shards, free)
	}
}

func nodeOf(t *testing.T, reps []fleet.Replica, id string) string {
	t.Helper()
	for _, r := range reps {
		if r.ID == id {
			return r.Shards[0].Node
		}
	}
	t.Fatalf("no replica %s", id)
	return ""
}
