package scheduler

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"strconv"

	"github.com/llmgw/llmgw/spec"
)

// Fleet is a Snapshot prepared for a whole pass of placements: nodes sorted
// once and indexed by ID, the free GPUs of each node kept by class and
// updated in place by Assume, and nodes grouped by what the default rankers
// see of them (their GPU total and free count), in the fleet and in each
// fabric, so that a Place looks at a few candidates rather than every node:
// the nodes the spread and weights-present rankers set apart, the first
// feasible nodes of each group, and for a multi-node profile only the
// fabrics that could still beat the best one found (chooseFabric). A GPU
// profile's Place costs the same on a fleet of any size; a CPU profile's,
// and one that places nowhere (its plan explains every node), check every
// node. Its decisions are exactly those of Place and Assume on the
// equivalent Snapshot with the default scheduler; its plans carry a
// per-profile summary only, and Explain gives every node's verdict.
//
// A Fleet is not safe for concurrent use, not even by Places alone: they
// share its buffers. It owns copies of the maps it changes, so the Snapshot
// it was built from is never modified.
type Fleet struct {
	sc    Scheduler
	nodes []Node
	ptrs  []*Node
	index map[string]int
	state []nodeState
	owned []bool
	// all groups every node by (total GPUs, free GPUs); fabrics, sorted by
	// name, group the nodes of each fabric alike, for multi-node profiles,
	// and fabric and local say where node i is among them (fabric -1 for
	// none).
	all     scope
	fabrics []*scope
	fabric  []int
	local   []int
	// maxRate is the fastest link of any fabric. prune is false when a
	// node's link rate is NaN, which no bound orders: every fabric with
	// candidates is then evaluated.
	maxRate float64
	prune   bool
	// byModel and bySource list the positions (ascending) of nodes that
	// hold replicas of a model, or weights from a source: the only nodes
	// the spread and weights-present rankers tell apart.
	byModel  map[string][]int
	bySource map[string][]int
	// Buffers kept between calls of choose, and the call that last
	// evaluated each fabric.
	cands, fabCands, best []candidate
	tiers                 []*freeGroup
	evaluated             []uint64
	call                  uint64
}

// scope is a set of nodes grouped by (total GPUs, free GPUs): within a
// group the default rankers score alike every node the spread and
// weights-present rankers do not set apart.
type scope struct {
	members  []int   // node positions, ascending; a group holds indices into it
	maxRate  float64 // a fabric's fastest link
	nFabrics int     // the all scope's: how many fabrics its groups index
	groups   []*freeGroup
	byKey    [][]*freeGroup // [total][free]
}

// freeGroup is the members of a scope with total GPUs and free of them free.
type freeGroup struct {
	freeKey
	set idSet
	// fabrics, in the all scope's groups, holds every fabric whose own
	// group of this key has a member.
	fabrics idSet
	// score is a member's score for the profile being placed, when the
	// spread and weights-present rankers do not set it apart.
	score float64
}

type freeKey struct{ total, free int }

// group returns the scope's group for k, made on first use.
func (sc *scope) group(k freeKey) *freeGroup {
	if k.total < len(sc.byKey) {
		if g := sc.byKey[k.total][k.free]; g != nil {
			return g
		}
	} else {
		sc.byKey = slices.Grow(sc.byKey, k.total+1-len(sc.byKey))
		for t := len(sc.byKey); t <= k.total; t++ {
			sc.byKey = append(sc.byKey, make([]*freeGroup, t+1))
		}
	}
	g := &freeGroup{freeKey: k, set: newIDSet(len(sc.members)), fabrics: newIDSet(sc.nFabrics)}
	sc.byKey[k.total][k.free] = g
	sc.groups = append(sc.groups, g)
	return g
}

// nodeState is a node's GPUs as the checkers and rankers read them.
type nodeState struct {
	total   int         // distinct GPU indices
	free    int         // free GPUs of any class
	classes []classFree // by class name
	node    *Node       // for its NVLink topology (groupGPUs)
}

type classFree struct {
	class string
	free  []int // ascending
}

