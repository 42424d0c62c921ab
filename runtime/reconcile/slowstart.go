package reconcile

import (
	"fmt"
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
// replicas of the same build took before, the model's rollout is reported
// stalled, naming the replica and its shards' state, error and last engine
// output: a `terraform apply` waiting for it fails then instead of at its
// rollout_timeout. The replica is left to go on starting.
//
// The bound applies only where a start can be compared with an earlier
// one: a replica of the same build (spec.ReplicaGeneration: same source,
// engine, tp, args, ...) on the same nodes that this control plane saw
// become ready, and a replica placed with its weights at hand on every
// node (WarmStart). A replica of a build never measured (a rollout's first
// replacement), one on nodes that have not run its build (their page
// cache and the engine's compile caches are cold), one whose engine
// downloads its weights itself (a repository id), and one on a node whose
// cache did not hold its fetched weights is reported only when it fails: a
// healthy slow start must not fail an apply.

// startKey names one build of one profile of one model on one set of nodes
// (their ids, sorted, comma-separated).
type startKey struct{ model, profile, generation, nodes string }

// keyOf is the startKey of rep: the node-local caches a start warms (the
// page cache, an engine's compile cache) are those of its own nodes.
func keyOf(rep *fleet.Replica) startKey {
	nodes := make([]string, len(rep.Shards))
	for i, s := range rep.Shards {
		nodes[i] = s.Node
	}
	sort.Strings(nodes)
	return startKey{rep.Model, rep.Profile.Name, rep.Generation, strings.Join(nodes, ",")}
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
// its weights at hand took to become ready, from startSince: the slowest
// such start of its build on its nodes is what later ones are held to.
func (r *Reconciler) noteStart(rep *fleet.Replica, now time.Time) {
	if rep.Adopted || !rep.WarmStart {
		return
	}
	k := keyOf(rep)
	r.startTime[k] = max(r.startTime[k], now.Sub(startSince(rep)))
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
	for _, rep := range tx.Replicas() {
		e, ok := byName[rep.Model]
		if !ok || rep.State != fleet.ReplicaStarting || rep.Adopted || !rep.WarmStart || e.Stale(rep.Profile.Name, rep.Generation) {
			continue
		}
		expected, ok := r.startTime[keyOf(rep)]
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
// been starting well past the slowest start of its build: twice that, and
// at least StallAfter more. "" when none: a replica whose start cannot be
// compared (a build this control plane has not seen become ready, as a
// rollout's first replacement or after a restart; weights not at hand on
// its nodes when placed) is reported only when it fails, at its
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
