package scheduler

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/llmgw/llmgw/spec"
	"pgregory.net/rapid"
)

// TestFleetMatchesPlace runs one pass of placements on a random fleet twice:
// through Fleet (candidate groups, state updated in place) and through the
// reference, Place and Assume on a Snapshot (every node checked and scored,
// the snapshot copied). They must choose the same profiles, nodes and GPUs,
// explain alike, and leave the same fleet behind.
func TestFleetMatchesPlace(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var s Snapshot
		for i := range rapid.IntRange(0, 30).Draw(t, "nodes") {
			s.Nodes = append(s.Nodes, genNode(t, fmt.Sprintf("node%02d", i)))
		}
		s.Nodes = rapid.Permutation(s.Nodes).Draw(t, "order")
		var ds []Demand
		for i := range rapid.IntRange(1, 4).Draw(t, "models") {
			d := Demand{Model: rapid.SampledFrom([]string{"m", "n", "o"}).Draw(t, fmt.Sprintf("d%d.model", i)),
				Source: rapid.SampledFrom([]string{"src", "", "other"}).Draw(t, fmt.Sprintf("d%d.source", i))}
			for j := range rapid.IntRange(1, 3).Draw(t, fmt.Sprintf("d%d.profiles", i)) {
				d.Profiles = append(d.Profiles, genProfile(t, fmt.Sprintf("d%d.p%d", i, j)))
			}
			ds = append(ds, d)
		}
		f := NewFleet(s)
		for step := range rapid.IntRange(1, 20).Draw(t, "steps") {
			d := ds[rapid.IntRange(0, len(ds)-1).Draw(t, fmt.Sprintf("step%d", step))]
			if !reflect.DeepEqual(f.Explain(d), Explain(s, d)) {
				t.Fatalf("step %d: explanations differ:\nfleet:\n%s\nreference:\n%s", step, f.Explain(d), Explain(s, d))
			}
			want, got := Place(s, d), f.Place(d)
			if got.Placed != want.Placed || got.Profile.Name != want.Profile.Name || got.Fabric != want.Fabric || !reflect.DeepEqual(got.Shards, want.Shards) {
				t.Fatalf("step %d: fleet placed %v %s %v in %q, reference %v %s %v in %q\n%s", step,
					got.Placed, got.Profile.Name, got.Shards, got.Fabric, want.Placed, want.Profile.Name, want.Shards, want.Fabric, want.Explanation)
			}
			if !want.Placed && !reflect.DeepEqual(got.Explanation, want.Explanation) {
				t.Fatalf("step %d: not placed, explanations differ", step)
			}
			if want.Placed {
				last := want.Explanation.Profiles[len(want.Explanation.Profiles)-1]
				if gl := got.Explanation.Profiles[len(got.Explanation.Profiles)-1]; gl.Summary != last.Summary || len(got.Explanation.Profiles) != len(want.Explanation.Profiles) {
					t.Fatalf("step %d: summary %q after %d profiles, reference %q after %d", step, gl.Summary, len(got.Explanation.Profiles), last.Summary, len(want.Explanation.Profiles))
				}
			}
			s = Assume(s, d, want)
			f.Assume(d, got)
		}
		ref := slices.Clone(s.Nodes)
		slices.SortStableFunc(ref, func(a, b Node) int { return cmp.Compare(a.ID, b.ID) })
		if got := f.Snapshot().Nodes; !reflect.DeepEqual(got, ref) {
			t.Fatalf("fleets differ after the pass:\nfleet %+v\nreference %+v", got, ref)
		}
	})
}

// TestFleetLeavesSnapshotAlone checks that a Fleet's Assume changes none of
// the maps of the Snapshot it was built from, nor of one it handed out.
func TestFleetLeavesSnapshotAlone(t *testing.T) {
	s := Snapshot{Nodes: []Node{node("a", "h100-80g", 4), node("b", "h100-80g", 4)}}
	d := Demand{Model: "m", Profiles: []spec.Profile{gpuProfile("tp2", "h100-80g", 2)}}
	f := NewFleet(s)
	f.Assume(d, f.Place(d))
	mid := f.Snapshot()
	f.Assume(d, f.Place(d))
	if len(s.Nodes[0].UsedGPUs)+len(s.Nodes[1].UsedGPUs) != 0 || s.Nodes[0].Replicas != nil {
		t.Fatalf("source snapshot changed: %+v", s.Nodes)
	}
	if used := len(mid.Nodes[0].UsedGPUs) + len(mid.Nodes[1].UsedGPUs); used != 2 {
		t.Fatalf("handed-out snapshot has %d used GPUs, want 2", used)
	}
	if used := len(f.nodes[0].UsedGPUs) + len(f.nodes[1].UsedGPUs); used != 4 {
		t.Fatalf("fleet has %d used GPUs, want 4", used)
	}
}

