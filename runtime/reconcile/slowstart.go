package reconcile

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/models"
	"github.com/llmgw/llmgw/spec"
)

// A replica placed for a model's current definition that does not become
// ready is failed at its profile's startup_timeout plus 30 seconds, which
// is minutes by default. Long before that, once it has taken well past what
// replicas of the same build took before on its nodes, the model's rollout
// is reported stalled, naming the replica and its shards' state, error and
// last engine output: a `terraform apply` waiting for it fails then
// instead of at its rollout_timeout. The replica is left to go on starting.
//
// Starts are measured per node: a replica this control plane placed with
// its weights at hand (WarmStart) that became ready counts, for each node
// of its shards, as a start of its build (spec.ReplicaGeneration: same
// source, engine, tp, args, ...) there, and each node keeps the slowest.
// A replica is held to the slowest measured start over its nodes, and only
// when every one of its nodes has one: a multi-node replica on {a, c} is
// bounded by starts measured on {a, b} and on {c, d}. The node-local caches
// a start warms (the page cache, an engine's compile caches) are each
// node's own.
//
// Not bounded, so reported only when it fails: a replica with a node that
// has not run its build (a rollout's replacements, as a rule, since a new
// build has run nowhere; a replica on another node; any replica after a
// control-plane restart), one whose engine downloads its weights itself (a
// repository id), one on a node whose cache did not hold its fetched
// weights, and one placed while another replica of the same build was
// starting on a node they share, in the same pass or an earlier one (a
// scale-up placing several at once, or one after the other: they start
// concurrently and share the node's CPU, disk and compile workers, so a
// start measured alone does not compare); the other is then unbounded
// too. A healthy slow start must
// not fail an apply.

// startKey names one build of one profile of one model on one node.
type startKey struct{ model, profile, generation, node string }

// keysOf are the startKeys of rep, one per node of its shards (sorted,
// each once).
func keysOf(rep *fleet.Replica) []startKey {
	nodes := make([]string, 0, len(rep.Shards))
	for _, s := range rep.Shards {
		nodes = append(nodes, s.Node)
	}
	sort.Strings(nodes)
	nodes = slices.Compact(nodes)
	keys := make([]startKey, len(nodes))
	for i, n := range nodes {
		keys[i] = startKey{rep.Model, rep.Profile.Name, rep.Generation, n}
	}
	return keys
}

// expectedStart is the slowest measured start of rep's build over its
// nodes; false when a node of its has none.
func (r *Reconciler) expectedStart(rep *fleet.Replica) (time.Duration, bool) {
	keys := keysOf(rep)
	if len(keys) == 0 {
		return 0, false
	}
	var expected time.Duration
	for _, k := range keys {
		d, ok := r.startTime[k]
		if !ok {
			return 0, false
		}
		expected = max(expected, d)
	}
	return expected, true
}

// notePlaced marks rep, just placed, and every replica of its build
// (model, profile, generation) still starting on a node it shares as
// starting together: their starts are not bounded. The fleet is asked, so
// a start placed in an earlier pass that is still going counts as much as
// one placed in this pass.
func (r *Reconciler) notePlaced(tx *fleet.Tx, rep *fleet.Replica) {
	for _, o := range tx.ModelReplicas(rep.Model) {
		if o == rep || o.State != fleet.ReplicaStarting || o.Profile.Name != rep.Profile.Name || o.Generation != rep.Generation {
			continue
		}
		if shareNode(o, rep) {
			r.together[o.ID] = true
			r.together[rep.ID] = true
		}
	}
}

// shareNode reports whether a shard of a and one of b run on one node.
func shareNode(a, b *fleet.Replica) bool {
	for _, x := range a.Shards {
		for _, y := range b.Shards {
			if x.Node == y.Node {
				return true
			}
		}
	}
	return false
}

// slowStart is a model's replica that has been starting longer than its
// profile's start bound.
type slowStart struct {
	generation, replica, text string
}

// startSince is when rep's start is timed from: its placement, or the last
// time a fetch of its weights moved a byte or ended (a download is not an
// engine that fails to start).
func startSince(rep *fleet.Replica) time.Time {
	if rep.FetchActivity.After(rep.Created) {
		return rep.FetchActivity
	}
	return rep.Created
}

// slowAfter is how long a replica may take to become ready, from
// startSince, before its rollout is reported stalled, given the slowest
// start of its build: twice that, and at least stallAfter more.
func slowAfter(expected, stallAfter time.Duration) time.Duration {
	return max(2*expected, expected+stallAfter)
}

// noteStart records how long a replica placed by this control plane with
// its weights at hand took to become ready, from startSince, on each of its
// nodes: the slowest such start of its build on a node is what later ones
// there are held to. A start shared with others of its build counts too: it
// can only loosen a bound.
func (r *Reconciler) noteStart(rep *fleet.Replica, now time.Time) {
	if rep.Adopted || !rep.WarmStart {
		return
	}
	took := now.Sub(startSince(rep))
	for _, k := range keysOf(rep) {
		r.startTime[k] = max(r.startTime[k], took)
	}
}

