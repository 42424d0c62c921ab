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
