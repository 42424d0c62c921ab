package ctl

// This file is the one place a model definition as written (YAML) is turned
// into the management API's message and back.

import (
	"maps"

	"github.com/llmgw/llmgw/runtime/api/managev1"
)

// modelToProto converts a model definition to the management API's Model.
func modelToProto(m modelFile) *managev1.Model {
	out := &managev1.Model{
		Name:           m.Name,
		Aliases:        append([]string(nil), m.Aliases...),
		Source:         m.Source,
		RoutingProfile: m.RoutingProfile,
		ContextLength:  m.ContextLength,
		MaxOutput:      m.MaxOutput,
	}
	if m.Scaling != nil {
		out.Scaling = &managev1.Scaling{
			Min:         m.Scaling.Min,
			Max:         m.Scaling.Max,
			IdleTimeout: m.Scaling.IdleTimeout,
		}
	}
	for _, p := range m.Profiles {
		out.Profiles = append(out.Profiles, &managev1.Profile{
			Name:           p.Name,
			Engine:         p.Engine,
			GpuClass:       p.GPUClass,
			Tp:             p.TP,
			Nodes:          p.Nodes,
			Weight:         p.Weight,
			Priority:       p.Priority,
			StartupTimeout: p.StartupTimeout,
			MinMemoryGb:    p.MinMemoryGB,
			MinDiskGb:      p.MinDiskGB,
			Labels:         maps.Clone(p.Labels),
			Args:           append([]string(nil), p.Args...),
		})
	}
	return out
}

// modelFromProto converts the management API's Model back to the definition
// shape, leaving out the output-only fields.
func modelFromProto(m *managev1.Model) modelFile {
	out := modelFile{
		Name:           m.GetName(),
		Aliases:        append([]string(nil), m.GetAliases()...),
		Source:         m.GetSource(),
		RoutingProfile: m.GetRoutingProfile(),
		ContextLength:  m.GetContextLength(),
		MaxOutput:      m.GetMaxOutput(),
	}
	if s := m.GetScaling(); s != nil {
		out.Scaling = &scalingFile{Min: s.GetMin(), Max: s.GetMax(), IdleTimeout: s.GetIdleTimeout()}
	}
	for _, p := range m.GetProfiles() {
		out.Profiles = append(out.Profiles, profileFile{
			Name:           p.GetName(),
			Engine:         p.GetEngine(),
			GPUClass:       p.GetGpuClass(),
			TP:             p.GetTp(),
			Nodes:          p.GetNodes(),
			Weight:         p.GetWeight(),
			Priority:       p.GetPriority(),
			StartupTimeout: p.GetStartupTimeout(),
			MinMemoryGB:    p.GetMinMemoryGb(),
			MinDiskGB:      p.GetMinDiskGb(),
			Labels:         maps.Clone(p.GetLabels()),
			Args:           append([]string(nil), p.GetArgs()...),
		})
	}
	return out
}
