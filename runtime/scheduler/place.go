package scheduler

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/llmgw/llmgw/spec"
)

// Scheduler is a feasibility chain and a set of rankers. The zero value has
// neither; use Default for the chain Place uses.
type Scheduler struct {
	// Checkers run in order; the first refusal is the node's reason.
	Checkers []Checker
	// Rankers score feasible nodes; a node's score is their mean.
	Rankers []Ranker
}

// Default returns the scheduler Place and Explain use: DefaultCheckers and
// DefaultRankers.
func Default() Scheduler {
	return Scheduler{Checkers: DefaultCheckers(), Rankers: DefaultRankers()}
}

// Place places one replica of d on the fleet s with the default scheduler.
func Place(s Snapshot, d Demand) Plan {
	return Default().Place(s, d)
}

// Explain evaluates d against s exactly as Place does, without committing to
// anything, and returns the record of why each node was or was not chosen.
func Explain(s Snapshot, d Demand) Explanation {
	return Default().Explain(s, d)
}

// Explain evaluates d against s as Place does and returns its explanation.
func (sc Scheduler) Explain(s Snapshot, d Demand) Explanation {
	return sc.Place(s, d).Explanation
}

// Place tries d's profiles in priority order (higher first, ties in
// declaration order) and returns the plan of the first one that places. The
// explanation covers every profile tried.
func (sc Scheduler) Place(s Snapshot, d Demand) Plan {
	nodes := make([]*Node, len(s.Nodes))
	for i := range s.Nodes {
		nodes[i] = &s.Nodes[i]
	}
	// Snapshots usually arrive sorted (the reconciler's do): check first.
	byID := func(a, b *Node) int { return cmp.Compare(a.ID, b.ID) }
	if !slices.IsSortedFunc(nodes, byID) {
		slices.SortStableFunc(nodes, byID)
	}

	plan := Plan{Explanation: Explanation{Model: d.Model}}
	for _, p := range orderProfiles(d.Profiles) {
		pe, placed := sc.evaluate(nodes, d, p)
		plan.Explanation.Profiles = append(plan.Explanation.Profiles, pe)
		if placed != nil {
			plan.Placed = true
			plan.Profile = p
			plan.Shards = placed.shards
			plan.Fabric = placed.fabric
			break
		}
	}
	return plan
}

// orderProfiles returns the profiles by priority, highest first, keeping
// declaration order among equals.
func orderProfiles(ps []spec.Profile) []spec.Profile {
	byPriority := func(a, b spec.Profile) int { return cmp.Compare(b.Priority, a.Priority) }
	if slices.IsSortedFunc(ps, byPriority) {
		return ps // already in order; nothing changes it
	}
	out := slices.Clone(ps)
	slices.SortStableFunc(out, byPriority)
	return out
}

// candidate is a feasible node with the GPUs a shard would take on it.
type candidate struct {
	node  *Node
	at    int // the node's position in a Fleet
	gpus  []int
	score float64
}

// placement is a profile's chosen shards.
type placement struct {
	shards []ShardPlacement
	fabric string
}

// evaluate runs one profile through feasibility, ranking and selection.
// placement is nil when the profile does not place.
func (sc Scheduler) evaluate(nodes []*Node, d Demand, p spec.Profile) (ProfileExplanation, *placement) {
	pe := ProfileExplanation{Profile: p.Name, Nodes: make([]NodeVerdict, len(nodes))}
	if problem := validateProfile(p); problem != "" {
		for i, n := range nodes {
			pe.Nodes[i] = NodeVerdict{NodeID: n.ID, Reason: "not evaluated: profile is invalid"}
		}
		pe.Summary = fmt.Sprintf("profile %s is invalid: %s", p.Name, problem)
		return pe, nil
	}

	var feasible []candidate
	for i, n := range nodes {
		v := NodeVerdict{NodeID: n.ID}
		if reason := sc.refusal(n, p, d); reason != "" {
			v.Reason = reason
		} else {
			gpus, _ := pickGPUs(n, p)
			v.Feasible = true
			if holdsWeights(n, d) {
				v.Reason = "holds the weights"
			}
			v.Score = sc.score(n, p, d, gpus)
			feasible = append(feasible, candidate{node: n, gpus: gpus, score: v.Score})
		}
		pe.Nodes[i] = v
	}
	slices.SortStableFunc(feasible, func(a, b candidate) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return cmp.Compare(a.node.ID, b.node.ID)
	})

	var chosen []candidate
	if p.Shards() == 1 {
		if len(feasible) > 0 {
			chosen = feasible[:1]
		}
	} else {
		chosen = chooseFabric(feasible, p.Shards())
	}
	if chosen == nil {
		pe.Summary = notPlacedSummary(nodes, pe.Nodes, p)
		return pe, nil
	}

	pl := placementOf(chosen)
	pe.Placed = true
	pe.Summary = placedSummary(pl, p)
	return pe, pl
}

