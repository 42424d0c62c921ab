package provider

import (
	"testing"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	managev1 "github.com/llmgw/llmgw/api/managev1"
)

func TestNodesFromAPI(t *testing.T) {
	got := nodesFromAPI([]*managev1.Node{
		{Id: "node02", State: "lost", Reason: "no heartbeat", Declared: true},
		{
			Id: "node01", State: "ready", LastSeenUnixMs: 1_700_000_000_000, UsedGpus: []int32{0},
			Gpus:    []*agentv1.GPU{{Class: "l40s"}, {Class: "h100-80g"}, {Class: "h100-80g"}},
			Fabrics: []*agentv1.FabricVerdict{{Name: "ib-a", InService: true, RateGbps: 400}},
			Labels:  map[string]string{"zone": "a"},
		},
	})
	if len(got.Nodes) != 2 || got.Nodes[0].ID.ValueString() != "node01" || got.Nodes[1].ID.ValueString() != "node02" {
		t.Fatalf("nodes not sorted by id: %+v", got.Nodes)
	}
	n := got.Nodes[0]
	if n.GPUs.ValueInt64() != 3 || n.GPUsUsed.ValueInt64() != 1 {
		t.Errorf("gpus %v used %v, want 3 and 1", n.GPUs, n.GPUsUsed)
	}
	if len(n.GPUClasses) != 2 || n.GPUClasses[0].ValueString() != "h100-80g" || n.GPUClasses[1].ValueString() != "l40s" {
		t.Errorf("gpu_classes = %v, want [h100-80g l40s]", n.GPUClasses)
	}
	if len(n.Fabrics) != 1 || !n.Fabrics[0].InService.ValueBool() || n.Fabrics[0].RateGbps.ValueFloat64() != 400 {
		t.Errorf("fabrics = %+v", n.Fabrics)
	}
	if n.LastSeen.ValueString() != "2023-11-14T22:13:20Z" || n.Labels["zone"] != "a" {
		t.Errorf("last_seen %v labels %v", n.LastSeen, n.Labels)
	}
	if n.Declared.IsNull() || n.Declared.ValueBool() {
		t.Errorf("declared = %v, want false for a node the control plane holds no declaration for", n.Declared)
	}
	lost := got.Nodes[1]
	if !lost.Declared.ValueBool() {
		t.Errorf("declared = %v, want true", lost.Declared)
	}
	if lost.LastSeen.ValueString() != "" || lost.Labels == nil || lost.GPUClasses == nil || lost.Fabrics == nil {
		t.Errorf("a node that reported nothing must have empty, not null, values: %+v", lost)
	}
}