// warmStart reports whether a replica of a model with source, placed with
// engine on nodes, has its weights at hand on each: a local path, a
// fetched source every node's cache holds, or the sim engine's own. A
// repository id (or another scheme) a real engine downloads itself is not.
func warmStart(tx *fleet.Tx, source, engine string, nodes []string) bool {
	src, err := spec.ParseSource(source)
	switch {
	case err != nil:
		return false
	case src.Kind == spec.SourceLocal:
		return true
	case src.Fetched():
		for _, id := range nodes {
			if n := tx.Node(id); n == nil || !n.Holds(source) {
				return false
			}
		}
		return true
	default:
		return engine == "sim" && src.Kind == spec.SourceOther
	}
}

// forgetStarts drops the measured starts of builds the catalog no longer
// has.
func (r *Reconciler) forgetStarts(byName map[string]models.Entry) {
	for k := range r.startTime {
		if e, ok := byName[k.model]; !ok || e.ReplicaGeneration(k.profile) != k.generation {
			delete(r.startTime, k)
		}
	}
}

// noteSlowStarts finds, per model, the replicas of its current definition
// still starting past their profile's bound, and records the oldest as
// the model's slow start (or forgets the model's).
func (r *Reconciler) noteSlowStarts(tx *fleet.Tx, byName map[string]models.Entry, now time.Time) {
	found := map[string]slowStart{}
	var oldest map[string]*fleet.Replica
	present := map[string]bool{}
	for _, rep := range tx.Replicas() {
		present[rep.ID] = true
		e, ok := byName[rep.Model]
		if !ok || rep.State != fleet.ReplicaStarting || rep.Adopted || !rep.WarmStart || e.Stale(rep.Profile.Name, rep.Generation) || r.together[rep.ID] {
			continue
		}
		expected, ok := r.expectedStart(rep)
		if !ok {
			continue
		}
		took := now.Sub(startSince(rep))
		if took < slowAfter(expected, r.opts.StallAfter) {
			continue
		}
		if oldest == nil {
			oldest = map[string]*fleet.Replica{}
		}
		if o := oldest[rep.Model]; o != nil && !rep.Created.Before(o.Created) {
			continue
		}
		oldest[rep.Model] = rep
		found[rep.Model] = slowStart{generation: e.Generation, replica: rep.ID, text: slowText(rep, took, expected)}
	}
	for id := range r.together {
		if !present[id] {
			delete(r.together, id)
		}
	}
	r.backoffMu.Lock()
	defer r.backoffMu.Unlock()
	for model, s := range found {
		if prev, ok := r.slow[model]; !ok || prev.replica != s.replica {
			rep := oldest[model]
			r.log.Warn("replica slow to start", "model", model, "replica", rep.ID, "profile", rep.Profile.Name,
				"took", now.Sub(startSince(rep)).Round(time.Second).String())
		}
	}
	r.slow = found
}

// slowText says which replica is slow, how slow against the slowest start
// of its build, and each shard's state, error and last engine output line.
func slowText(rep *fleet.Replica, took, expected time.Duration) string {
	var nodes []string
	for _, s := range rep.Shards {
		nodes = append(nodes, s.Node)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "replica %s (profile %s, on %s) not ready after %s; replicas of profile %s built the same way were ready there in at most %s",
		rep.ID, rep.Profile.Name, strings.Join(nodes, ", "), took.Round(time.Second), rep.Profile.Name, expected.Round(time.Second))
	if rep.Error != "" {
		fmt.Fprintf(&b, "; error: %s", rep.Error)
	}
	shards := append([]*fleet.Shard(nil), rep.Shards...)
	sort.Slice(shards, func(i, j int) bool { return shards[i].Rank < shards[j].Rank })
	for _, s := range shards {
		fmt.Fprintf(&b, "; shard %d on %s: %s", s.Rank, s.Node, shardStateName(s.State))
		if !s.Sent {
			b.WriteString(" (not started yet: waiting for rank 0)")
		}
		if s.Error != "" {
			fmt.Fprintf(&b, ", error: %s", s.Error)
		}
		if n := len(s.LastOutput); n > 0 {
			fmt.Fprintf(&b, ", last output: %s", strings.TrimSpace(s.LastOutput[n-1]))
		} else if s.Sent {
			b.WriteString(", no engine output")
		}
	}
	return b.String()
}

// shardStateName is "starting" for SHARD_STATE_STARTING.
func shardStateName(s agentv1.ShardState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "SHARD_STATE_"))
}

// NotReady says which replica of generation of model (its current one) has
// been starting well past the slowest start of its build on its nodes:
// twice that, and at least StallAfter more. "" when none: a replica whose
// start cannot be compared (a node of its has not seen its build become
// ready here, as for a rollout's replacements or after a restart; weights
// not at hand on its nodes when placed; started while another of its
// build was starting on a shared node) is reported only when it fails, at its
// startup_timeout plus 30 seconds.
func (r *Reconciler) NotReady(model, generation string) string {
	r.backoffMu.Lock()
	defer r.backoffMu.Unlock()
	s, ok := r.slow[model]
	if !ok || s.generation != generation {
		return ""
	}
	return s.text
}
