package scheduler

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/llmgw/llmgw/spec"
	"pgregory.net/rapid"
)

var (
	genClasses = []string{"a100-80g", "h100-80g"}
	genFabrics = []string{"", "ib-a", "ib-b"}
	genEngines = []string{"vllm", "llamacpp"}
	genZones   = []string{"", "eu", "us"}
)

func genNode(t *rapid.T, id string) Node {
	n := Node{
		ID:              id,
		Ready:           rapid.IntRange(0, 9).Draw(t, id+".ready") < 9,
		MemoryBytes:     64 << 30,
		FreeMemoryBytes: uint64(64-rapid.IntRange(0, 64).Draw(t, id+".usedGB")) << 30,
		DiskFreeBytes:   uint64(200-rapid.IntRange(0, 200).Draw(t, id+".diskUsedGB")) << 30,
		Fabric:          rapid.SampledFrom(genFabrics).Draw(t, id+".fabric"),
		Engines:         map[string]bool{},
		UsedGPUs:        map[int]string{},
		Replicas:        map[string]int{"m": rapid.IntRange(0, 2).Draw(t, id+".replicas")},
	}
	if n.Fabric != "" {
		n.FabricRateGbps = float64(rapid.SampledFrom([]int{100, 200, 400}).Draw(t, id+".rate"))
	}
	for _, e := range genEngines {
		if rapid.IntRange(0, 4).Draw(t, id+".engine."+e) < 4 {
			n.Engines[e] = true
		}
	}
	if z := rapid.SampledFrom(genZones).Draw(t, id+".zone"); z != "" {
		n.Labels = map[string]string{"zone": z}
	}
	class := rapid.SampledFrom(genClasses).Draw(t, id+".class")
	mixed := rapid.IntRange(0, 4).Draw(t, id+".mixed") == 4
	for i := range 8 - rapid.IntRange(0, 8).Draw(t, id+".missingGPUs") {
		c := class
		if mixed {
			c = rapid.SampledFrom(genClasses).Draw(t, id+".gpuclass")
		}
		n.GPUs = append(n.GPUs, GPU{Index: i, Class: c, MemoryMiB: 81920})
		if rapid.IntRange(0, 3).Draw(t, id+".used") == 3 {
			n.UsedGPUs[i] = "held"
		}
	}
	if rapid.IntRange(0, 9).Draw(t, id+".stray") == 9 {
		n.UsedGPUs[42] = "stray" // a used index the inventory no longer lists
	}
	if rapid.Bool().Draw(t, id+".present") {
		n.ModelsPresent = []string{"src"}
	}
	return n
}

func genProfile(t *rapid.T, name string) spec.Profile {
	p := spec.Profile{
		Name:        name,
		Engine:      rapid.SampledFrom(genEngines).Draw(t, name+".engine"),
		TP:          rapid.IntRange(0, 4).Draw(t, name+".tp"),
		Nodes:       rapid.IntRange(0, 3).Draw(t, name+".nodes"),
		Priority:    rapid.IntRange(0, 2).Draw(t, name+".priority"),
		MinMemoryGB: rapid.IntRange(0, 16).Draw(t, name+".mem"),
		MinDiskGB:   rapid.IntRange(0, 50).Draw(t, name+".disk"),
	}
	if p.TP > 0 {
		p.GPUClass = rapid.SampledFrom(append([]string{""}, genClasses...)).Draw(t, name+".class")
	}
	if rapid.IntRange(0, 3).Draw(t, name+".labelled") == 3 {
		p.Labels = map[string]string{"zone": rapid.SampledFrom(genZones[1:]).Draw(t, name+".zone")}
	}
	return p
}