// placementOf turns the chosen candidates, in rank order, into a placement.
func placementOf(chosen []candidate) *placement {
	pl := &placement{fabric: chosen[0].node.Fabric}
	for rank, c := range chosen {
		pl.shards = append(pl.shards, ShardPlacement{Rank: rank, NodeID: c.node.ID, GPUIndices: c.gpus, TopologyNote: topologyNote(c.node, c.gpus, len(c.gpus))})
	}
	return pl
}

// placedSummary says where pl put a replica of p.
func placedSummary(pl *placement, p spec.Profile) string {
	var b strings.Builder
	b.WriteString("placed on ")
	for rank, sh := range pl.shards {
		if rank > 0 {
			b.WriteString(", ")
		}
		b.WriteString(sh.NodeID)
		b.WriteString(" (")
		writeGPUList(&b, sh.GPUIndices)
		if sh.TopologyNote != "" {
			b.WriteString("; ")
			b.WriteString(sh.TopologyNote)
		}
		b.WriteString(")")
	}
	if p.Shards() > 1 {
		b.WriteString(" in fabric ")
		b.WriteString(pl.fabric)
	}
	return b.String()
}

// refusal returns why n cannot hold a shard of p, or "" when it can.
func (sc Scheduler) refusal(n *Node, p spec.Profile, d Demand) string {
	for _, c := range sc.Checkers {
		ok, reason := false, ""
		if dc, isDC := c.(DemandChecker); isDC {
			ok, reason = dc.CheckDemand(n, p, d)
		} else {
			ok, reason = c.Check(n, p)
		}
		if !ok {
			if reason == "" {
				reason = "refused by " + c.Name()
			}
			return reason
		}
	}
	// The GPUs must exist whatever the chain says: a plan never names a
	// GPU that is not free.
	if _, ok := pickGPUs(n, p); !ok {
		if ok, reason := (GPUClassChecker{}).Check(n, p); !ok {
			return reason
		}
		_, reason := FreeGPUsChecker{}.Check(n, p)
		return reason
	}
	return ""
}

// score is the mean of the rankers' scores, 0 with no rankers.
func (sc Scheduler) score(n *Node, p spec.Profile, d Demand, gpus []int) float64 {
	if len(sc.Rankers) == 0 {
		return 0
	}
	var sum float64
	for _, r := range sc.Rankers {
		sum += clamp01(r.Score(n, p, d, gpus))
	}
	return sum / float64(len(sc.Rankers))
}

// chooseFabric picks, among the fabrics with at least want feasible nodes,
// the one whose best want nodes have the highest mean score; ties go to the
// faster fabric (its slowest chosen link), then to the lower name. The
// candidates come sorted best first; the result is in rank order.
func chooseFabric(feasible []candidate, want int) []candidate {
	byFabric := make(map[string][]candidate)
	var fabrics []string
	for _, c := range feasible {
		f := c.node.Fabric
		if f == "" {
			continue // FabricChecker refuses these; never trust a chain to.
		}
		if _, ok := byFabric[f]; !ok {
			fabrics = append(fabrics, f)
		}
		byFabric[f] = append(byFabric[f], c)
	}
	slices.Sort(fabrics)

	var best []candidate
	var bestScore, bestRate float64
	for _, f := range fabrics {
		cs := byFabric[f]
		if len(cs) < want {
			continue
		}
		cs = cs[:want]
		score, rate := fabricMerit(cs)
		if best == nil || score > bestScore || (score == bestScore && rate > bestRate) {
			best, bestScore, bestRate = cs, score, rate
		}
	}
	return best
}

