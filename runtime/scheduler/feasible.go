package scheduler

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/llmgw/llmgw/spec"
)

// Checker decides whether one node can hold one shard of a profile, for one
// concern. A refusal is not an error: reason says, for an operator, why the
// node was refused ("1 free GPU, needs 2"). reason is empty when ok.
type Checker interface {
	// Name names the concern, e.g. "gpu-class".
	Name() string
	// Check reports whether n passes for p, and if not, why.
	Check(n *Node, p spec.Profile) (ok bool, reason string)
}

// DemandChecker is a Checker whose verdict also depends on the demand;
// Place asks CheckDemand instead of Check when a checker has it.
type DemandChecker interface {
	CheckDemand(n *Node, p spec.Profile, d Demand) (ok bool, reason string)
}

// holdsWeights reports whether n already holds d's weights (Node.ModelsPresent
// names Demand.Source).
func holdsWeights(n *Node, d Demand) bool {
	return d.Source != "" && slices.Contains(n.ModelsPresent, d.Source)
}

// DefaultCheckers returns the feasibility chain Place uses, cheapest and
// most fundamental first, so a node's reason is the first thing to fix.
func DefaultCheckers() []Checker {
	return []Checker{
		ReadyChecker{},
		EngineChecker{},
		EngineCheckChecker{},
		EngineFlagsChecker{},
		GPUClassChecker{},
		FreeGPUsChecker{},
		MemoryChecker{},
		DiskChecker{},
		LabelsChecker{},
		FabricChecker{},
	}
}

// ReadyChecker refuses nodes that are not ready.
type ReadyChecker struct{}

// Name implements Checker.
func (ReadyChecker) Name() string { return "ready" }

// Check implements Checker.
func (ReadyChecker) Check(n *Node, _ spec.Profile) (bool, string) {
	if n.Ready {
		return true, ""
	}
	if n.NotReadyReason != "" {
		return false, "not ready: " + n.NotReadyReason
	}
	return false, "not ready"
}

// EngineChecker refuses nodes that cannot run the profile's engine.
type EngineChecker struct{}

// Name implements Checker.
func (EngineChecker) Name() string { return "engine" }

// Check implements Checker.
func (EngineChecker) Check(n *Node, p spec.Profile) (bool, string) {
	if n.Engines[p.Engine] {
		return true, ""
	}
	var have []string
	for name, ok := range n.Engines {
		if ok {
			have = append(have, name)
		}
	}
	if len(have) == 0 {
		return false, fmt.Sprintf("engine %s not available (node has no engines)", p.Engine)
	}
	slices.Sort(have)
	return false, fmt.Sprintf("engine %s not available (node has %s)", p.Engine, strings.Join(have, ", "))
}

// EngineCheckChecker refuses nodes on which the profile's engine failed its
// engine check: it is declared there but cannot start (a missing shared
// library, a broken virtualenv). The reason is the check's own.
type EngineCheckChecker struct{}

// Name implements Checker.
func (EngineCheckChecker) Name() string { return "engine-check" }

// Check implements Checker.
func (EngineCheckChecker) Check(n *Node, p spec.Profile) (bool, string) {
	why, failed := n.EngineFailures[p.Engine]
	if !failed {
		return true, ""
	}
	if why == "" {
		why = p.Engine + " cannot start"
	}
	return false, "engine check failed: " + why
}

// EngineFlagsChecker refuses nodes whose engine does not take a flag the
// profile's command line would use (the driver's or the profile's args),
// by that engine's own help as the node's agent read it. Nodes where the
// help could not be read in full refuse nothing.
type EngineFlagsChecker struct{}

// Name implements Checker.
func (EngineFlagsChecker) Name() string { return "engine-flags" }

// Check implements Checker.
func (EngineFlagsChecker) Check(n *Node, p spec.Profile) (bool, string) {
	h, known := n.EngineHelp[p.Engine]
	if !known {
		return true, ""
	}
	if missing, why := h.Missing(p); len(missing) > 0 {
		return false, why
	}
	return true, ""
}

