package provider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/types"

	managev1 "github.com/llmgw/llmgw/api/managev1"
)

func TestPlacementFromAPI(t *testing.T) {
	got := placementFromAPI(types.StringValue("chat"), &managev1.Explanation{
		Model: "sim-chat", Placed: true, Profile: "h100", Text: "profile h100: placed on node02",
		Profiles: []*managev1.ProfileExplanation{
			{Profile: "a100", Summary: "no node", Nodes: []*managev1.NodeVerdict{{Node: "node01", Reason: "wrong GPU class"}}},
			{Profile: "h100", Placed: true, Summary: "node02", Nodes: []*managev1.NodeVerdict{{Node: "node02", Feasible: true, Score: 0.5}}},
		},
	})
	if got.Model.ValueString() != "chat" {
		t.Errorf("model = %v, want the configured alias kept", got.Model)
	}
	if !got.Placed.ValueBool() || got.Profile.ValueString() != "h100" || got.Text.ValueString() == "" {
		t.Errorf("placed %v profile %v text %v", got.Placed, got.Profile, got.Text)
	}
	if len(got.Profiles) != 2 || got.Profiles[0].Placed.ValueBool() || got.Profiles[0].Nodes[0].Reason.ValueString() != "wrong GPU class" {
		t.Errorf("profiles[0] = %+v", got.Profiles)
	}
	if v := got.Profiles[1].Nodes[0]; !v.Feasible.ValueBool() || v.Score.ValueFloat64() != 0.5 {
		t.Errorf("profiles[1].nodes[0] = %+v", v)
	}
	empty := placementFromAPI(types.StringValue("m"), &managev1.Explanation{})
	if empty.Profiles == nil {
		t.Error("profiles must be an empty list, not null")
	}
}
