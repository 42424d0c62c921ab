package scheduler

import (
	"slices"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/spec"
)

// pcieNode is a PCIe box of 8 cards whose NVLink bridges pair 0-1, 2-3,
// 4-5 and 6-7 (peers as NVML reports them), with used taken.
func pcieNode(id string, known bool, used ...int) Node {
	n := node(id, "a100-80g", 8, used...)
	n.NVLinkKnown = known
	if known {
		for i := range n.GPUs {
			n.GPUs[i].NVLinkPeers = []int{n.GPUs[i].Index ^ 1}
		}
	}
	return n
}

// TestNVLinkGroups: with the topology known, a tp=2 group is a bridged pair
// even when the lowest free indices straddle two bridges; a tp larger than
// any NVLink group falls back to the lowest free GPUs and says so; with the
// topology unknown the lowest free GPUs are taken and the plan says the
// topology was unknown, never "no NVLink". Place and the Fleet agree.
func TestNVLinkGroups(t *testing.T) {
	tp2 := gpuProfile("tp2", "a100-80g", 2)
	tp4 := gpuProfile("tp4", "a100-80g", 4)
	tests := []struct {
		name    string
		node    Node
		p       spec.Profile
		gpus    []int
		summary string
	}{
		{"known: the pair, not GPUs 1 and 2 across two bridges", pcieNode("n1", true, 0), tp2, []int{2, 3}, "placed on n1 (gpus 2,3)"},
		{"known: the first free pair", pcieNode("n1", true), tp2, []int{0, 1}, "placed on n1 (gpus 0,1)"},
		{"known: no pair free falls back, saying so", pcieNode("n1", true, 0, 3, 5, 7), tp2, []int{1, 2},
			"placed on n1 (gpus 1,2; no NVLink-connected group of 2 free GPUs: lowest free GPUs taken)"},
		{"known: tp4 wider than any NVLink group", pcieNode("n1", true), tp4, []int{0, 1, 2, 3},
			"placed on n1 (gpus 0,1,2,3; no NVLink-connected group of 4 free GPUs: lowest free GPUs taken)"},
		{"unknown topology: lowest free, said to be unknown", pcieNode("n1", false, 0), tp2, []int{1, 2},
			"placed on n1 (gpus 1,2; NVLink topology unknown: lowest free GPUs taken)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Demand{Model: "m", Profiles: []spec.Profile{tt.p}}
			s := Snapshot{Nodes: []Node{tt.node}}
			for name, plan := range map[string]Plan{"Place": Default().Place(s, d), "Fleet": NewFleet(s).Place(d)} {
				if !plan.Placed || !slices.Equal(plan.Shards[0].GPUIndices, tt.gpus) {
					t.Fatalf("%s: placed %v on %+v, want gpus %v", name, plan.Placed, plan.Shards, tt.gpus)
				}
				if got := plan.Explanation.Profiles[0].Summary; got != tt.summary {
					t.Errorf("%s: summary %q, want %q", name, got, tt.summary)
				}
				if strings.Contains(plan.Explanation.String(), "no NVLink\n") {
					t.Errorf("%s says no NVLink", name)
				}
			}
		})
	}
	// A fully connected NVSwitch board: every group is NVLink; tp4 takes
	// the lowest four and says nothing.
	sw := node("n1", "h100-80g", 8)
	sw.NVLinkKnown = true
	for i := range sw.GPUs {
		for j := range 8 {
			if j != i {
				sw.GPUs[i].NVLinkPeers = append(sw.GPUs[i].NVLinkPeers, j)
			}
		}
	}
	plan := Default().Place(Snapshot{Nodes: []Node{sw}}, Demand{Model: "m", Profiles: []spec.Profile{gpuProfile("tp4", "h100-80g", 4)}})
	if got := plan.Explanation.Profiles[0].Summary; got != "placed on n1 (gpus 0,1,2,3)" {
		t.Errorf("NVSwitch board: %q", got)
	}
}
