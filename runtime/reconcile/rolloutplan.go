package reconcile

import (
	"slices"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/models"
	"github.com/llmgw/llmgw/runtime/scheduler"
	"github.com/llmgw/llmgw/spec"
)

// PlannedReplica is one replica a dry run of a definition places: the
// running replica it replaces ("" for one that scaling.min adds) and the
// scheduler's plan for it.
type PlannedReplica struct {
	Replaces string
	Plan     scheduler.Plan
}

// PlanRollout dry-runs what the reconciler would place if the catalog held
// m, on the fleet as it is now. first is the scheduler's plan for one
// replica of m with every node's verdict (PlanOne). planned is, in order,
// first the replicas missing to scaling.min (at once), then one
// replacement for each running replica m makes stale (or that runs on a
// draining node), in the order a rollout takes them, each placed while the
// replica it replaces still holds its GPUs, which are then freed for the
// next. It stops at the first replica that does not place (returned, with
// the scheduler's explanation) and after limit replicas; more is how many
// further replicas the change needs that were not dry-run. The replicas
// kept are between scaling.min and scaling.max, as many as run now.
//
// The fleet is read once, under its read lock; the dry run works on that
// copy with one scheduler view it advances replica by replica.
func (r *Reconciler) PlanRollout(m spec.Model, limit int) (first scheduler.Plan, planned []PlannedReplica, more int) {
	e := models.NewEntry(m, "", 0)
	var snap scheduler.Snapshot
	var todo []string
	held := map[string][]scheduler.ShardPlacement{} // what each replaced replica holds
	r.opts.Fleet.Read(func(tx *fleet.Tx) {
		snap = snapshot(tx.Nodes(), tx.UsedGPUs(), tx.Replicas())
		var current, old []*fleet.Replica
		for _, rep := range tx.ModelReplicas(m.Name) {
			if !rep.Live() {
				continue
			}
			if isCurrent(tx, e, rep) {
				current = append(current, rep)
			} else {
				old = append(old, rep)
			}
		}
		rolloutOrder(tx, old)
		want := max(m.Scaling.Min, min(len(current)+len(old), m.Scaling.Max))
		missing := max(want-len(current)-len(old), 0)
		replace := min(len(old), max(want-len(current)-missing, 0))
		todo = make([]string, 0, missing+replace)
		for range missing {
			todo = append(todo, "")
		}
		for _, rep := range old[:replace] {
			todo = append(todo, rep.ID)
			held[rep.ID] = releasedBy(rep)
		}
	})
	d := demand(m)
	first = scheduler.Place(snap, d)
	if len(todo) == 0 {
		return first, nil, 0
	}
	view := scheduler.NewFleet(snap)
	for i, replaces := range todo {
		if i == limit {
			return first, planned, len(todo) - i
		}
		plan := first // the same decision the view makes, with every node's verdict
		if i > 0 {
			plan = view.Place(d)
		}
		planned = append(planned, PlannedReplica{Replaces: replaces, Plan: plan})
		if !plan.Placed {
			return first, planned, len(todo) - i - 1
		}
		// The new replica holds its GPUs; the one it replaces stops once
		// it is ready, freeing its own.
		view.Take(d, plan)
		if replaces != "" {
			view.Release(m.Name, held[replaces])
		}
	}
	return first, planned, 0
}

// releasedBy is what a replaced replica gives back once it is gone, as
// the snapshot counts it: every shard's node counts one replica of the
// model fewer (snapshot counts each shard of a live replica), and each
// shard not stopped frees its GPUs. A stopped shard's GPUs were never
// counted used (UsedGPUs skips it) and may be another replica's by now, so
// it frees none.
func releasedBy(rep *fleet.Replica) []scheduler.ShardPlacement {
	out := make([]scheduler.ShardPlacement, 0, len(rep.Shards))
	for _, sh := range rep.Shards {
		p := scheduler.ShardPlacement{Rank: sh.Rank, NodeID: sh.Node}
		if sh.State != agentv1.ShardState_SHARD_STATE_STOPPED {
			p.GPUIndices = slices.Clone(sh.GPUs)
		}
		out = append(out, p)
	}
	return out
}
