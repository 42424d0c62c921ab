package agent

import (
	"slices"

	"github.com/llmgw/llmgw/agent/discovery"
	agentv1 "github.com/llmgw/llmgw/api/agentv1"
)

// InventoryToProto converts what discovery found for the protocol.
func InventoryToProto(inv discovery.Inventory) *agentv1.Inventory {
	out := &agentv1.Inventory{
		GpuError:             inv.GPUError,
		MemoryTotalBytes:     inv.Memory.TotalBytes,
		MemoryAvailableBytes: inv.Memory.AvailableBytes,
		DiskFreeBytes:        inv.Disk.FreeBytes,
		DiskTotalBytes:       inv.Disk.TotalBytes,
		CpuModel:             inv.CPU.Model,
		CpuCores:             int32(inv.CPU.Cores),
		Avx2:                 inv.CPU.AVX2,
		CpuFlags:             slices.Clone(inv.CPU.Flags),
	}
	if has, known := inv.CPU.HasAVX2(); known && inv.CPUError == "" {
		out.HasAvx2 = &has
	}
	for _, g := range inv.GPUs {
		pg := &agentv1.GPU{
			Index: int32(g.Index), Uuid: g.UUID, Name: g.Name, Class: g.Class, MemoryMib: g.MemoryMiB,
			UtilizationPct: g.UtilizationPct, TemperatureC: g.TemperatureC, EccErrors: g.ECCErrors,
			MemoryUsedMib: g.MemoryUsedMiB,
		}
		// Peers only with the topology known: absent means unknown.
		if g.NVLinkKnown {
			known := true
			pg.NvlinkKnown = &known
			for _, p := range g.NVLinkPeers {
				pg.NvlinkPeers = append(pg.NvlinkPeers, int32(p))
			}
		}
		out.Gpus = append(out.Gpus, pg)
	}
	for _, f := range inv.Fabrics {
		out.Fabrics = append(out.Fabrics, &agentv1.FabricVerdict{
			Name: f.Name, Adapters: slices.Clone(f.Adapters), InService: f.InService, RateGbps: f.RateGbps, Problems: slices.Clone(f.Problems),
		})
	}
	for _, m := range inv.Models {
		out.Models = append(out.Models, &agentv1.ModelFile{Path: m.Path, Name: m.Name, SizeBytes: uint64(max(m.SizeBytes, 0))})
	}
	return out
}