// NewFleet prepares s for placements. s is not modified.
func NewFleet(s Snapshot) *Fleet {
	f := &Fleet{
		sc:       Default(),
		nodes:    slices.Clone(s.Nodes),
		index:    make(map[string]int, len(s.Nodes)),
		byModel:  map[string][]int{},
		bySource: map[string][]int{},
	}
	if !slices.IsSortedFunc(f.nodes, func(a, b Node) int { return cmp.Compare(a.ID, b.ID) }) {
		slices.SortStableFunc(f.nodes, func(a, b Node) int { return cmp.Compare(a.ID, b.ID) })
	}
	n := len(f.nodes)
	f.ptrs = make([]*Node, n)
	f.state = make([]nodeState, n)
	f.owned = make([]bool, n)
	f.fabric = make([]int, n)
	f.local = make([]int, n)
	fabricOf := map[string]int{}
	for i := range f.nodes {
		if name := f.nodes[i].Fabric; name != "" {
			fabricOf[name] = 0
		}
	}
	names := slices.Sorted(maps.Keys(fabricOf))
	for k, name := range names {
		fabricOf[name] = k
	}
	f.fabrics = make([]*scope, len(names))
	for k := range f.fabrics {
		f.fabrics[k] = &scope{}
	}
	f.evaluated = make([]uint64, len(names))
	f.all = scope{members: make([]int, n), nFabrics: len(names)}
	f.prune = true
	for i := range f.nodes {
		f.all.members[i] = i
		f.fabric[i] = -1
		name, rate := f.nodes[i].Fabric, f.nodes[i].FabricRateGbps
		if name == "" {
			continue
		}
		k := fabricOf[name]
		sc := f.fabrics[k]
		if len(sc.members) == 0 || rate > sc.maxRate {
			sc.maxRate = rate
		}
		if math.IsNaN(rate) {
			f.prune = false
		}
		f.fabric[i], f.local[i] = k, len(sc.members)
		sc.members = append(sc.members, i)
	}
	for k, sc := range f.fabrics {
		if k == 0 || sc.maxRate > f.maxRate {
			f.maxRate = sc.maxRate
		}
	}
	for i := range f.nodes {
		n := &f.nodes[i]
		f.ptrs[i] = n
		if _, dup := f.index[n.ID]; !dup {
			f.index[n.ID] = i // the first, as Assume finds it
		}
		f.state[i] = newNodeState(n)
		f.bucket(i, true)
		for m, r := range n.Replicas {
			if r > 0 {
				f.byModel[m] = append(f.byModel[m], i)
			}
		}
		for _, src := range n.ModelsPresent {
			if l := f.bySource[src]; len(l) == 0 || l[len(l)-1] != i {
				f.bySource[src] = append(l, i)
			}
		}
	}
	return f
}

// newNodeState reads n's GPUs as freeByClass does: a GPU index listed twice
// counts once, with the class it was first listed with. The free lists of
// all classes share one array.
func newNodeState(n *Node) nodeState {
	st := nodeState{node: n}
	type freeGPU struct {
		class string
		index int
	}
	var buf [16]freeGPU
	free := buf[:0]
	var low uint64 // indices 0-63 seen, the rest looked up
	for i, g := range n.GPUs {
		if g.Index >= 0 && g.Index < 64 {
			if low&(1<<g.Index) != 0 {
				continue
			}
			low |= 1 << g.Index
		} else if slices.ContainsFunc(n.GPUs[:i], func(h GPU) bool { return h.Index == g.Index }) {
			continue
		}
		st.total++
		if _, used := n.UsedGPUs[g.Index]; !used {
			free = append(free, freeGPU{g.Class, g.Index})
		}
	}
	st.free = len(free)
	if len(free) == 0 {
		return st
	}
	slices.SortFunc(free, func(a, b freeGPU) int {
		if c := cmp.Compare(a.class, b.class); c != 0 {
			return c
		}
		return cmp.Compare(a.index, b.index)
	})
	indices := make([]int, len(free))
	for j, g := range free {
		indices[j] = g.index
		if j == 0 || g.class != free[j-1].class {
			st.classes = append(st.classes, classFree{class: g.class})
		}
		c := &st.classes[len(st.classes)-1]
		start := j - len(c.free)
		c.free = indices[start : j+1 : j+1]
	}
	return st
}

