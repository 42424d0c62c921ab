package scheduler

import (
	"maps"
	"testing"

	"github.com/llmgw/llmgw/spec"
)

func TestFit(t *testing.T) {
	tp2 := gpuProfile("tp2", "a100-80g", 2)
	tp1 := with2(gpuProfile("tp1", "h100-80g", 1), func(p *spec.Profile) { p.Priority = 10 })
	multi := gpuProfile("2x4", "a100-80g", 4)
	multi.Nodes = 2
	tests := []struct {
		name     string
		nodes    []Node
		profiles []spec.Profile
		limit    int
		want     int
		by       map[string]int
	}{
		{
			name:     "every free GPU, a100 first, then the lower-priority h100 profile",
			nodes:    []Node{node("node01", "a100-80g", 8, 0, 1), node("node02", "h100-80g", 2)},
			profiles: []spec.Profile{tp2, tp1},
			limit:    1000,
			want:     5,
			by:       map[string]int{"tp2": 3, "tp1": 2},
		},
		{
			name:     "stops at the limit",
			nodes:    []Node{node("node01", "a100-80g", 8)},
			profiles: []spec.Profile{tp2},
			limit:    2,
			want:     2,
			by:       map[string]int{"tp2": 2},
		},
		{
			name:     "multi-node replicas need two nodes of one fabric each",
			nodes:    []Node{inFabric(node("a", "a100-80g", 8), "ib"), inFabric(node("b", "a100-80g", 8), "ib"), node("c", "a100-80g", 8)},
			profiles: []spec.Profile{multi},
			limit:    10,
			want:     2,
			by:       map[string]int{"2x4": 2},
		},
		{
			name:     "CPU replicas until memory runs out (128 GiB free, 8 each)",
			nodes:    []Node{node("cpu01", "", 0)},
			profiles: []spec.Profile{cpuProfile("cpu")},
			limit:    1000,
			want:     16,
			by:       map[string]int{"cpu": 16},
		},
		{
			name:     "a CPU profile that takes nothing fits up to the limit",
			nodes:    []Node{node("cpu01", "", 0)},
			profiles: []spec.Profile{with2(cpuProfile("cpu"), func(p *spec.Profile) { p.MinMemoryGB = 0 })},
			limit:    spec.MaxReplicas,
			want:     spec.MaxReplicas,
			by:       map[string]int{"cpu": spec.MaxReplicas},
		},
		{
			name:     "nothing fits",
			nodes:    []Node{node("node01", "h100-80g", 8)},
			profiles: []spec.Profile{tp2},
			limit:    3,
			want:     0,
			by:       map[string]int{},
		},
		{name: "limit 0 places nothing", nodes: []Node{node("node01", "a100-80g", 8)}, profiles: []spec.Profile{tp2}, by: map[string]int{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Snapshot{Nodes: tt.nodes}
			before := len(s.Nodes[0].UsedGPUs)
			got := Fit(s, Demand{Model: "m", Profiles: tt.profiles}, tt.limit)
			if got.Replicas != tt.want || !maps.Equal(got.ByProfile, tt.by) {
				t.Fatalf("Fit = %d %v, want %d %v", got.Replicas, got.ByProfile, tt.want, tt.by)
			}
			if len(s.Nodes[0].UsedGPUs) != before {
				t.Fatal("Fit changed the snapshot it was given")
			}
		})
	}
}
