package reconcile

import (
	"slices"
	"testing"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/models"
)

// TestIsCurrent: a live replica counts as its model's current generation
// when it is built as the model asks and no node of its is draining or
// silent; a stale one, and a current one on a draining or a silent node,
// are old. RequestRollout names the live stale replicas of its model only,
// and Capacity counts its live replicas of any generation, both read from
// the fleet's index by model.
func TestIsCurrent(t *testing.T) {
	h := newHarness(t)
	m := chatModel()
	m.Normalize()
	e := models.NewEntry(m, models.OriginAPI, 1)
	other := twoNodeModel()
	other.Normalize()
	add := func(tx *fleet.Tx, id, model, generation, node string, state fleet.ReplicaState) *fleet.Replica {
		rep := &fleet.Replica{ID: id, Model: model, Profile: m.Profiles[0], Generation: generation, State: state,
			Shards: []*fleet.Shard{{ID: id + "-0", Node: node, State: agentv1.ShardState_SHARD_STATE_READY}}}
		tx.Add(rep)
		rep.State = state
		return rep
	}
	gen := e.ReplicaGeneration("h100")
	h.fleet.Update(func(tx *fleet.Tx) {
		tx.Node("node02").Draining = true
		tx.Node("node03").Silent = true
		for _, tt := range []struct {
			rep  *fleet.Replica
			want bool
		}{
			{add(tx, "r-current", m.Name, gen, "node01", fleet.ReplicaReady), true},
			{add(tx, "r-stale", m.Name, "earlier", "node01", fleet.ReplicaReady), false},
			{add(tx, "r-draining", m.Name, gen, "node02", fleet.ReplicaReady), false},
			{add(tx, "r-silent", m.Name, gen, "node03", fleet.ReplicaReady), false},
		} {
			if got := isCurrent(tx, e, tt.rep); got != tt.want {
				t.Errorf("isCurrent(%s) = %v, want %v", tt.rep.ID, got, tt.want)
			}
		}
		add(tx, "r-stale-stopping", m.Name, "earlier", "node01", fleet.ReplicaStopping)
		add(tx, "r-other-stale", other.Name, "earlier", "node01", fleet.ReplicaReady)
	})
	if got := h.rec.RequestRollout(e); !slices.Equal(got, []string{"r-stale"}) {
		t.Errorf("RequestRollout = %v, want [r-stale]", got)
	}
	if running, _ := h.rec.Capacity(m, 8); running != 4 {
		t.Errorf("Capacity: running %d, want 4 (the live replicas of %s)", running, m.Name)
	}
}