// TestFleetMatchesPlaceManyFabrics is TestFleetMatchesPlace on the shapes
// the Fleet's shortcuts are for, over 120 seeded fleets: 10-120 nodes in up
// to 12 fabrics (named out of node order, links of 100-400 Gb/s, some nodes
// slower or faster than their fabric, now and then a NaN rate), a few nodes
// set apart by replicas or weights, and mostly multi-node profiles. Half the
// fleets are fresh (every node ready, free and alike, so fabrics tie on
// score and often on rate, and the link or the name decides); the other
// half worn (GPUs in use, nodes of 4, nodes refused for readiness, engine,
// memory or labels). The reference is Place and Assume on the Snapshot:
// every node checked and scored, every fabric compared. Each step must
// choose the same profile, fabric, nodes and GPUs. (Seeds rather than
// rapid's draws, which favour small values: a fleet of a few nodes in the
// first fabric decides nothing about fabric pruning.)
func TestFleetMatchesPlaceManyFabrics(t *testing.T) {
	for seed := range uint64(120) {
		rng := rand.New(rand.NewPCG(seed, 17))
		s, ds := manyFabrics(rng)
		f := NewFleet(s)
		for step := range 40 {
			d := ds[rng.IntN(len(ds))]
			want, got := Place(s, d), f.Place(d)
			if got.Placed != want.Placed || got.Profile.Name != want.Profile.Name || got.Fabric != want.Fabric || !reflect.DeepEqual(got.Shards, want.Shards) {
				t.Fatalf("seed %d, step %d, model %s: fleet placed %v %s %v in %q, reference %v %s %v in %q\n%s", seed, step, d.Model,
					got.Placed, got.Profile.Name, got.Shards, got.Fabric, want.Placed, want.Profile.Name, want.Shards, want.Fabric, want.Explanation)
			}
			s = Assume(s, d, want)
			f.Assume(d, got)
		}
	}
}

// manyFabrics draws a fleet and four demands for TestFleetMatchesPlaceManyFabrics.
func manyFabrics(rng *rand.Rand) (Snapshot, []Demand) {
	worn := rng.IntN(2) == 0
	// odd is true one time in n, in worn fleets only.
	odd := func(n int) bool { return worn && rng.IntN(n) == 0 }
	pick := func(of ...int) int { return of[rng.IntN(len(of))] }
	fabrics := 1 + rng.IntN(12)
	rates := make([]float64, fabrics)
	for k := range rates {
		rates[k] = float64(pick(100, 200, 400, 400, 800))
	}
	var s Snapshot
	for i := range 10 + rng.IntN(111) {
		n := Node{
			ID:              fmt.Sprintf("node%03d", i),
			Ready:           !odd(20),
			MemoryBytes:     512 << 30,
			FreeMemoryBytes: 512 << 30,
			DiskFreeBytes:   1000 << 30,
			Engines:         map[string]bool{"vllm": !odd(20)},
			UsedGPUs:        map[int]string{},
			Labels:          map[string]string{"zone": "eu"},
		}
		if odd(4) {
			n.FreeMemoryBytes = 40 << 30
		}
		if odd(3) {
			n.Labels["zone"] = "us"
		}
		if k := rng.IntN(fabrics + 1); k < fabrics {
			n.Fabric = fmt.Sprintf("ib-%02d", (k*5)%fabrics*3%97) // names out of node order
			n.FabricRateGbps = rates[k]
			switch rng.IntN(50) {
			case 0:
				n.FabricRateGbps = math.NaN()
			case 1, 2, 3:
				n.FabricRateGbps = 100
			case 4, 5:
				n.FabricRateGbps = 800
			}
		}
		class, gpus := "h100-80g", 8
		if odd(3) {
			class = "a100-80g"
		}
		if odd(3) {
			gpus = 4
		}
		for g := range gpus {
			n.GPUs = append(n.GPUs, GPU{Index: g, Class: class, MemoryMiB: 81920})
			if odd(6) {
				n.UsedGPUs[g] = "held"
			}
		}
		if rng.IntN(8) == 0 {
			n.Replicas = map[string]int{fmt.Sprintf("m%d", rng.IntN(4)): 1}
		}
		if rng.IntN(20) == 0 {
			n.ModelsPresent = []string{"src0"}
		}
		s.Nodes = append(s.Nodes, n)
	}
	rng.Shuffle(len(s.Nodes), func(i, j int) { s.Nodes[i], s.Nodes[j] = s.Nodes[j], s.Nodes[i] })
	var ds []Demand
	for i := range 4 {
		d := Demand{Model: fmt.Sprintf("m%d", i), Source: fmt.Sprintf("src%d", i%2)}
		for j := range 1 + rng.IntN(2) {
			p := spec.Profile{
				Name:        fmt.Sprintf("p%d", j),
				Engine:      "vllm",
				GPUClass:    []string{"h100-80g", "h100-80g", "a100-80g", ""}[rng.IntN(4)],
				TP:          pick(1, 2, 4, 8, 8),
				Nodes:       pick(2, 2, 3, 1),
				Priority:    rng.IntN(2),
				MinMemoryGB: pick(16, 64, 128),
			}
			if rng.IntN(4) == 0 {
				p.Labels = map[string]string{"zone": "eu"}
			}
			d.Profiles = append(d.Profiles, p)
		}
		ds = append(ds, d)
	}
	return s, ds
}

