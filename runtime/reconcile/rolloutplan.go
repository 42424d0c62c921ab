package reconcile

import (
	"slices"
	"strconv"

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
// m, on the fleet as it is now: first the replicas missing to scaling.min
// (at once), then one replacement for each running replica m makes stale
// (or that runs on a draining node), in the order a rollout takes them,
// each placed while the replica it replaces still holds its GPUs, which are
// then freed for the next. It stops at the first replica that does not
// place (returned, with the scheduler's explanation) and after limit
// replicas; more is how many further replicas the change needs that were
// not dry-run. The replicas kept are between scaling.min and scaling.max,
// as many as run now.
func (r *Reconciler) PlanRollout(m spec.Model, limit int) (planned []PlannedReplica, more int) {
	e := models.NewEntry(m, "", 0)
	r.opts.Fleet.Update(func(tx *fleet.Tx) {
		var current, old []*fleet.Replica
		for _, rep := range tx.Replicas() {
			if rep.Model != m.Name || !rep.Live() {
				continue
			}
			if !e.Stale(rep.Profile.Name, rep.Generation) && !onDrainingNode(tx, rep) {
				current = append(current, rep)
			} else {
				old = append(old, rep)
			}
		}
		rolloutOrder(tx, old)
		want := max(m.Scaling.Min, min(len(current)+len(old), m.Scaling.Max))
		missing := max(want-len(current)-len(old), 0)
		replace := min(len(old), max(want-len(current)-missing, 0))
		todo := make([]string, 0, missing+replace)
		for range missing {
			todo = append(todo, "")
		}
		for _, rep := range old[:replace] {
			todo = append(todo, rep.ID)
		}

		used := tx.UsedGPUs()
		reps := slices.Clone(tx.Replicas())
		for i, replaces := range todo {
			if i == limit {
				more = len(todo) - i
				return
			}
			plan := scheduler.Place(snapshot(tx.Nodes(), used, reps), demand(m))
			planned = append(planned, PlannedReplica{Replaces: replaces, Plan: plan})
			if !plan.Placed {
				more = len(todo) - i - 1
				return
			}
			// The new replica holds its GPUs; the one it replaces
			// stops once it is ready, freeing its own.
			added := &fleet.Replica{ID: "planned-" + strconv.Itoa(i), Model: m.Name, State: fleet.ReplicaStarting}
			for _, sh := range plan.Shards {
				if used[sh.NodeID] == nil {
					used[sh.NodeID] = map[int]string{}
				}
				for _, g := range sh.GPUIndices {
					used[sh.NodeID][g] = added.ID
				}
				added.Shards = append(added.Shards, &fleet.Shard{Node: sh.NodeID, GPUs: sh.GPUIndices})
			}
			reps = append(reps, added)
			if replaces == "" {
				continue
			}
			j := slices.IndexFunc(reps, func(rep *fleet.Replica) bool { return rep.ID == replaces })
			for _, sh := range reps[j].Shards {
				for _, g := range sh.GPUs {
					delete(used[sh.Node], g)
				}
			}
			reps = slices.Delete(reps, j, j+1)
		}
	})
	return planned, more
}
