package scheduler

import (
	"fmt"
	"strings"

	"github.com/llmgw/llmgw/spec"
)

// GPU is one accelerator on a node.
type GPU struct {
	// Index is the device index the engine is launched with.
	Index int
	// Class is the GPU class as the fleet reports it, e.g. "h100-80g".
	Class string
	// MemoryMiB is the device memory.
	MemoryMiB uint64
	// NVLinkPeers are the indices of the GPUs this one has an active
	// NVLink to; read only when the node's NVLinkKnown is set.
	NVLinkPeers []int
}

// Node is the scheduler's view of one node, converted by the control plane
// from its fleet state.
type Node struct {
	// ID is the node's identity; IDs are unique within a Snapshot.
	ID string
	// Ready is false for a node that cannot take work now.
	Ready bool
	// NotReadyReason says why a node is not ready, e.g. "heartbeat lost".
	NotReadyReason string
	// GPUs lists the node's accelerators.
	GPUs []GPU
	// NVLinkKnown says the node's agent read its NVLink topology (NVML):
	// GPUs' NVLinkPeers then say which cards are linked, and an empty list
	// means none. When false the topology is unknown, never "no NVLink".
	NVLinkKnown bool
	// UsedGPUs maps a GPU index to the id of the shard holding it.
	UsedGPUs map[int]string
	// MemoryBytes is the node's total memory.
	MemoryBytes uint64
	// FreeMemoryBytes is the memory not yet committed to shards.
	FreeMemoryBytes uint64
	// DiskFreeBytes is the free space where weights are stored.
	DiskFreeBytes uint64
	// Labels are the node's declared labels.
	Labels map[string]string
	// Engines are the engines this node can run, by name.
	Engines map[string]bool
	// EngineFailures says, for each engine whose check failed on this node,
	// why it cannot start ("llama-server cannot start: libgomp.so.1: ...").
	EngineFailures map[string]string
	// EngineHelp holds, for each engine whose help the node's agent read in
	// full, the flags it takes: a profile using a flag not among them is
	// refused here (EngineFlagsChecker). An engine without an entry has
	// its flags unknown, and no flag is refused for it.
	EngineHelp map[string]EngineHelp
	// Fabric is the fabric in service on this node, "" for none. A node
	// has at most one fabric in service.
	Fabric string
	// FabricRateGbps is the rate of the slowest active link of Fabric.
	FabricRateGbps float64
	// ModelsPresent lists the model sources already present locally.
	ModelsPresent []string
	// Replicas counts the replicas of each model (by name) already on
	// this node.
	Replicas map[string]int
}

// EngineHelp is what one engine's own help on a node says.
type EngineHelp struct {
	// Flags are the flags the help lists, sorted.
	Flags []string
	// Version is the engine's version line ("version: 4567 (abcdef0)").
	Version string
	// Command is the help command read ("vllm serve --help=all").
	Command string
}

// Missing returns the flags of p's command line (spec.LaunchFlags) the
// engine does not take, and a reason naming them, the engine and its
// version, and the help they were looked up in; both empty when it takes
// them all.
func (h EngineHelp) Missing(p spec.Profile) ([]string, string) {
	var missing []string
	for _, f := range spec.LaunchFlags(p) {
		if !spec.EngineAcceptsFlag(p.Engine, h.Flags, f.Name) {
			missing = append(missing, f.Name)
		}
	}
	if len(missing) == 0 {
		return nil, ""
	}
	name := p.Engine
	if prog, _, _ := strings.Cut(h.Command, " "); prog != "" {
		name = prog
	}
	if h.Version != "" {
		name += " (" + h.Version + ")"
	}
	them := "it"
	if len(missing) > 1 {
		them = "them"
	}
	return missing, fmt.Sprintf("%s does not take %s: `%s` does not list %s", name, strings.Join(missing, ", "), h.Command, them)
}

// Demand asks for one replica of a model.
type Demand struct {
	// Model is the model's name, used for spreading.
	Model string
	// Source is where the weights come from, matched against
	// Node.ModelsPresent.
	Source string
	// Profiles are the ways the model may run, in declaration order: the
	// catalog's own profiles. GPUClass "" with TP 0 is a CPU profile, "" with
	// TP above 0 takes GPUs of any one class; Nodes 0 means 1; Weight is
	// carried, not used; Priority orders them, higher first, ties in
	// declaration order.
	Profiles []spec.Profile
}

// Snapshot is the fleet as the scheduler sees it at one moment.
type Snapshot struct {
	Nodes []Node
}

// ShardPlacement puts one shard of a replica on one node.
type ShardPlacement struct {
	// Rank is the shard's rank; rank 0 serves requests.
	Rank int
	// NodeID is the node the shard runs on.
	NodeID string
	// GPUIndices are the GPUs the shard holds, ascending; empty for CPU
	// profiles.
	GPUIndices []int
	// TopologyNote says, for a shard of several GPUs not grouped by NVLink,
	// why: the node's NVLink topology is unknown, or no NVLink-connected
	// group was free. Empty otherwise.
	TopologyNote string
}

// Plan is the scheduler's answer for one Demand.
type Plan struct {
	// Placed reports whether a profile placed.
	Placed bool
	// Profile is the profile that placed, as the Demand gave it; the zero
	// Profile when nothing placed.
	Profile spec.Profile
	// Shards lists the placements, rank 0 first.
	Shards []ShardPlacement
	// Fabric is the fabric every shard is in; "" for a single-node
	// replica on a node without one.
	Fabric string
	// Explanation records how every profile tried was evaluated.
	Explanation Explanation
}

// Explanation records, profile by profile, why a model did or did not place.
type Explanation struct {
	// Model is the model's name.
	Model string
	// Profiles lists the profiles tried, in the order they were tried,
	// up to and including the one that placed.
	Profiles []ProfileExplanation
}

// ProfileExplanation records the evaluation of one profile.
type ProfileExplanation struct {
	// Profile is the profile's name.
	Profile string
	// Placed reports whether this profile placed.
	Placed bool
	// Nodes holds a verdict for every node in the snapshot, sorted by ID.
	Nodes []NodeVerdict
	// Summary says in one line what happened.
	Summary string
}

// NodeVerdict is the outcome of one node for one profile.
type NodeVerdict struct {
	// NodeID is the node.
	NodeID string
	// Feasible reports whether the node passed every checker.
	Feasible bool
	// Reason says why the node was refused; for a feasible node it is
	// empty, or "holds the weights" when the node already holds them.
	Reason string
	// Score is the node's rank score in [0, 1]; 0 when infeasible.
	Score float64
}