// TestFleetFabricTies places a 2-node replica where fabrics tie on score
// and the link rate or the name decides, in the orders the Fleet's pruning
// meets them: a fabric holding a node set apart (a replica of the model,
// evaluated first) against others by name. Each must match Place on the
// Snapshot and land in the fabric named.
func TestFleetFabricTies(t *testing.T) {
	fresh := func(id, fabric string, rate float64) Node {
		n := inFabric(node(id, "h100-80g", 8), fabric)
		n.FabricRateGbps = rate
		return n
	}
	holding := func(n Node) Node { n.Replicas = map[string]int{"m": 1}; return n }
	tests := []struct {
		name  string
		nodes []Node
		want  string
	}{
		{"a lower name ties the fabric set apart", []Node{
			holding(fresh("c0", "ib-c", 400)), fresh("c1", "ib-c", 400), fresh("c2", "ib-c", 400),
			fresh("a0", "ib-a", 400), fresh("a1", "ib-a", 400),
		}, "ib-a"},
		{"a slower fabric first does not hide a lower name at the best rate", []Node{
			holding(fresh("c0", "ib-c", 400)), fresh("c1", "ib-c", 400), fresh("c2", "ib-c", 400),
			fresh("a0", "ib-a", 200), fresh("a1", "ib-a", 200),
			fresh("b0", "ib-b", 400), fresh("b1", "ib-b", 400),
		}, "ib-b"},
		{"a faster fabric beats the one set apart on rate", []Node{
			holding(fresh("a0", "ib-a", 200)), fresh("a1", "ib-a", 200), fresh("a2", "ib-a", 200),
			fresh("b0", "ib-b", 400), fresh("b1", "ib-b", 400),
		}, "ib-b"},
		{"a slow link among the nodes chosen makes the fabric slow", []Node{
			fresh("a0", "ib-a", 400), fresh("a1", "ib-a", 100), fresh("a2", "ib-a", 400),
			fresh("b0", "ib-b", 400), fresh("b1", "ib-b", 400),
		}, "ib-b"},
		{"the fastest link of the fleet is in a later fabric, past a slower one", []Node{
			fresh("a0", "ib-a", 400), fresh("a1", "ib-a", 400),
			fresh("b0", "ib-b", 200), fresh("b1", "ib-b", 200),
			fresh("c0", "ib-c", 800), fresh("c1", "ib-c", 800), fresh("c2", "ib-c", 100),
			fresh("d0", "ib-d", 800), fresh("d1", "ib-d", 400),
		}, "ib-c"},
		{"a fuller fabric beats an emptier one of lower name", []Node{
			fresh("a0", "ib-a", 400), fresh("a1", "ib-a", 400),
			with(fresh("b0", "ib-b", 400), func(n *Node) { n.GPUs = n.GPUs[:4] }), with(fresh("b1", "ib-b", 400), func(n *Node) { n.GPUs = n.GPUs[:4] }),
		}, "ib-b"},
		{"a NaN rate: every fabric compared as chooseFabric does", []Node{
			fresh("a0", "ib-a", math.NaN()), fresh("a1", "ib-a", 400),
			holding(fresh("b0", "ib-b", 400)), fresh("b1", "ib-b", 400), fresh("b2", "ib-b", 400),
		}, "ib-a"},
	}
	p := gpuProfile("2x4", "h100-80g", 4)
	p.Nodes = 2
	d := Demand{Model: "m", Profiles: []spec.Profile{p}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Snapshot{Nodes: tt.nodes}
			want, got := Place(s, d), NewFleet(s).Place(d)
			if want.Fabric != tt.want {
				t.Fatalf("reference placed in %q, the case expects %q:\n%s", want.Fabric, tt.want, want.Explanation)
			}
			if got.Fabric != want.Fabric || !reflect.DeepEqual(got.Shards, want.Shards) {
				t.Fatalf("fleet placed %v in %q, reference %v in %q", got.Shards, got.Fabric, want.Shards, want.Fabric)
			}
		})
	}
}

