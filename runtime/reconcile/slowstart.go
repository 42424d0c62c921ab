package reconcile

import (
	"fmt"
	"sort"
	"strings"
	"time"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/models"
)

// A replica placed for a model's current definition that does not become
// ready is failed at its profile's startup_timeout plus 30 seconds, which
// is minutes by default. Long before that, once it has taken well past what
// the same profile took the last time, the model's rollout is reported
// stalled, naming the replica and its shards' state, error and last engine
// output: a `terraform apply` waiting for it fails then instead of at its
// rollout_timeout. The replica is left to go on starting.

// profileKey names one profile of one model.
type profileKey struct{ model, profile string }

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
// startSince, before its rollout is reported stalled, given how long its
// profile took the last time: twice that, and at least stallAfter more.
func slowAfter(expected, stallAfter time.Duration) time.Duration {
	return max(2*expected, expected+stallAfter)
}

// noteStart records how long a replica placed by this control plane took
// to become ready, from startSince: its profile's expected start.
func (r *Reconciler) noteStart(rep *fleet.Replica, now time.Time) {
	if rep.Adopted {
		return
	}
	r.startTime[profileKey{rep.Model, rep.Profile.Name}] = now.Sub(startSince(rep))
}

// noteSlowStarts finds, per model, the replicas of its current definition
// still starting past their profile's bound, and records the oldest as
// the model's slow start (or forgets the model's).
func (r *Reconciler) noteSlowStarts(tx *fleet.Tx, byName map[string]models.Entry, now time.Time) {
	found := map[string]slowStart{}
	var oldest map[string]*fleet.Replica
	for _, rep := range tx.Replicas() {
		e, ok := byName[rep.Model]
		if !ok || rep.State != fleet.ReplicaStarting || rep.Adopted || e.Stale(rep.Profile.Name, rep.Generation) {
			continue
		}
		expected, ok := r.startTime[profileKey{rep.Model, rep.Profile.Name}]
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

// slowText says which replica is slow, how slow against its profile's last
// start, and each shard's state, error and last engine output line.
func slowText(rep *fleet.Replica, took, expected time.Duration) string {
	var nodes []string
	for _, s := range rep.Shards {
		nodes = append(nodes, s.Node)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "replica %s (profile %s, on %s) not ready after %s; profile %s's last replica was ready in %s",
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
// been starting well past what its profile took the last time: twice that,
// and at least StallAfter more. "" when none: a model whose profile has not
// been measured by this control plane (its first replica, or after a
// restart) is reported only when the replica fails, at its startup_timeout
// plus 30 seconds.
func (r *Reconciler) NotReady(model, generation string) string {
	r.backoffMu.Lock()
	defer r.backoffMu.Unlock()
	s, ok := r.slow[model]
	if !ok || s.generation != generation {
		return ""
	}
	return s.text
}
