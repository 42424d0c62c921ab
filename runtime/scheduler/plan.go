package scheduler

import (
	"fmt"
	"maps"
	"slices"

	"github.com/llmgw/llmgw/spec"
)

// Verify re-checks a plan against a newer snapshot, as Nomad's plan applier
// does before committing: the plan's profile is d's profile of that name,
// there is one shard per node of the profile on distinct nodes, every node
// still passes the default checkers, every shard holds TP distinct free GPUs of the class,
// and a multi-node replica stays inside the plan's one fabric. The error
// names the first shard, node or GPU that no longer fits.
func Verify(s Snapshot, d Demand, plan Plan) error {
	if !plan.Placed {
		return fmt.Errorf("verifying plan for model %s: nothing was placed", d.Model)
	}
	p := plan.Profile
	i := slices.IndexFunc(d.Profiles, func(q spec.Profile) bool { return q.Name == p.Name })
	if i < 0 {
		return fmt.Errorf("verifying plan for model %s: model has no profile %q", d.Model, p.Name)
	}
	if !d.Profiles[i].Equal(p) {
		return fmt.Errorf("verifying plan for model %s: profile %s is not the model's profile of that name", d.Model, p.Name)
	}
	if problem := validateProfile(p); problem != "" {
		return fmt.Errorf("verifying plan for model %s: profile %s is invalid: %s", d.Model, p.Name, problem)
	}
	if len(plan.Shards) != p.Shards() {
		return fmt.Errorf("verifying plan for model %s: %d shards, profile %s needs %d", d.Model, len(plan.Shards), p.Name, p.Shards())
	}
	byID := make(map[string]*Node, len(s.Nodes))
	for i := range s.Nodes {
		byID[s.Nodes[i].ID] = &s.Nodes[i]
	}
	checkers := DefaultCheckers()
	seen := make(map[string]bool, len(plan.Shards))
	for rank, sh := range plan.Shards {
		where := fmt.Sprintf("verifying plan for model %s: shard %d on node %s", d.Model, rank, sh.NodeID)
		if sh.Rank != rank {
			return fmt.Errorf("%s: rank is %d, want %d", where, sh.Rank, rank)
		}
		if seen[sh.NodeID] {
			return fmt.Errorf("%s: node already holds another shard of this replica", where)
		}
		seen[sh.NodeID] = true
		n := byID[sh.NodeID]
		if n == nil {
			return fmt.Errorf("%s: node is not in the fleet", where)
		}
		if p.Shards() > 1 && n.Fabric != plan.Fabric {
			return fmt.Errorf("%s: node is in fabric %q, the replica in %q", where, n.Fabric, plan.Fabric)
		}
		for _, c := range checkers {
			// Free GPUs are checked below against the shard's own indices.
			if _, free := c.(FreeGPUsChecker); free {
				continue
			}
			ok, reason := c.Check(n, p)
			if dc, isDC := c.(DemandChecker); isDC {
				ok, reason = dc.CheckDemand(n, p, d)
			}
			if !ok {
				return fmt.Errorf("%s: %s", where, reason)
			}
		}
		if len(sh.GPUIndices) != max(p.TP, 0) {
			return fmt.Errorf("%s: holds %d GPUs, profile %s needs %d", where, len(sh.GPUIndices), p.Name, p.TP)
		}
		free := freeByClass(n)
		taken := make(map[int]bool, len(sh.GPUIndices))
		var class string
		for _, g := range sh.GPUIndices {
			if taken[g] {
				return fmt.Errorf("%s: gpu %d listed twice", where, g)
			}
			taken[g] = true
			c, ok := classOfFree(free, g)
			if !ok {
				if holder, used := n.UsedGPUs[g]; used {
					return fmt.Errorf("%s: gpu %d is held by shard %s", where, g, holder)
				}
				return fmt.Errorf("%s: node has no gpu %d", where, g)
			}
			if p.GPUClass != "" && c != p.GPUClass {
				return fmt.Errorf("%s: gpu %d is %s, profile %s needs %s", where, g, c, p.Name, p.GPUClass)
			}
			if class != "" && c != class {
				return fmt.Errorf("%s: gpu %d is %s, the shard's other GPUs %s", where, g, c, class)
			}
			class = c
		}
	}
	return nil
}

// classOfFree returns the class of GPU g when it is free.
func classOfFree(free map[string][]int, g int) (string, bool) {
	for class, idx := range free {
		if slices.Contains(idx, g) {
			return class, true
		}
	}
	return "", false
}

// Assume returns a copy of s as it will be once plan runs, so that several
// replicas can be placed in one pass without double-booking: each shard's
// GPUs become used (held by "<model>/<profile>/<rank>"), MinMemoryGB leaves
// the node's free memory, and the node counts one more replica of the model.
// Disk is left alone: replicas on one node share one copy of the weights.
// s itself is not modified.
func Assume(s Snapshot, d Demand, plan Plan) Snapshot {
	out := Snapshot{Nodes: slices.Clone(s.Nodes)}
	if !plan.Placed {
		return out
	}
	p := plan.Profile
	for _, sh := range plan.Shards {
		i := slices.IndexFunc(out.Nodes, func(n Node) bool { return n.ID == sh.NodeID })
		if i < 0 {
			continue
		}
		n := &out.Nodes[i]
		n.UsedGPUs = maps.Clone(n.UsedGPUs)
		if n.UsedGPUs == nil {
			n.UsedGPUs = make(map[int]string, len(sh.GPUIndices))
		}
		for _, g := range sh.GPUIndices {
			n.UsedGPUs[g] = fmt.Sprintf("%s/%s/%d", d.Model, p.Name, sh.Rank)
		}
		need := gb(p.MinMemoryGB)
		if n.FreeMemoryBytes > need {
			n.FreeMemoryBytes -= need
		} else {
			n.FreeMemoryBytes = 0
		}
		n.Replicas = maps.Clone(n.Replicas)
		if n.Replicas == nil {
			n.Replicas = make(map[string]int, 1)
		}
		n.Replicas[d.Model]++
	}
	return out
}
