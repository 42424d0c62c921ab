package specpb

import (
	"maps"
	"slices"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/spec"
)

// DeclarationToProto converts a declaration for the protocol.
func DeclarationToProto(d spec.Declaration) *agentv1.Declaration {
	out := &agentv1.Declaration{
		Engines:   maps.Clone(d.Engines),
		Labels:    maps.Clone(d.Labels),
		ModelDirs: slices.Clone(d.ModelDirs),
		Discovery: &agentv1.Discovery{NvidiaSmi: d.Discovery.NvidiaSMI, IbRoot: d.Discovery.IBRoot, Cpuinfo: d.Discovery.CPUInfo},
	}
	for _, f := range d.Fabrics {
		out.Fabrics = append(out.Fabrics, &agentv1.FabricDecl{Name: f.Name, Adapters: slices.Clone(f.Adapters)})
	}
	return out
}

// DeclarationFromProto converts a declaration from the protocol.
func DeclarationFromProto(p *agentv1.Declaration) spec.Declaration {
	d := spec.Declaration{
		Engines:   maps.Clone(p.GetEngines()),
		Labels:    maps.Clone(p.GetLabels()),
		ModelDirs: slices.Clone(p.GetModelDirs()),
		Discovery: spec.Discovery{NvidiaSMI: p.GetDiscovery().GetNvidiaSmi(), IBRoot: p.GetDiscovery().GetIbRoot(), CPUInfo: p.GetDiscovery().GetCpuinfo()},
	}
	for _, f := range p.GetFabrics() {
		d.Fabrics = append(d.Fabrics, spec.Fabric{Name: f.GetName(), Adapters: slices.Clone(f.GetAdapters())})
	}
	return d
}
