package manage

import (
	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/runtime/scheduler"
)

// ExplanationToProto converts a scheduler explanation.
func ExplanationToProto(e scheduler.Explanation, plan *scheduler.Plan) *managev1.Explanation {
	out := &managev1.Explanation{Model: e.Model, Text: e.String()}
	for _, pe := range e.Profiles {
		ppe := &managev1.ProfileExplanation{Profile: pe.Profile, Placed: pe.Placed, Summary: pe.Summary}
		for _, nv := range pe.Nodes {
			ppe.Nodes = append(ppe.Nodes, &managev1.NodeVerdict{Node: nv.NodeID, Feasible: nv.Feasible, Reason: nv.Reason, Score: nv.Score})
		}
		out.Profiles = append(out.Profiles, ppe)
		if pe.Placed && !out.Placed {
			out.Placed = true
			out.Profile = pe.Profile
		}
	}
	if plan != nil && plan.Placed {
		out.Placed = true
		out.Profile = plan.Profile.Name
	}
	return out
}