// pick is pickGPUs on the state: the GPUs are a view, not a copy.
func (st *nodeState) pick(p spec.Profile) ([]int, bool) {
	if p.TP <= 0 {
		return nil, true
	}
	if p.GPUClass != "" {
		for _, c := range st.classes {
			if c.class == p.GPUClass {
				if len(c.free) < p.TP {
					return nil, false
				}
				return groupGPUs(st.node, c.free, p.TP), true
			}
		}
		return nil, false
	}
	var best []int
	for _, c := range st.classes {
		if len(c.free) >= p.TP && (best == nil || c.free[0] < best[0]) {
			best = c.free
		}
	}
	if best == nil {
		return nil, false
	}
	return groupGPUs(st.node, best, p.TP), true
}

// bucket adds (or removes) node i to the groups of its current state.
func (f *Fleet) bucket(i int, add bool) {
	st := &f.state[i]
	k := freeKey{total: st.total, free: st.free}
	g := f.all.group(k)
	fab := f.fabric[i]
	if add {
		g.set.add(i)
		if fab >= 0 {
			fg := f.fabrics[fab].group(k)
			if fg.set.empty() {
				g.fabrics.add(fab)
			}
			fg.set.add(f.local[i])
		}
		return
	}
	g.set.remove(i)
	if fab >= 0 {
		fg := f.fabrics[fab].group(k)
		fg.set.remove(f.local[i])
		if fg.set.empty() {
			g.fabrics.remove(fab)
		}
	}
}

func insertSorted(l []int, i int) []int {
	j, found := slices.BinarySearch(l, i)
	if found {
		return l
	}
	return slices.Insert(l, j, i)
}

// Snapshot returns the fleet as it now is, nodes sorted by ID. Later
// Assumes do not change it.
func (f *Fleet) Snapshot() Snapshot {
	clear(f.owned) // the maps are shared now: the next Assume copies them
	return Snapshot{Nodes: slices.Clone(f.nodes)}
}

// Explain is Explain on the fleet as it now is: every node's verdict.
func (f *Fleet) Explain(d Demand) Explanation {
	return f.full(d).Explanation
}

// full is the default scheduler's Place over every node, with verdicts.
func (f *Fleet) full(d Demand) Plan {
	plan := Plan{Explanation: Explanation{Model: d.Model}}
	for _, p := range orderProfiles(d.Profiles) {
		pe, placed := f.sc.evaluate(f.ptrs, d, p)
		plan.Explanation.Profiles = append(plan.Explanation.Profiles, pe)
		if placed != nil {
			plan.Placed, plan.Profile, plan.Shards, plan.Fabric = true, p, placed.shards, placed.fabric
			break
		}
	}
	return plan
}

// notPlacedHere is the summary of a profile that did not place in a fast
// Place; Explain says why for each node.
const notPlacedHere = "not placed (explain-placement gives each node's reason)"

// Place places one replica of d as Place(f.Snapshot(), d) would, looking
// only at the candidates that can rank first. When nothing places, the plan
// carries the full explanation; otherwise each profile tried has its summary
// and no per-node verdicts.
func (f *Fleet) Place(d Demand) Plan {
	plan := Plan{Explanation: Explanation{Model: d.Model}}
	for _, p := range orderProfiles(d.Profiles) {
		var chosen []candidate
		if p.TP <= 0 || validateProfile(p) != "" {
			// CPU profiles rank by memory, which does not group: check
			// every node. Invalid profiles never place.
			pe, placed := f.sc.evaluate(f.ptrs, d, p)
			if placed != nil {
				pe.Nodes = nil
				plan.Explanation.Profiles = append(plan.Explanation.Profiles, pe)
				plan.Placed, plan.Profile, plan.Shards, plan.Fabric = true, p, placed.shards, placed.fabric
				return plan
			}
		} else {
			chosen = f.choose(d, p)
		}
		if chosen == nil {
			plan.Explanation.Profiles = append(plan.Explanation.Profiles, ProfileExplanation{Profile: p.Name, Summary: notPlacedHere})
			continue
		}
		pl := placementOf(chosen)
		plan.Explanation.Profiles = append(plan.Explanation.Profiles, ProfileExplanation{Profile: p.Name, Placed: true, Summary: placedSummary(pl, p)})
		plan.Placed, plan.Profile, plan.Shards, plan.Fabric = true, p, pl.shards, pl.fabric
		return plan
	}
	return f.full(d)
}

