package manage

import (
	"fmt"
	"maps"
	"slices"
	"time"

	managev1 "github.com/llmgw/llmgw/runtime/api/managev1"
	"github.com/llmgw/llmgw/runtime/catalog"
	"github.com/llmgw/llmgw/runtime/scheduler"
)

// ModelToProto converts a catalog model to its API form.
func ModelToProto(m catalog.Model) *managev1.Model {
	out := &managev1.Model{
		Name:           m.Name,
		Aliases:        slices.Clone(m.Aliases),
		Source:         m.Source,
		RoutingProfile: m.RoutingProfile,
		ContextLength:  int32(m.ContextLength),
		MaxOutput:      int32(m.MaxOutput),
		Scaling: &managev1.Scaling{
			Min:         int32(m.Scaling.Min),
			Max:         int32(m.Scaling.Max),
			IdleTimeout: durationString(m.Scaling.IdleTimeout.Std()),
		},
	}
	for _, p := range m.Profiles {
		out.Profiles = append(out.Profiles, &managev1.Profile{
			Name:           p.Name,
			Engine:         p.Engine,
			GpuClass:       p.GPUClass,
			Tp:             int32(p.TP),
			Nodes:          int32(p.Nodes),
			Weight:         int32(p.Weight),
			Priority:       int32(p.Priority),
			StartupTimeout: durationString(p.StartupTimeout.Std()),
			MinMemoryGb:    int32(p.MinMemoryGB),
			MinDiskGb:      int32(p.MinDiskGB),
			Labels:         maps.Clone(p.Labels),
			Args:           slices.Clone(p.Args),
		})
	}
	return out
}

func durationString(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

func parseDuration(key, s string) (catalog.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: cannot parse %q as a duration (e.g. 90s, 10m)", key, s)
	}
	return catalog.Duration(d), nil
}

// ModelFromProto converts an API model to the catalog type. Durations that
// do not parse are errors naming the field.
func ModelFromProto(pm *managev1.Model) (catalog.Model, error) {
	if pm == nil {
		return catalog.Model{}, fmt.Errorf("model: is required")
	}
	m := catalog.Model{
		Name:           pm.GetName(),
		Aliases:        slices.Clone(pm.GetAliases()),
		Source:         pm.GetSource(),
		RoutingProfile: pm.GetRoutingProfile(),
		ContextLength:  int(pm.GetContextLength()),
		MaxOutput:      int(pm.GetMaxOutput()),
	}
	if s := pm.GetScaling(); s != nil {
		m.Scaling.Min = int(s.GetMin())
		m.Scaling.Max = int(s.GetMax())
		d, err := parseDuration("scaling.idle_timeout", s.GetIdleTimeout())
		if err != nil {
			return catalog.Model{}, err
		}
		m.Scaling.IdleTimeout = d
	}
	for i, p := range pm.GetProfiles() {
		d, err := parseDuration(fmt.Sprintf("profiles[%d].startup_timeout", i), p.GetStartupTimeout())
		if err != nil {
			return catalog.Model{}, err
		}
		m.Profiles = append(m.Profiles, catalog.Profile{
			Name:           p.GetName(),
			Engine:         p.GetEngine(),
			GPUClass:       p.GetGpuClass(),
			TP:             int(p.GetTp()),
			Nodes:          int(p.GetNodes()),
			Weight:         int(p.GetWeight()),
			Priority:       int(p.GetPriority()),
			StartupTimeout: d,
			MinMemoryGB:    int(p.GetMinMemoryGb()),
			MinDiskGB:      int(p.GetMinDiskGb()),
			Labels:         maps.Clone(p.GetLabels()),
			Args:           slices.Clone(p.GetArgs()),
		})
	}
	return m, nil
}

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
		out.Profile = plan.Profile
	}
	return out
}
