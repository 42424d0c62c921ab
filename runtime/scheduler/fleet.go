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
	// byFree groups node positions, ascending, by (total GPUs, free GPUs);
	// byFabric by (fabric, total, free), for multi-node profiles.
	byFree   map[freeKey][]int
	byFabric map[freeKey][]int
	// byModel and bySource list the positions (ascending) of nodes that
	// hold replicas of a model, or weights from a source: the only nodes
	// the spread and weights-present rankers tell apart.
	byModel  map[string][]int
	bySource map[string][]int
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

type freeKey struct {
	fabric      string
	total, free int
}

// NewFleet prepares s for placements. s is not modified.
func NewFleet(s Snapshot) *Fleet {
	f := &Fleet{
		sc:       Default(),
		nodes:    slices.Clone(s.Nodes),
		index:    make(map[string]int, len(s.Nodes)),
		byFree:   map[freeKey][]int{},
		byFabric: map[freeKey][]int{},
		byModel:  map[string][]int{},
		bySource: map[string][]int{},
	}
	if !slices.IsSortedFunc(f.nodes, func(a, b Node) int { return cmp.Compare(a.ID, b.ID) }) {
		slices.SortStableFunc(f.nodes, func(a, b Node) int { return cmp.Compare(a.ID, b.ID) })
	}
	f.ptrs = make([]*Node, len(f.nodes))
	f.state = make([]nodeState, len(f.nodes))
	f.owned = make([]bool, len(f.nodes))
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
	keys := [2]freeKey{{total: st.total, free: st.free}, {fabric: f.nodes[i].Fabric, total: st.total, free: st.free}}
	for k, m := range []map[freeKey][]int{f.byFree, f.byFabric} {
		if add {
			m[keys[k]] = insertSorted(m[keys[k]], i)
		} else {
			m[keys[k]] = removeSorted(m[keys[k]], i)
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

func removeSorted(l []int, i int) []int {
	j, found := slices.BinarySearch(l, i)
	if !found {
		return l
	}
	return slices.Delete(l, j, j+1)
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
	groups := f.byFree
	if want > 1 {
		groups = f.byFabric
	}
	var cands []candidate
	seen := func(i int) bool {
		return slices.ContainsFunc(cands, func(c candidate) bool { return c.node == &f.nodes[i] })
	}
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
	for _, i := range f.byModel[d.Model] {
		consider(i)
	}
	if d.Source != "" {
		for _, i := range f.bySource[d.Source] {
			if !seen(i) {
				consider(i)
			}
		}
	}
	for k, l := range groups {
		if k.free < p.TP || (want > 1 && k.fabric == "") {
			continue
		}
		taken := 0
		for _, i := range l {
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
		n := &f.nodes[i]
		if !f.owned[i] {
			n.UsedGPUs = maps.Clone(n.UsedGPUs)
			n.Replicas = maps.Clone(n.Replicas)
			f.owned[i] = true
		}
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
				f.byModel[model] = removeSorted(f.byModel[model], i)
			}
		}
	}
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