// choose returns the chosen candidates for a valid GPU profile, in rank
// order, or nil. The candidates are every node that can rank first within
// its fabric: the nodes the spread or weights-present rankers set apart, and
// from each group of nodes with equal GPU totals and free counts (whose
// other scores are equal) the first feasible nodes by ID.
func (f *Fleet) choose(d Demand, p spec.Profile) []candidate {
	want := p.Shards()
	f.cands = f.cands[:0]
	// The nodes set apart, once each: the union of two ascending lists.
	byModel, bySource := f.byModel[d.Model], []int(nil)
	if d.Source != "" {
		bySource = f.bySource[d.Source]
	}
	for len(byModel) > 0 || len(bySource) > 0 {
		var i int
		switch {
		case len(bySource) == 0 || (len(byModel) > 0 && byModel[0] < bySource[0]):
			i, byModel = byModel[0], byModel[1:]
		case len(byModel) == 0 || bySource[0] < byModel[0]:
			i, bySource = bySource[0], bySource[1:]
		default:
			i, byModel, bySource = byModel[0], byModel[1:], bySource[1:]
		}
		f.cands = f.consider(f.cands, i, p, d)
	}
	var chosen []candidate
	if want == 1 {
		for _, g := range f.all.groups {
			if g.free >= p.TP {
				f.cands = f.firstFeasible(f.cands, &f.all, g, 1, p, d)
			}
		}
		sortCandidates(f.cands)
		if len(f.cands) > 0 {
			chosen = f.cands[:1]
		}
	} else {
		chosen = f.chooseFabric(d, p, want)
	}
	for j := range chosen {
		chosen[j].gpus = slices.Clone(chosen[j].gpus)
	}
	return chosen
}

// chooseFabric is chooseFabric over the candidates choose would gather for
// a multi-node profile, evaluating as few fabrics as decide it: every
// fabric holding a node set apart (f.cands), then the others best bound
// first. A fabric whose best group's members score s can score at most
// want copies of s averaged, its link rate is at most its fastest link's,
// and ties go to the lower name: once no fabric left can beat the best by
// that bound, the best is the one chooseFabric picks.
func (f *Fleet) chooseFabric(d Demand, p spec.Profile, want int) []candidate {
	f.call++
	best, bestFab := f.best[:0], -1
	var bestScore, bestRate float64
	evaluate := func(k int, special []candidate) {
		f.evaluated[k] = f.call
		fc := append(f.fabCands[:0], special...)
		sc := f.fabrics[k]
		for _, g := range sc.groups {
			if g.free >= p.TP {
				fc = f.firstFeasible(fc, sc, g, want, p, d)
			}
		}
		f.fabCands = fc
		if len(fc) < want {
			return
		}
		sortCandidates(fc)
		score, rate := fabricMerit(fc[:want])
		if bestFab < 0 || score > bestScore || (score == bestScore && (rate > bestRate || (rate == bestRate && k < bestFab))) {
			best, bestFab, bestScore, bestRate = append(best[:0], fc[:want]...), k, score, rate
		}
	}
	if !f.prune {
		// chooseFabric itself, over the candidates of every fabric.
		for _, sc := range f.fabrics {
			for _, g := range sc.groups {
				if g.free >= p.TP {
					f.cands = f.firstFeasible(f.cands, sc, g, want, p, d)
				}
			}
		}
		sortCandidates(f.cands)
		return chooseFabric(f.cands, want)
	}
	// The fabrics of the nodes set apart (feasible ones all have one).
	special := f.cands
	slices.SortStableFunc(special, func(a, b candidate) int { return cmp.Compare(f.fabric[a.at], f.fabric[b.at]) })
	for j := 0; j < len(special); {
		k, e := f.fabric[special[j].at], j+1
		for e < len(special) && f.fabric[special[e].at] == k {
			e++
		}
		evaluate(k, special[j:e])
		j = e
	}
	// The others by tiers of groups whose members score alike, best first.
	tiers := f.tiers[:0]
	for _, g := range f.all.groups {
		if g.free >= p.TP && !g.fabrics.empty() {
			g.score = groupScore(g.total, g.free, p.TP)
			tiers = append(tiers, g)
		}
	}
	slices.SortFunc(tiers, func(a, b *freeGroup) int { return cmp.Compare(b.score, a.score) })
	f.tiers = tiers
	for t := 0; t < len(tiers); {
		e := t + 1
		for e < len(tiers) && tiers[e].score == tiers[t].score {
			e++
		}
		tier := tiers[t:e]
		t = e
		var sum float64
		for range want {
			sum += tier[0].score
		}
		bound := sum / float64(want) // as fabricMerit averages
		if bestFab >= 0 && bound < bestScore {
			break // every later tier's bound is at most this one
		}
		for k := nextFabric(tier, 0); k >= 0; k = nextFabric(tier, k+1) {
			if f.evaluated[k] == f.call {
				continue
			}
			rate := f.fabrics[k].maxRate
			if bestFab >= 0 && bound <= bestScore && (bound < bestScore || rate < bestRate || (rate == bestRate && k > bestFab)) {
				if bound < bestScore || (f.maxRate <= bestRate && k > bestFab) {
					break // no later fabric of the tier can beat the best
				}
				continue
			}
			evaluate(k, nil)
		}
	}
	return f.keepBest(best, bestFab)
}