// fabricMerit is what chooseFabric compares fabrics by: the mean score of
// the chosen candidates and the slowest of their links.
func fabricMerit(cs []candidate) (score, rate float64) {
	var sum float64
	rate = cs[0].node.FabricRateGbps
	for _, c := range cs {
		sum += c.score
		rate = min(rate, c.node.FabricRateGbps)
	}
	return sum / float64(len(cs)), rate
}

// validateProfile returns what is wrong with p, or "" when nothing is: the
// catalog's own rules (spec.Profile.Validate) on p with its defaults filled,
// so a profile that reaches the scheduler broken is refused, not placed.
func validateProfile(p spec.Profile) string {
	p.Normalize()
	err := p.Validate()
	if err == nil {
		return ""
	}
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

// maxListed is how many node IDs a summary names before "and N more".
const maxListed = 5

// notPlacedSummary says why p did not place.
func notPlacedSummary(nodes []*Node, verdicts []NodeVerdict, p spec.Profile) string {
	if len(nodes) == 0 {
		return fmt.Sprintf("no node can hold profile %s: the fleet has no nodes", p.Name)
	}
	rejected := groupReasons(verdicts)
	if p.Shards() == 1 {
		return fmt.Sprintf("no node can hold profile %s: %s", p.Name, rejected)
	}

	type count struct {
		total    int
		feasible []string
	}
	counts := make(map[string]*count)
	for i, n := range nodes {
		if n.Fabric == "" {
			continue
		}
		c := counts[n.Fabric]
		if c == nil {
			c = &count{}
			counts[n.Fabric] = c
		}
		c.total++
		if verdicts[i].Feasible {
			c.feasible = append(c.feasible, n.ID)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "needs %d nodes in one fabric; ", p.Shards())
	if len(counts) == 0 {
		b.WriteString("no node has a fabric in service")
	} else {
		var fabrics []string
		for _, f := range sortedKeys(counts) {
			c := counts[f]
			s := fmt.Sprintf("fabric %s has %d feasible %s of %d", f, len(c.feasible), plural(len(c.feasible), "node", "nodes"), c.total)
			if len(c.feasible) > 0 {
				s += " (" + listIDs(c.feasible) + ")"
			}
			fabrics = append(fabrics, s)
		}
		b.WriteString(strings.Join(fabrics, ", "))
	}
	if rejected != "" {
		b.WriteString("; rejected ")
		b.WriteString(rejected)
	}
	return b.String()
}

// groupReasons renders the refused nodes grouped by reason, in node order:
// "node01, node02: not ready; node03: 1 free GPU, needs 2".
func groupReasons(verdicts []NodeVerdict) string {
	var reasons []string
	ids := make(map[string][]string)
	for _, v := range verdicts {
		if v.Feasible {
			continue
		}
		if _, ok := ids[v.Reason]; !ok {
			reasons = append(reasons, v.Reason)
		}
		ids[v.Reason] = append(ids[v.Reason], v.NodeID)
	}
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		parts[i] = listIDs(ids[r]) + ": " + r
	}
	return strings.Join(parts, "; ")
}

// listIDs joins IDs, naming at most maxListed of them.
func listIDs(ids []string) string {
	if len(ids) <= maxListed {
		return strings.Join(ids, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ids[:maxListed], ", "), len(ids)-maxListed)
}

// writeGPUList renders a shard's GPUs: "gpus 0,1", "gpu 3" or "cpu only".
func writeGPUList(b *strings.Builder, gpus []int) {
	if len(gpus) == 0 {
		b.WriteString("cpu only")
		return
	}
	b.WriteString(plural(len(gpus), "gpu ", "gpus "))
	for i, g := range gpus {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(g))
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
