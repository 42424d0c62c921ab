package scheduler

import (
	"fmt"
	"slices"
)

// groupGPUs returns tp of the free GPUs (ascending) for one shard. On a node
// whose NVLink topology is known (Node.NVLinkKnown: the agent read it from
// NVML), it is the first group, by index, of tp GPUs every two of which are
// NVLink peers, so that a tensor-parallel group does not straddle two
// bridges and fall back to PCIe. When the topology is unknown, or no such
// group is free, it is the lowest tp free GPUs, as on an NVSwitch board
// where every card is equidistant; topologyNote says which happened. The
// result may share free's array when it is its prefix.
func groupGPUs(n *Node, free []int, tp int) []int {
	if tp <= 1 || !n.NVLinkKnown || len(free) < tp {
		return free[:min(tp, len(free))]
	}
	if g := nvlinkGroup(n, free, tp); g != nil {
		return g
	}
	return free[:tp]
}

// nvlinkGroup finds the first group of tp GPUs of free that are all NVLink
// peers of each other, or nil.
func nvlinkGroup(n *Node, free []int, tp int) []int {
	peers := make(map[int][]int, len(n.GPUs))
	for _, g := range n.GPUs {
		if _, seen := peers[g.Index]; !seen {
			peers[g.Index] = g.NVLinkPeers
		}
	}
	linked := func(a, b int) bool { return slices.Contains(peers[a], b) || slices.Contains(peers[b], a) }
	group := make([]int, 0, tp)
	var search func(from int) bool
	search = func(from int) bool {
		if len(group) == tp {
			return true
		}
		for i := from; i <= len(free)-(tp-len(group)); i++ {
			g := free[i]
			if !slices.ContainsFunc(group, func(h int) bool { return !linked(g, h) }) {
				group = append(group, g)
				if search(i + 1) {
					return true
				}
				group = group[:len(group)-1]
			}
		}
		return false
	}
	if search(0) {
		return group
	}
	return nil
}

// topologyNote says how the GPUs of a shard of tp on n were grouped, when
// not by NVLink: the topology was unknown, or no NVLink-connected group of
// tp GPUs was free. "" for a shard of one GPU or an NVLink group.
func topologyNote(n *Node, gpus []int, tp int) string {
	if tp <= 1 {
		return ""
	}
	if !n.NVLinkKnown {
		return "NVLink topology unknown: lowest free GPUs taken"
	}
	if nvlinkGroup(n, gpus, tp) == nil {
		return fmt.Sprintf("no NVLink-connected group of %d free GPUs: lowest free GPUs taken", tp)
	}
	return ""
}