// keepBest keeps best's array for the next call and returns best, nil when
// no fabric placed.
func (f *Fleet) keepBest(best []candidate, fab int) []candidate {
	f.best = best
	if fab < 0 {
		return nil
	}
	return best
}

// nextFabric returns the lowest fabric at or after k with a member in any of
// the groups, or -1.
func nextFabric(groups []*freeGroup, k int) int {
	next := -1
	for _, g := range groups {
		if j := g.fabrics.next(k); j >= 0 && (next < 0 || j < next) {
			next = j
		}
	}
	return next
}

// firstFeasible appends to cands the first want feasible members of group g
// of sc, by ID, that the spread and weights-present rankers do not set
// apart (choose takes those separately).
func (f *Fleet) firstFeasible(cands []candidate, sc *scope, g *freeGroup, want int, p spec.Profile, d Demand) []candidate {
	taken := 0
	for j := g.set.next(0); j >= 0; j = g.set.next(j + 1) {
		i := sc.members[j]
		n := &f.nodes[i]
		if n.Replicas[d.Model] > 0 || (d.Source != "" && slices.Contains(n.ModelsPresent, d.Source)) {
			continue
		}
		before := len(cands)
		if cands = f.consider(cands, i, p, d); len(cands) > before {
			if taken++; taken == want {
				break
			}
		}
	}
	return cands
}

// consider appends node i to cands when it is feasible.
func (f *Fleet) consider(cands []candidate, i int, p spec.Profile, d Demand) []candidate {
	if !f.feasible(i, p, d) {
		return cands
	}
	gpus, _ := f.state[i].pick(p)
	return append(cands, candidate{node: &f.nodes[i], at: i, gpus: gpus, score: f.score(i, p, d)})
}

// sortCandidates puts candidates in rank order: score, then ID.
func sortCandidates(cands []candidate) {
	slices.SortFunc(cands, func(a, b candidate) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return cmp.Compare(a.node.ID, b.node.ID)
	})
}

// feasible is the default checker chain's verdict on node i, without the
// reason.
func (f *Fleet) feasible(i int, p spec.Profile, d Demand) bool {
	n := &f.nodes[i]
	if !n.Ready || !n.Engines[p.Engine] {
		return false
	}
	if _, failed := n.EngineFailures[p.Engine]; failed {
		return false
	}
	if ok, _ := (EngineFlagsChecker{}).Check(n, p); !ok {
		return false
	}
	if _, ok := f.state[i].pick(p); !ok {
		return false
	}
	if n.FreeMemoryBytes < gb(p.MinMemoryGB) || (n.DiskFreeBytes < gb(p.MinDiskGB) && !holdsWeights(n, d)) {
		return false
	}
	for k, want := range p.Labels {
		if got, ok := n.Labels[k]; !ok || got != want {
			return false
		}
	}
	return p.Shards() <= 1 || n.Fabric != ""
}

// score is the default rankers' mean for a GPU profile on node i, computed
// as Scheduler.score computes it.
func (f *Fleet) score(i int, p spec.Profile, d Demand) float64 {
	n, st := &f.nodes[i], &f.state[i]
	return fleetScore(st.total, st.free, p.TP, WeightsPresentRanker{}.Score(n, p, d, nil), SpreadRanker{}.Score(n, p, d, nil))
}

// groupScore is the score of a node with total GPUs, free of them free,
// that neither holds the weights nor runs a replica of the model.
func groupScore(total, free, tp int) float64 {
	return fleetScore(total, free, tp, 0, 1)
}

