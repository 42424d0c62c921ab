package scheduler

import (
	"cmp"
	"maps"
	"slices"
	"strconv"

	"github.com/llmgw/llmgw/spec"
)

// Fleet is a Snapshot prepared for a whole pass of placements: nodes sorted
// once and indexed by ID, the free GPUs of each node kept by class and
// updated in place by Assume, and feasible nodes grouped by what the default
// rankers see of them, so that a Place looks at a few candidates rather than
// every node. Its decisions are exactly those of Place and Assume on the
// equivalent Snapshot with the default scheduler; its plans carry a
// per-profile summary only, and Explain gives every node's verdict.
//
// A Fleet is not safe for concurrent use. It owns copies of the maps it
// changes, so the Snapshot it was built from is never modified.
type Fleet struct {
	sc    Scheduler
	nodes []Node
	ptrs  []*Node
	index map[string]int
	state []nodeState
	owned []bool
	// all groups every node by (total GPUs, free GPUs); fabrics groups the
	// nodes of each fabric alike, for multi-node profiles, and fabric and
	// local say where node i is among them (fabric -1 for none).
	all     scope
	fabrics []*scope
	fabric  []int
	local   []int
	// byModel and bySource list the positions (ascending) of nodes that
	// hold replicas of a model, or weights from a source: the only nodes
	// the spread and weights-present rankers tell apart.
	byModel  map[string][]int
	bySource map[string][]int
	// cands is choose's buffer, kept between calls.
	cands []candidate
}

// scope is a set of nodes grouped by (total GPUs, free GPUs): within a
// group the default rankers score alike every node the spread and
// weights-present rankers do not set apart.
type scope struct {
	members []int // node positions, ascending; a group holds indices into it
	groups  []*freeGroup
	byKey   map[freeKey]*freeGroup
}

// freeGroup is the members of a scope with total GPUs and free of them free.
type freeGroup struct {
	freeKey
	set idSet
}

type freeKey struct{ total, free int }

// group returns the scope's group for k, made on first use.
func (sc *scope) group(k freeKey) *freeGroup {
	g := sc.byKey[k]
	if g == nil {
		g = &freeGroup{freeKey: k, set: newIDSet(len(sc.members))}
		sc.byKey[k] = g
		sc.groups = append(sc.groups, g)
	}
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
	f.all = scope{members: make([]int, n), byKey: map[freeKey]*freeGroup{}}
	byName := map[string]int{}
	for i := range f.nodes {
		f.all.members[i] = i
		f.fabric[i] = -1
		if name := f.nodes[i].Fabric; name != "" {
			k, ok := byName[name]
			if !ok {
				k = len(f.fabrics)
				byName[name] = k
				f.fabrics = append(f.fabrics, &scope{byKey: map[freeKey]*freeGroup{}})
			}
			f.fabric[i], f.local[i] = k, len(f.fabrics[k].members)
			f.fabrics[k].members = append(f.fabrics[k].members, i)
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
// counts once, with the class it was first listed with.
func newNodeState(n *Node) nodeState {
	st := nodeState{node: n}
	for i, g := range n.GPUs {
		if slices.ContainsFunc(n.GPUs[:i], func(h GPU) bool { return h.Index == g.Index }) {
			continue
		}
		st.total++
		if _, used := n.UsedGPUs[g.Index]; used {
			continue
		}
		st.free++
		j, found := slices.BinarySearchFunc(st.classes, g.Class, func(c classFree, class string) int { return cmp.Compare(c.class, class) })
		if !found {
			st.classes = slices.Insert(st.classes, j, classFree{class: g.Class})
		}
		k, _ := slices.BinarySearch(st.classes[j].free, g.Index)
		st.classes[j].free = slices.Insert(st.classes[j].free, k, g.Index)
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
	set := func(sc *scope, j int) {
		if g := sc.group(k); add {
			g.set.add(j)
		} else {
			g.set.remove(j)
		}
	}
	set(&f.all, i)
	if fab := f.fabric[i]; fab >= 0 {
		set(f.fabrics[fab], f.local[i])
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
	cands := f.cands[:0]
	consider := func(i int) bool {
		if !f.feasible(i, p, d) {
			return false
		}
		gpus, _ := f.state[i].pick(p)
		cands = append(cands, candidate{node: &f.nodes[i], gpus: gpus, score: f.score(i, p, d)})
		return true
	}
	special := func(i int) bool {
		n := &f.nodes[i]
		return n.Replicas[d.Model] > 0 || (d.Source != "" && slices.Contains(n.ModelsPresent, d.Source))
	}
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
		consider(i)
	}
	scopes := []*scope{&f.all}
	if want > 1 {
		scopes = f.fabrics
	}
	for _, sc := range scopes {
		for _, g := range sc.groups {
			if g.free < p.TP {
				continue
			}
			taken := 0
			for j := g.set.next(0); j >= 0; j = g.set.next(j + 1) {
				i := sc.members[j]
				if special(i) {
					continue
				}
				if consider(i) {
					if taken++; taken == want {
						break
					}
				}
			}
		}
	}
	f.cands = cands
	slices.SortFunc(cands, func(a, b candidate) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return cmp.Compare(a.node.ID, b.node.ID)
	})
	var chosen []candidate
	if want == 1 {
		if len(cands) > 0 {
			chosen = cands[:1]
		}
	} else {
		chosen = chooseFabric(cands, want)
	}
	for j := range chosen {
		chosen[j].gpus = slices.Clone(chosen[j].gpus)
	}
	return chosen
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
	var binpack float64
	if st.total > 0 {
		binpack = clamp01(1 - float64(st.free-p.TP)/float64(st.total))
	}
	var sum float64
	sum += clamp01(binpack)
	sum += clamp01(WeightsPresentRanker{}.Score(n, p, d, nil))
	sum += clamp01(SpreadRanker{}.Score(n, p, d, nil))
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
		n := &f.nodes[i]
		if !f.owned[i] {
			n.UsedGPUs = maps.Clone(n.UsedGPUs)
			n.Replicas = maps.Clone(n.Replicas)
			f.owned[i] = true
		}
		if n.UsedGPUs == nil {
			n.UsedGPUs = make(map[int]string, len(sh.GPUIndices))
		}
		f.bucket(i, false)
		st := &f.state[i]
		for _, g := range sh.GPUIndices {
			n.UsedGPUs[g] = d.Model + "/" + p.Name + "/" + strconv.Itoa(sh.Rank)
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
