package scheduler

import (
	"slices"

	"github.com/llmgw/llmgw/spec"
)

// Ranker scores a feasible node for one signal. Scores are in [0, 1], higher
// is better; a node's score is the mean over all rankers, so no signal can
// outweigh the others by its scale alone.
type Ranker interface {
	// Name names the signal, e.g. "bin-pack".
	Name() string
	// Score scores n for a shard of p taking gpus (empty for CPU
	// profiles) on behalf of d.
	Score(n *Node, p spec.Profile, d Demand, gpus []int) float64
}

// DefaultRankers returns the rankers Place uses.
func DefaultRankers() []Ranker {
	return []Ranker{BinPackRanker{}, WeightsPresentRanker{}, SpreadRanker{}}
}

// BinPackRanker prefers the node left fullest by the placement, so that
// whole nodes stay free for large replicas. For GPU profiles it scores the
// share of the node's GPUs in use after placement; for CPU profiles, the
// share of its memory committed after placement (MinMemoryGB counted as
// used).
type BinPackRanker struct{}

// Name implements Ranker.
func (BinPackRanker) Name() string { return "bin-pack" }

// Score implements Ranker.
func (BinPackRanker) Score(n *Node, p spec.Profile, _ Demand, gpus []int) float64 {
	if p.TP > 0 {
		total := gpuCount(n)
		if total == 0 {
			return 0
		}
		freeAfter := freeCount(n) - len(gpus)
		return clamp01(1 - float64(freeAfter)/float64(total))
	}
	if n.MemoryBytes == 0 {
		return 0
	}
	need := gb(p.MinMemoryGB)
	var freeAfter uint64
	if n.FreeMemoryBytes > need {
		freeAfter = n.FreeMemoryBytes - need
	}
	return clamp01(1 - float64(freeAfter)/float64(n.MemoryBytes))
}

// WeightsPresentRanker prefers a node that already holds the model's weights
// (Node.ModelsPresent contains Demand.Source), which saves moving tens of
// gigabytes before the replica can start.
type WeightsPresentRanker struct{}

// Name implements Ranker.
func (WeightsPresentRanker) Name() string { return "weights-present" }

// Score implements Ranker.
func (WeightsPresentRanker) Score(n *Node, _ spec.Profile, d Demand, _ []int) float64 {
	if d.Source != "" && slices.Contains(n.ModelsPresent, d.Source) {
		return 1
	}
	return 0
}

// SpreadRanker prefers nodes holding fewer replicas of the model, so that
// losing one node loses as few replicas as possible: 1/(1+r) for r replicas
// already there. Sharing a node is allowed, only ranked lower.
type SpreadRanker struct{}

// Name implements Ranker.
func (SpreadRanker) Name() string { return "spread" }

// Score implements Ranker.
func (SpreadRanker) Score(n *Node, _ spec.Profile, d Demand, _ []int) float64 {
	r := max(n.Replicas[d.Model], 0)
	return 1 / float64(1+r)
}

func clamp01(v float64) float64 {
	return min(max(v, 0), 1)
}