// TestNodeStateMatchesFreeByClass holds the Fleet's reading of a node's GPUs
// to the checkers' own (freeByClass, gpuCount): GPUs listed twice (the
// first listing's class counts), indices past 63, mixed classes, some used.
func TestNodeStateMatchesFreeByClass(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := Node{UsedGPUs: map[int]string{}}
		for i := range rapid.IntRange(0, 12).Draw(t, "gpus") {
			idx := rapid.OneOf(rapid.IntRange(0, 9), rapid.IntRange(60, 70)).Draw(t, fmt.Sprintf("index%d", i))
			class := rapid.SampledFrom([]string{"h100-80g", "a100-80g", "l4"}).Draw(t, fmt.Sprintf("class%d", i))
			n.GPUs = append(n.GPUs, GPU{Index: idx, Class: class})
			if rapid.IntRange(0, 3).Draw(t, fmt.Sprintf("used%d", i)) == 0 {
				n.UsedGPUs[idx] = "held"
			}
		}
		st := newNodeState(&n)
		got := map[string][]int{}
		for _, c := range st.classes {
			got[c.class] = c.free
		}
		if want := freeByClass(&n); !reflect.DeepEqual(got, want) {
			t.Fatalf("free by class %v, want %v", got, want)
		}
		if st.total != gpuCount(&n) || st.free != freeCount(&n) {
			t.Fatalf("total %d free %d, want %d and %d", st.total, st.free, gpuCount(&n), freeCount(&n))
		}
		if !slices.IsSortedFunc(st.classes, func(a, b classFree) int { return cmp.Compare(a.class, b.class) }) {
			t.Fatalf("classes not sorted: %v", st.classes)
		}
	})
}

// TestFleetReleaseUndoesTake: on a random fleet, a replica placed, taken
// and then released leaves a fleet that explains and places every demand
// as the snapshot it was built from.
func TestFleetReleaseUndoesTake(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var s Snapshot
		for i := range rapid.IntRange(1, 20).Draw(t, "nodes") {
			s.Nodes = append(s.Nodes, genNode(t, fmt.Sprintf("node%02d", i)))
		}
		genDemand := func(name string) Demand {
			d := Demand{Model: rapid.SampledFrom([]string{"m", "n"}).Draw(t, name+".model"), Source: "src"}
			for j := range rapid.IntRange(1, 2).Draw(t, name+".profiles") {
				d.Profiles = append(d.Profiles, genProfile(t, fmt.Sprintf("%s.p%d", name, j)))
			}
			return d
		}
		d := genDemand("placed")
		f := NewFleet(s)
		plan := f.Place(d)
		f.Take(d, plan)
		if plan.Placed {
			f.Release(d.Model, plan.Shards)
		}
		d2 := genDemand("next")
		if got, want := f.Explain(d2), Explain(s, d2); !reflect.DeepEqual(got, want) {
			t.Fatalf("after release, explanations differ:\nfleet:\n%s\nreference:\n%s", got, want)
		}
		got, want := f.Place(d2), Place(s, d2)
		if got.Placed != want.Placed || !reflect.DeepEqual(got.Shards, want.Shards) {
			t.Fatalf("after release, fleet placed %v %v, reference %v %v", got.Placed, got.Shards, want.Placed, want.Shards)
		}
	})
}