// GPUClassChecker refuses nodes without any GPU of the profile's class. CPU
// profiles pass.
type GPUClassChecker struct{}

// Name implements Checker.
func (GPUClassChecker) Name() string { return "gpu-class" }

// Check implements Checker.
func (GPUClassChecker) Check(n *Node, p spec.Profile) (bool, string) {
	if p.TP <= 0 {
		return true, ""
	}
	classes := nodeClasses(n)
	if len(classes) == 0 {
		if p.GPUClass == "" {
			return false, fmt.Sprintf("no GPUs, needs %d", p.TP)
		}
		return false, "no GPUs, needs " + p.GPUClass
	}
	if p.GPUClass == "" || slices.Contains(classes, p.GPUClass) {
		return true, ""
	}
	return false, fmt.Sprintf("wrong GPU class: has %s, needs %s", strings.Join(classes, ", "), p.GPUClass)
}

// FreeGPUsChecker refuses nodes with fewer than TP free GPUs of the profile's
// class (of any one class when the profile names none). CPU profiles pass.
type FreeGPUsChecker struct{}

// Name implements Checker.
func (FreeGPUsChecker) Name() string { return "free-gpus" }

// Check implements Checker.
func (FreeGPUsChecker) Check(n *Node, p spec.Profile) (bool, string) {
	if p.TP <= 0 {
		return true, ""
	}
	if _, ok := pickGPUs(n, p); ok {
		return true, ""
	}
	free := 0
	if p.GPUClass == "" {
		for _, idx := range freeByClass(n) {
			free = max(free, len(idx))
		}
	} else {
		free = len(freeByClass(n)[p.GPUClass])
	}
	gpus := plural(free, "GPU", "GPUs")
	switch {
	case len(nodeClasses(n)) <= 1:
		return false, fmt.Sprintf("%d free %s, needs %d", free, gpus, p.TP)
	case p.GPUClass == "":
		return false, fmt.Sprintf("at most %d free %s of one class, needs %d", free, gpus, p.TP)
	default:
		return false, fmt.Sprintf("%d free %s %s, needs %d", free, p.GPUClass, gpus, p.TP)
	}
}

// MemoryChecker refuses nodes with less free memory than MinMemoryGB.
type MemoryChecker struct{}

// Name implements Checker.
func (MemoryChecker) Name() string { return "memory" }

// Check implements Checker.
func (MemoryChecker) Check(n *Node, p spec.Profile) (bool, string) {
	need := gb(p.MinMemoryGB)
	if n.FreeMemoryBytes >= need {
		return true, ""
	}
	return false, fmt.Sprintf("%s GB free memory, needs %d GB", formatGB(n.FreeMemoryBytes), p.MinMemoryGB)
}

// DiskChecker refuses nodes with less free disk than MinDiskGB; with the
// demand (CheckDemand), only nodes that do not already hold its weights,
// which need no room for them.
type DiskChecker struct{}

// CheckDemand implements DemandChecker.
func (c DiskChecker) CheckDemand(n *Node, p spec.Profile, d Demand) (bool, string) {
	if holdsWeights(n, d) {
		return true, ""
	}
	return c.Check(n, p)
}

// Name implements Checker.
func (DiskChecker) Name() string { return "disk" }

// Check implements Checker.
func (DiskChecker) Check(n *Node, p spec.Profile) (bool, string) {
	need := gb(p.MinDiskGB)
	if n.DiskFreeBytes >= need {
		return true, ""
	}
	return false, fmt.Sprintf("%s GB free disk, needs %d GB", formatGB(n.DiskFreeBytes), p.MinDiskGB)
}

// LabelsChecker refuses nodes that do not carry every profile label with the
// same value. The reason names every label that is wrong, sorted by key.
type LabelsChecker struct{}

// Name implements Checker.
func (LabelsChecker) Name() string { return "labels" }

