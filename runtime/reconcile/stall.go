package reconcile

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/models"
	"github.com/llmgw/llmgw/runtime/scheduler"
)

// DefaultStallAfter is how long a model's needed replica must have failed
// to place, with nothing in the fleet freeing room, before the model is
// reported stalled (Options.StallAfter).
const DefaultStallAfter = 10 * time.Second

// stall records that a model needs a replica of its current generation that
// no node can hold.
type stall struct {
	generation string
	// why is the scheduler's explanation in one line.
	why string
	// since is when the stall began, or when something last freed room;
	// began is when it began, whatever freed room since.
	since, began time.Time
	// want and current are the replicas of the current generation wanted
	// (scaling.min, or more: desired) and those live not on a draining
	// node.
	want, current int
	// waiting are the live replicas that keep serving until a replacement
	// is ready: of an older generation or on a draining node.
	waiting []waitingReplica
	// logged records that the stall was logged once it lasted StallAfter.
	logged bool
}

type waitingReplica struct {
	id, profile string
	nodes       []string
	draining    bool
}

// noteStall records the outcome of scale's placement attempt for e: failed
// (with the scheduler's explanation) or not; want and current are the
// replicas of the current generation wanted and live. freeing says that
// something in the fleet is releasing room (a replica stopping or just
// begun draining, a node becoming ready), so the stall's clock starts
// again.
func (r *Reconciler) noteStall(tx *fleet.Tx, e models.Entry, failed bool, ex scheduler.Explanation, want, current int, old []*fleet.Replica, now time.Time) {
	r.backoffMu.Lock()
	defer r.backoffMu.Unlock()
	if !failed {
		delete(r.stalls, e.Model.Name)
		return
	}
	st := stall{generation: e.Generation, why: WhyNotPlaced(ex), since: now, began: now, want: want, current: current}
	if prev, ok := r.stalls[e.Model.Name]; ok && prev.generation == e.Generation {
		st.began, st.logged = prev.began, prev.logged
		if !r.freeing {
			st.since = prev.since
		}
	}
	for _, rep := range old {
		w := waitingReplica{id: rep.ID, profile: rep.Profile.Name, draining: onDrainingNode(tx, rep)}
		for _, s := range rep.Shards {
			w.nodes = append(w.nodes, s.Node)
		}
		st.waiting = append(st.waiting, w)
	}
	if !st.logged && st.lasted(now, r.opts.StallAfter) {
		st.logged = true
		r.log.Warn("rollout stalled", "model", e.Model.Name, "generation", e.Generation, "waiting", len(st.waiting), "why", st.why)
	}
	r.stalls[e.Model.Name] = st
}

// stallPatience is how many StallAfter a stall may be put off by room
// freeing elsewhere (a replica of another model stopping, a node becoming
// ready) that did not let it place: a fleet where something always stops
// must still report it.
const stallPatience = 3

// lasted reports whether the stall counts as one: StallAfter with nothing
// freeing room, or stallPatience × StallAfter in all.
func (st stall) lasted(now time.Time, after time.Duration) bool {
	return now.Sub(st.since) >= after || now.Sub(st.began) >= stallPatience*after
}

// fleetFreeing reports whether room may appear without anyone acting: a
// replica is stopping (its GPUs are released once its engines exit) or a
// connected node is still becoming ready.
func fleetFreeing(tx *fleet.Tx) bool {
	for _, rep := range tx.Replicas() {
		if rep.State == fleet.ReplicaStopping {
			return true
		}
	}
	for _, n := range tx.Nodes() {
		if n.Connected && n.State == fleet.NodePending {
			return true
		}
	}
	return false
}

// forgetStalls drops the stalls, wants and reasons not to place of models
// no longer in the catalog.
func (r *Reconciler) forgetStalls(byName map[string]models.Entry) {
	r.backoffMu.Lock()
	defer r.backoffMu.Unlock()
	for name := range r.stalls {
		if _, ok := byName[name]; !ok {
			delete(r.stalls, name)
		}
	}
	for name := range r.wants {
		if _, ok := byName[name]; !ok {
			delete(r.wants, name)
			delete(r.notPlaced, name)
		}
	}
}

