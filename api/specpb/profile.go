package specpb

import (
	"maps"
	"slices"

	specv1 "github.com/llmgw/llmgw/api/specv1"
	"github.com/llmgw/llmgw/spec"
)

// ProfileToProto converts a profile for the wire: the management API's
// model definitions and the agent protocol's StartShard and ShardStatus all
// carry it in this one message. A zero startup timeout is sent as absent.
func ProfileToProto(p spec.Profile) *specv1.Profile {
	return &specv1.Profile{
		Name:           p.Name,
		Engine:         p.Engine,
		GpuClass:       p.GPUClass,
		Tp:             int32(p.TP),
		Nodes:          int32(p.Nodes),
		Weight:         int32(p.Weight),
		Priority:       int32(p.Priority),
		StartupTimeout: durationText(p.StartupTimeout),
		MinMemoryGb:    int32(p.MinMemoryGB),
		MinDiskGb:      int32(p.MinDiskGB),
		Labels:         maps.Clone(p.Labels),
		Args:           slices.Clone(p.Args),
		Env:            maps.Clone(p.Env),
		LaunchMode:     p.LaunchMode,
	}
}

// ProfileFromProto converts a profile from the wire; nil is the zero
// profile. It fails only on a startup_timeout that does not parse, naming
// the key; the profile is then returned all the same, with a zero startup
// timeout.
func ProfileFromProto(p *specv1.Profile) (spec.Profile, error) {
	startup, err := parseDuration("startup_timeout", p.GetStartupTimeout())
	return spec.Profile{
		Name:           p.GetName(),
		Engine:         p.GetEngine(),
		GPUClass:       p.GetGpuClass(),
		TP:             int(p.GetTp()),
		Nodes:          int(p.GetNodes()),
		Weight:         int(p.GetWeight()),
		Priority:       int(p.GetPriority()),
		StartupTimeout: startup,
		MinMemoryGB:    int(p.GetMinMemoryGb()),
		MinDiskGB:      int(p.GetMinDiskGb()),
		Labels:         maps.Clone(p.GetLabels()),
		Args:           slices.Clone(p.GetArgs()),
		Env:            maps.Clone(p.GetEnv()),
		LaunchMode:     p.GetLaunchMode(),
	}, err
}