// Check implements Checker.
func (LabelsChecker) Check(n *Node, p spec.Profile) (bool, string) {
	var wrong []string
	for _, k := range slices.Sorted(maps.Keys(p.Labels)) {
		want := p.Labels[k]
		got, ok := n.Labels[k]
		switch {
		case !ok:
			wrong = append(wrong, fmt.Sprintf("missing label %s=%s", k, want))
		case got != want:
			wrong = append(wrong, fmt.Sprintf("label %s=%s, needs %s=%s", k, got, k, want))
		}
	}
	if len(wrong) == 0 {
		return true, ""
	}
	return false, strings.Join(wrong, "; ")
}

// FabricChecker refuses, for multi-node profiles, nodes with no fabric in
// service: such a node is its own island and hosts single-node replicas only.
// That the shards share one fabric is decided when nodes are chosen.
type FabricChecker struct{}

// Name implements Checker.
func (FabricChecker) Name() string { return "fabric" }

// Check implements Checker.
func (FabricChecker) Check(n *Node, p spec.Profile) (bool, string) {
	if p.Shards() <= 1 || n.Fabric != "" {
		return true, ""
	}
	return false, "no fabric in service: multi-node profiles need one"
}

// nodeClasses returns the node's distinct GPU classes, sorted.
func nodeClasses(n *Node) []string {
	var classes []string
	for _, g := range n.GPUs {
		if !slices.Contains(classes, g.Class) {
			classes = append(classes, g.Class)
		}
	}
	slices.Sort(classes)
	return classes
}

// freeByClass returns the free GPU indices of each class, ascending. A GPU
// index listed twice counts once.
func freeByClass(n *Node) map[string][]int {
	free := make(map[string][]int)
	seen := make(map[int]bool, len(n.GPUs))
	for _, g := range n.GPUs {
		if seen[g.Index] {
			continue
		}
		seen[g.Index] = true
		if _, used := n.UsedGPUs[g.Index]; used {
			continue
		}
		free[g.Class] = append(free[g.Class], g.Index)
	}
	for _, idx := range free {
		slices.Sort(idx)
	}
	return free
}

// freeCount returns the number of free GPUs on the node, of any class.
func freeCount(n *Node) int {
	total := 0
	for _, idx := range freeByClass(n) {
		total += len(idx)
	}
	return total
}

// gpuCount returns the number of distinct GPU indices on the node.
func gpuCount(n *Node) int {
	seen := make(map[int]bool, len(n.GPUs))
	for _, g := range n.GPUs {
		seen[g.Index] = true
	}
	return len(seen)
}

// pickGPUs chooses the GPUs a shard of p takes on n: the lowest free indices
// of the requested class. With no class requested, the shard still takes one
// class only: the class whose lowest free index is lowest among those with
// enough free GPUs. CPU profiles take none.
func pickGPUs(n *Node, p spec.Profile) ([]int, bool) {
	if p.TP <= 0 {
		return nil, true
	}
	free := freeByClass(n)
	if p.GPUClass != "" {
		idx := free[p.GPUClass]
		if len(idx) < p.TP {
			return nil, false
		}
		return slices.Clone(groupGPUs(n, idx, p.TP)), true
	}
	var best []int
	for _, idx := range free {
		if len(idx) >= p.TP && (best == nil || idx[0] < best[0]) {
			best = idx
		}
	}
	if best == nil {
		return nil, false
	}
	return slices.Clone(groupGPUs(n, best, p.TP)), true
}

// gb converts a count of GB (2^30 bytes) to bytes; negative counts are 0.
func gb(n int) uint64 {
	if n <= 0 {
		return 0
	}
	return uint64(n) << 30
}

// formatGB renders bytes as GB (2^30), rounded down to one decimal so that a
// shortfall never reads as enough ("7.9 GB", never "8.0 GB" for 7.99).
func formatGB(b uint64) string {
	v := math.Floor(float64(b)/(1<<30)*10) / 10
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