// fleetScore is the mean of the default rankers' scores for a GPU profile
// of tp GPUs: bin-pack's from the node's GPUs, and the weights-present and
// spread rankers' own.
func fleetScore(total, free, tp int, weights, spread float64) float64 {
	var binpack float64
	if total > 0 {
		binpack = clamp01(1 - float64(free-tp)/float64(total))
	}
	var sum float64
	sum += clamp01(binpack)
	sum += clamp01(weights)
	sum += clamp01(spread)
	return sum / 3
}

// Assume updates the fleet in place as Assume updates a Snapshot: the
// plan's GPUs become used, its memory leaves the nodes, and each node
// counts one more replica of the model.
func (f *Fleet) Assume(d Demand, plan Plan) { f.assume(d, plan, true) }

// Take is Assume leaving the nodes' free memory as it is: the fleet as the
// control plane's own state reads once the replica is recorded, whose free
// memory is what the agents last reported.
func (f *Fleet) Take(d Demand, plan Plan) { f.assume(d, plan, false) }

// Release is the fleet once a replica of model, whose shards are placed as
// given, is gone: its GPUs are free again and each node counts one replica
// of the model fewer. Free memory is left as it is, as Take leaves it. A
// GPU not held, or that its node does not list, is skipped.
func (f *Fleet) Release(model string, shards []ShardPlacement) {
	for _, sh := range shards {
		i, ok := f.index[sh.NodeID]
		if !ok {
			continue
		}
		n := f.own(i)
		f.bucket(i, false)
		st := &f.state[i]
		for _, g := range sh.GPUIndices {
			if _, held := n.UsedGPUs[g]; !held {
				continue
			}
			delete(n.UsedGPUs, g)
			// The class it was first listed with, as newNodeState reads it.
			k := slices.IndexFunc(n.GPUs, func(x GPU) bool { return x.Index == g })
			if k < 0 {
				continue
			}
			class := n.GPUs[k].Class
			j, found := slices.BinarySearchFunc(st.classes, class, func(c classFree, class string) int { return cmp.Compare(c.class, class) })
			if !found {
				st.classes = slices.Insert(st.classes, j, classFree{class: class})
			}
			l, _ := slices.BinarySearch(st.classes[j].free, g)
			st.classes[j].free = slices.Insert(st.classes[j].free, l, g)
			st.free++
		}
		f.bucket(i, true)
		if n.Replicas[model] > 0 {
			n.Replicas[model]--
			if n.Replicas[model] == 0 {
				delete(n.Replicas, model)
				if j, found := slices.BinarySearch(f.byModel[model], i); found {
					f.byModel[model] = slices.Delete(f.byModel[model], j, j+1)
				}
			}
		}
	}
}

// own returns node i with maps of its own to change: after a Snapshot
// the node's maps are shared with it until the fleet first changes them.
func (f *Fleet) own(i int) *Node {
	n := &f.nodes[i]
	if !f.owned[i] {
		n.UsedGPUs = maps.Clone(n.UsedGPUs)
		n.Replicas = maps.Clone(n.Replicas)
		f.owned[i] = true
	}
	return n
}

func (f *Fleet) assume(d Demand, plan Plan, memory bool) {
	if !plan.Placed {
		return
	}
	p := plan.Profile
	for _, sh := range plan.Shards {
		i, ok := f.index[sh.NodeID]
		if !ok {
			continue
		}
		n := f.own(i)
		st := &f.state[i]
		if n.UsedGPUs == nil {
			n.UsedGPUs = make(map[int]string, max(st.total, len(sh.GPUIndices)))
		}
		f.bucket(i, false)
		holder := d.Model + "/" + p.Name + "/" + strconv.Itoa(sh.Rank)
		for _, g := range sh.GPUIndices {
			n.UsedGPUs[g] = holder
			for c := range st.classes {
				if j, found := slices.BinarySearch(st.classes[c].free, g); found {
					st.classes[c].free = slices.Delete(st.classes[c].free, j, j+1)
					st.free--
					break
				}
			}
		}
		f.bucket(i, true)
		if need := gb(p.MinMemoryGB); memory && n.FreeMemoryBytes > need {
			n.FreeMemoryBytes -= need
		} else if memory {
			n.FreeMemoryBytes = 0
		}
		if n.Replicas == nil {
			n.Replicas = make(map[string]int, 1)
		}
		n.Replicas[d.Model]++
		if n.Replicas[d.Model] == 1 {
			f.byModel[d.Model] = insertSorted(f.byModel[d.Model], i)
		}
	}
}