// Stalled says why generation of model's rollout cannot make progress: a
// replica of it has not placed for StallAfter with nothing freeing room
// (or for 3 × StallAfter in all). It names the replicas that keep serving
// meanwhile. "" when that generation is not stalled: a stall of an
// earlier one, before the reconciler has tried the new, is not its.
func (r *Reconciler) Stalled(model, generation string) string {
	r.backoffMu.Lock()
	defer r.backoffMu.Unlock()
	st, ok := r.stalls[model]
	if !ok || st.generation != generation || !st.lasted(r.opts.Now(), r.opts.StallAfter) {
		return ""
	}
	var b strings.Builder
	if len(st.waiting) > 0 {
		fmt.Fprintf(&b, "generation %s cannot be placed: %s", st.generation, st.why)
		var keep []string
		for _, w := range st.waiting {
			how := "stale, profile " + w.profile
			if w.draining {
				how = "on a draining node"
			}
			keep = append(keep, fmt.Sprintf("%s (%s, on %s)", w.id, how, strings.Join(w.nodes, ", ")))
		}
		fmt.Fprintf(&b, "; %s until it can", serves(keep))
	} else {
		fmt.Fprintf(&b, "%d of %d replicas of generation %s placed; no node can hold another: %s", st.current, st.want, st.generation, st.why)
	}
	return b.String()
}

// serves is "replica X keeps serving" or "replicas X, Y keep serving".
func serves(ids []string) string {
	if len(ids) == 1 {
		return "replica " + ids[0] + " keeps serving"
	}
	return "replicas " + strings.Join(ids, ", ") + " keep serving"
}

// DrainBlocked says why draining node cannot finish: each replica on it
// whose replacement has not placed for StallAfter, and the scheduler's
// reason. "" when nothing blocks it.
func (r *Reconciler) DrainBlocked(node string) string {
	r.backoffMu.Lock()
	defer r.backoffMu.Unlock()
	var out []string
	for _, model := range sortedStallModels(r.stalls) {
		st := r.stalls[model]
		if !st.lasted(r.opts.Now(), r.opts.StallAfter) {
			continue
		}
		for _, w := range st.waiting {
			if w.draining && slices.Contains(w.nodes, node) {
				out = append(out, replicaCannotMove(w.id, model, w.nodes, st.why))
			}
		}
	}
	return strings.Join(out, "\n")
}

func sortedStallModels(m map[string]stall) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// replicaCannotMove is the one line naming a replica that cannot move.
func replicaCannotMove(id, model string, nodes []string, why string) string {
	return fmt.Sprintf("replica %s of model %s (on %s) cannot move: %s", id, model, strings.Join(nodes, ", "), why)
}

// WhyNotPlaced renders the scheduler's explanation of a replica that did
// not place in one line: each profile tried and its summary.
func WhyNotPlaced(ex scheduler.Explanation) string {
	if len(ex.Profiles) == 0 {
		return "the model has no profiles"
	}
	parts := make([]string, 0, len(ex.Profiles))
	for _, p := range ex.Profiles {
		s := p.Summary
		if !strings.Contains(s, "profile "+p.Profile) {
			s = "profile " + p.Profile + ": " + s
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// DrainCheck dry-runs draining node: for every replica on it whose model
// still wants it, whether the scheduler can place its replacement on
// another node (the original keeps its GPUs until the replacement is
// ready, and the replacements of one drain are placed together). It
// returns one line per replica that cannot move, naming it and why; a
// replica of a model no longer in the catalog, or one its model no longer
// needs, stops with the drain and is not listed. found is false when the
// node is not in the fleet.
func (r *Reconciler) DrainCheck(node string) (blocked []string, found bool) {
	entries := r.opts.Catalog.List()
	byName := make(map[string]models.Entry, len(entries))
	for _, e := range entries {
		byName[e.Model.Name] = e
	}
	r.opts.Fleet.Update(func(tx *fleet.Tx) {
		if tx.Node(node) == nil {
			return
		}
		found = true
		snap := snapshot(tx.Nodes(), tx.UsedGPUs(), tx.Replicas())
		for i := range snap.Nodes {
			if snap.Nodes[i].ID == node {
				snap.Nodes[i].Ready, snap.Nodes[i].NotReadyReason = false, "draining"
			}
		}
		keep := map[string]int{}
		on := map[string][]*fleet.Replica{}
		for _, rep := range tx.Replicas() {
			e, ok := byName[rep.Model]
			if !ok || !rep.Live() {
				continue
			}
			here := false
			for _, s := range rep.Shards {
				here = here || s.Node == node
			}
			if here {
				on[rep.Model] = append(on[rep.Model], rep)
			} else if isCurrent(tx, e, rep) {
				keep[rep.Model]++
			}
		}
		f := scheduler.NewFleet(snap)
		for _, model := range sortedReplicaModels(on) {
			e := byName[model]
			d := demand(e.Model)
			reps := on[model]
			for i := range min(e.Model.Scaling.Min-keep[model], len(reps)) {
				plan := f.Place(d)
				if !plan.Placed {
					var nodes []string
					for _, s := range reps[i].Shards {
						nodes = append(nodes, s.Node)
					}
					blocked = append(blocked, replicaCannotMove(reps[i].ID, model, nodes, WhyNotPlaced(plan.Explanation)))
					continue
				}
				f.Take(d, plan)
			}
		}
	})
	return blocked, found
}

func sortedReplicaModels(m map[string][]*fleet.Replica) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
