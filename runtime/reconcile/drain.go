package reconcile

import (
	"maps"
	"time"

	"github.com/llmgw/llmgw/runtime/fleet"
)

// A replica removed for load or idleness (a scale-down, the idle timeout
// of a model loaded on demand, an eviction to make room) is not stopped
// at once: the requests in flight on it would end mid-stream. It is
// drained: flagged in its endpoint, so the router sends it nothing new
// while still counting what is in flight on it, and stopped once that
// count, the standbys' included, is zero, or after DrainTimeout. A
// replica removed because it failed, is stale, or its node is lost or
// drained is stopped as before: it is replaced, or has nothing to finish.
//
// While draining it is live in the fleet (its engine runs, its GPUs are
// held) but serves nothing: scale and desired count it neither as serving
// nor as surplus, and evictFor does not pick it again. A scale that wants
// it again before it stops returns it to routing (undrain).

// drain is one replica being drained.
type drain struct {
	// since is when it left routing; why is the reason its StopShard
	// carries.
	since time.Time
	why   string
}

// startDrain takes rep out of routing from this pass's endpoints on.
func (r *Reconciler) startDrain(rep *fleet.Replica, why string, now time.Time) {
	if _, ok := r.draining[rep.ID]; ok {
		return
	}
	r.draining[rep.ID] = drain{since: now, why: why}
	r.log.Info("replica draining", "model", rep.Model, "replica", rep.ID, "reason", why, "in_flight", r.inflight[rep.ID])
}

// undrain returns a draining replica to routing: it is wanted again.
func (r *Reconciler) undrain(rep *fleet.Replica) {
	delete(r.draining, rep.ID)
	// An eviction given up: the next one may pick another replica, and
	// until one does no room is being made for the model that asked
	// (its requests are told why it cannot be loaded, not that it loads).
	if forModel, ok := r.evicting[rep.ID]; ok {
		delete(r.evicting, rep.ID)
		delete(r.roomFor, forModel)
	}
	r.log.Info("replica back in routing", "model", rep.Model, "replica", rep.ID, "reason", "wanted again while draining")
}

// drainFreeing reports whether a drain may free room in a moment: one
// begun within DrainSettle, after which a replica with nothing in flight
// is stopped (its stop then counts as freeing room: fleetFreeing). A
// drain past that waits for requests that may run up to DrainTimeout;
// counted as freeing, it would put off the report of every model's stall
// for as long.
func (r *Reconciler) drainFreeing(now time.Time) bool {
	for _, d := range r.draining {
		if now.Sub(d.since) <= r.opts.DrainSettle {
			return true
		}
	}
	return false
}

// finishDrains stops the draining replicas with nothing in flight, or
// drained for DrainTimeout, and forgets those stopped or failed
// otherwise. It runs after the pass gave the router its endpoints, so
// the counts it reads are of replicas no new request reaches (the router
// re-routes a request that counted itself on a replica flagged after it
// read the table). Not before the reconciler is ready: until then its
// endpoints reach neither the router nor the standbys (the server's ha),
// and a replica flagged draining would still be sent requests.
func (r *Reconciler) finishDrains(now time.Time) {
	if len(r.draining) == 0 || !r.ready.Load() {
		return
	}
	inflight := map[string]int64{}
	if r.opts.Routing != nil {
		for _, eps := range r.opts.Routing.Snapshot() {
			for _, ep := range eps {
				inflight[ep.ReplicaID] += ep.InFlight
			}
		}
	}
	r.opts.Fleet.Update(func(tx *fleet.Tx) {
		live := map[string]*fleet.Replica{}
		for _, rep := range tx.Replicas() {
			if _, ok := r.draining[rep.ID]; ok && rep.Live() {
				live[rep.ID] = rep
			}
		}
		for id, d := range r.draining {
			rep := live[id]
			if rep == nil {
				delete(r.draining, id) // stopped or failed meanwhile
				continue
			}
			n := inflight[id]
			switch {
			case n == 0 && now.Sub(d.since) >= r.opts.DrainSettle:
				r.log.Info("replica stopped", "model", rep.Model, "replica", rep.ID, "reason", d.why, "drained_for", now.Sub(d.since).String())
			case now.Sub(d.since) >= r.opts.DrainTimeout:
				r.log.Warn("replica stopped with requests in flight: drain timeout passed", "model", rep.Model, "replica", rep.ID,
					"reason", d.why, "in_flight", n, "drain_timeout", r.opts.DrainTimeout.String())
			default:
				continue
			}
			delete(r.draining, id)
			r.stopShards(tx, rep, d.why)
			r.retireReplica(tx, rep, now)
		}
	})
}

// noteDraining records the replicas draining as the pass leaves them, for
// Draining.
func (r *Reconciler) noteDraining() {
	r.backoffMu.Lock()
	defer r.backoffMu.Unlock()
	if len(r.draining) == 0 && len(r.drainingIDs) == 0 {
		return
	}
	ids := make(map[string]bool, len(r.draining))
	for id := range r.draining {
		ids[id] = true
	}
	r.drainingIDs = ids
}

// Draining returns the ids of the replicas being drained, as the last pass
// left them: ready and running, but out of routing, to be stopped once the
// requests in flight on them are done. The management API shows them
// draining, not serving. The map is the caller's.
func (r *Reconciler) Draining() map[string]bool {
	r.backoffMu.Lock()
	defer r.backoffMu.Unlock()
	return maps.Clone(r.drainingIDs)
}
