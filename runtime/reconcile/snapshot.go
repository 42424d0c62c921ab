package reconcile

import (
	"slices"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/scheduler"
	"github.com/llmgw/llmgw/spec"
)

// snapshot converts the fleet into the scheduler's view. Only connected,
// ready nodes can take work; the others are listed so that explanations
// name them.
func snapshot(nodes []*fleet.Node, used map[string]map[int]string, replicas []*fleet.Replica) scheduler.Snapshot {
	perNode := map[string]map[string]int{}
	for _, r := range replicas {
		if !r.Live() {
			continue
		}
		for _, s := range r.Shards {
			if perNode[s.Node] == nil {
				perNode[s.Node] = map[string]int{}
			}
			perNode[s.Node][r.Model]++
		}
	}
	snap := scheduler.Snapshot{Nodes: make([]scheduler.Node, 0, len(nodes))}
	for _, n := range nodes {
		sn := scheduler.Node{
			ID:       n.ID,
			Ready:    n.State == fleet.NodeReady && n.Connected,
			UsedGPUs: used[n.ID],
			Replicas: perNode[n.ID],
			Engines:  map[string]bool{},
		}
		switch {
		case n.Draining:
			sn.Ready = false
			sn.NotReadyReason = "draining"
		case n.State == fleet.NodeLost:
			sn.NotReadyReason = "lost: " + n.Reason
		case n.Suspect:
			sn.Ready = false
			sn.NotReadyReason = "suspect: " + n.SuspectReason
		case !n.Connected:
			sn.NotReadyReason = "agent disconnected"
		case n.State != fleet.NodeReady:
			sn.NotReadyReason = string(n.State) + ": " + n.Reason
		}
		if d := n.Declaration; d != nil {
			sn.Labels = d.GetLabels()
		}
		if inv := n.Inventory; inv != nil {
			sn.NVLinkKnown = len(inv.GetGpus()) > 0
			for _, g := range inv.GetGpus() {
				sg := scheduler.GPU{Index: int(g.GetIndex()), Class: g.GetClass(), MemoryMiB: g.GetMemoryMib()}
				for _, p := range g.GetNvlinkPeers() {
					sg.NVLinkPeers = append(sg.NVLinkPeers, int(p))
				}
				sn.GPUs = append(sn.GPUs, sg)
				// The topology is known only when every GPU's links were read.
				sn.NVLinkKnown = sn.NVLinkKnown && g.GetNvlinkKnown()
			}
			sn.MemoryBytes = inv.GetMemoryTotalBytes()
			sn.FreeMemoryBytes = inv.GetMemoryAvailableBytes()
			sn.DiskFreeBytes = inv.GetDiskFreeBytes()
			if wc := inv.GetWeightsCache(); wc.GetDiskTotalBytes() > 0 {
				// Where fetched weights land: what min_disk_gb is about.
				sn.DiskFreeBytes = wc.GetDiskFreeBytes()
			}
			for _, e := range inv.GetEngines() {
				if e.GetAvailable() {
					sn.Engines[e.GetEngine()] = true
				}
			}
			for _, c := range n.EngineChecks {
				if !c.GetOk() {
					if sn.EngineFailures == nil {
						sn.EngineFailures = map[string]string{}
					}
					sn.EngineFailures[c.GetEngine()] = c.GetError()
				}
				if h, ok := EngineHelp(c); ok {
					if sn.EngineHelp == nil {
						sn.EngineHelp = map[string]scheduler.EngineHelp{}
					}
					sn.EngineHelp[c.GetEngine()] = h
				}
			}
			for _, fv := range inv.GetFabrics() {
				if fv.GetInService() && sn.Fabric == "" {
					sn.Fabric = fv.GetName()
					sn.FabricRateGbps = fv.GetRateGbps()
				}
			}
			for _, mf := range inv.GetModels() {
				sn.ModelsPresent = append(sn.ModelsPresent, mf.GetPath(), mf.GetName())
			}
			// The sources the node's weights cache holds, as written in
			// the catalog: a fetched source matches by its own text.
			for _, e := range inv.GetWeightsCache().GetEntries() {
				sn.ModelsPresent = append(sn.ModelsPresent, e.GetSource())
			}
		}
		snap.Nodes = append(snap.Nodes, sn)
	}
	return snap
}

// demand asks for one replica of a catalog model, with the model's own
// profiles: the plan hands back the one that placed.
func demand(m spec.Model) scheduler.Demand {
	return scheduler.Demand{Model: m.Name, Source: m.Source, Profiles: m.Profiles}
}

// EngineHelp returns the flags an engine check read from the engine's own
// help, when they can be trusted: the check passed, the help was read in
// full (no help_warning) and listed flags. An agent built before the check
// read help reports none: unknown, and nothing is refused for it.
func EngineHelp(c *agentv1.EngineCheck) (scheduler.EngineHelp, bool) {
	if !c.GetOk() || c.GetHelpWarning() != "" || len(c.GetFlags()) == 0 {
		return scheduler.EngineHelp{}, false
	}
	flags := c.GetFlags()
	if !slices.IsSorted(flags) {
		flags = slices.Sorted(slices.Values(flags))
	}
	return scheduler.EngineHelp{Flags: flags, Version: c.GetVersion(), Command: c.GetHelpCommand()}, true
}