func genCase(t *rapid.T) (Snapshot, Demand) {
	var s Snapshot
	for i := range rapid.IntRange(0, 10).Draw(t, "nodes") {
		s.Nodes = append(s.Nodes, genNode(t, fmt.Sprintf("node%02d", i)))
	}
	d := Demand{Model: "m", Source: "src"}
	for i := range rapid.IntRange(1, 3).Draw(t, "profiles") {
		d.Profiles = append(d.Profiles, genProfile(t, fmt.Sprintf("p%d", i)))
	}
	// Shuffle so that nothing depends on the order nodes arrive in.
	s.Nodes = rapid.Permutation(s.Nodes).Draw(t, "order")
	return s, d
}

// oracleFree counts a node's free GPUs per class, written independently of
// the scheduler.
func oracleFree(n Node) map[string][]int {
	free := map[string][]int{}
	for _, g := range n.GPUs {
		if _, used := n.UsedGPUs[g.Index]; !used {
			free[g.Class] = append(free[g.Class], g.Index)
		}
	}
	return free
}

// oracleFeasible decides by brute force whether n can hold a shard of p
// (for the demand of source "src": min_disk_gb counts only where it is absent).
func oracleFeasible(n Node, p spec.Profile) bool {
	if !n.Ready || !n.Engines[p.Engine] {
		return false
	}
	if n.FreeMemoryBytes < uint64(p.MinMemoryGB)<<30 || (n.DiskFreeBytes < uint64(p.MinDiskGB)<<30 && !slices.Contains(n.ModelsPresent, "src")) {
		return false
	}
	for k, v := range p.Labels {
		if got, ok := n.Labels[k]; !ok || got != v {
			return false
		}
	}
	if max(p.Nodes, 1) > 1 && n.Fabric == "" {
		return false
	}
	if p.TP == 0 {
		return true
	}
	for class, idx := range oracleFree(n) {
		if (p.GPUClass == "" || class == p.GPUClass) && len(idx) >= p.TP {
			return true
		}
	}
	return false
}

// oracleInvalid says whether the catalog's rules refuse p, of those the
// generator can break: llama.cpp serves a replica from one node only.
func oracleInvalid(p spec.Profile) bool {
	return max(p.Nodes, 1) > 1 && p.Engine == "llamacpp"
}

// oracleCanPlace decides by brute force whether p can place on s: one
// feasible node, or for multi-node profiles a fabric with enough of them.
func oracleCanPlace(s Snapshot, p spec.Profile) bool {
	want := max(p.Nodes, 1)
	if oracleInvalid(p) {
		return false
	}
	perFabric := map[string]int{}
	for _, n := range s.Nodes {
		if !oracleFeasible(n, p) {
			continue
		}
		if want == 1 {
			return true
		}
		perFabric[n.Fabric]++
		if n.Fabric != "" && perFabric[n.Fabric] >= want {
			return true
		}
	}
	return false
}

func TestPlaceProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s, d := genCase(t)
		plan := Place(s, d)

		ordered := slices.Clone(d.Profiles)
		slices.SortStableFunc(ordered, func(a, b spec.Profile) int { return cmp.Compare(b.Priority, a.Priority) })
		var wantProfile spec.Profile
		for _, p := range ordered {
			if oracleCanPlace(s, p) {
				wantProfile = p
				break
			}
		}
		if plan.Profile.Name != wantProfile.Name || plan.Placed != (wantProfile.Name != "") {
			t.Fatalf("placed %v with %q; brute force says %q\n%s", plan.Placed, plan.Profile.Name, wantProfile.Name, plan.Explanation)
		}
		// The plan hands back the profile itself, not a copy of some fields.
		if plan.Placed && !reflect.DeepEqual(plan.Profile, wantProfile) {
			t.Fatalf("plan's profile %+v, the demand's %+v", plan.Profile, wantProfile)
		}

		// Every verdict agrees with the oracle, for every profile tried.
		byID := map[string]Node{}
		for _, n := range s.Nodes {
			byID[n.ID] = n
		}
		for i, pe := range plan.Explanation.Profiles {
			p := ordered[i]
			if pe.Profile != p.Name {
				t.Fatalf("profile %d explained is %q, want %q", i, pe.Profile, p.Name)
			}
			if len(pe.Nodes) != len(s.Nodes) {
				t.Fatalf("profile %s: %d verdicts for %d nodes", p.Name, len(pe.Nodes), len(s.Nodes))
			}
			for j, v := range pe.Nodes {
				if j > 0 && pe.Nodes[j-1].NodeID >= v.NodeID {
					t.Fatalf("verdicts not sorted by node id")
				}
				if want := !oracleInvalid(p) && oracleFeasible(byID[v.NodeID], p); v.Feasible != want {
					t.Fatalf("profile %s node %s: feasible %v (%q), oracle says %v", p.Name, v.NodeID, v.Feasible, v.Reason, want)
				}
				if !v.Feasible && v.Reason == "" {
					t.Fatalf("profile %s node %s refused without a reason", p.Name, v.NodeID)
				}
			}
		}
		if !plan.Placed {
			return
		}

		p := plan.Profile
		want := max(p.Nodes, 1)
		if len(plan.Shards) != want {
			t.Fatalf("%d shards, profile %s needs %d", len(plan.Shards), p.Name, want)
		}
		if want > 1 && plan.Fabric == "" {
			t.Fatalf("multi-node replica placed with no fabric")
		}
		seen := map[string]bool{}
		for rank, sh := range plan.Shards {
			n, ok := byID[sh.NodeID]
			if !ok || sh.Rank != rank || seen[sh.NodeID] {
				t.Fatalf("shard %d: bad node %q or rank %d (seen %v)", rank, sh.NodeID, sh.Rank, seen[sh.NodeID])
			}
			seen[sh.NodeID] = true
			if n.Fabric != plan.Fabric {
				t.Fatalf("shard %d on %s in fabric %q, replica in %q", rank, n.ID, n.Fabric, plan.Fabric)
			}
			if !oracleFeasible(n, p) {
				t.Fatalf("shard %d on infeasible node %s", rank, n.ID)
			}
			if len(sh.GPUIndices) != p.TP {
				t.Fatalf("shard %d holds %d GPUs, needs %d", rank, len(sh.GPUIndices), p.TP)
			}
			free := oracleFree(n)
			var class string
			for k, g := range sh.GPUIndices {
				c := ""
				for fc, idx := range free {
					if slices.Contains(idx, g) {
						c = fc
					}
				}
				if c == "" {
					t.Fatalf("shard %d on %s: gpu %d is not free", rank, n.ID, g)
				}
				if (p.GPUClass != "" && c != p.GPUClass) || (k > 0 && c != class) {
					t.Fatalf("shard %d on %s: gpu %d is %s; profile wants %q, shard has %q", rank, n.ID, g, c, p.GPUClass, class)
				}
				if slices.Contains(sh.GPUIndices[:k], g) {
					t.Fatalf("shard %d on %s: gpu %d twice", rank, n.ID, g)
				}
				class = c
			}
			if p.GPUClass != "" && !reflect.DeepEqual(sh.GPUIndices, free[p.GPUClass][:p.TP]) {
				t.Fatalf("shard %d on %s took %v, lowest free are %v", rank, n.ID, sh.GPUIndices, free[p.GPUClass])
			}
		}
		if err := Verify(s, d, plan); err != nil {
			t.Fatalf("Verify: %v", err)
		}

		// The answer does not depend on the order nodes arrive in.
		again := Place(Snapshot{Nodes: rapid.Permutation(s.Nodes).Draw(t, "reorder")}, d)
		if !reflect.DeepEqual(again, plan) {
			t.Fatalf("placement depends on node order:\n%+v\n%+v", plan, again)
		}
	})
}

// TestAssumeNeverDoubleBooks places replicas one after another, assuming
// each plan, and checks every plan against the fleet it was made for.
func TestAssumeNeverDoubleBooks(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s, d := genCase(t)
		for i := range 12 {
			plan := Place(s, d)
			if !plan.Placed {
				return
			}
			if err := Verify(s, d, plan); err != nil {
				t.Fatalf("replica %d: %v", i, err)
			}
			s = Assume(s, d, plan)
		}
	})
}
