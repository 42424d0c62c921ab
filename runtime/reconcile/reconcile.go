// Package reconcile keeps the fleet at what the catalog asks for: it places
// replicas with the scheduler, turns plans into agent commands, retires
// failed and outdated replicas (a replacement is ready before anything
// healthy is stopped), and tells the router which replicas serve.
package reconcile

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/api/specpb"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/models"
	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/runtime/scheduler"
	"github.com/llmgw/llmgw/spec"
)

// Endpoints receives the serving replicas of each model.
type Endpoints interface {
	SetEndpoints(model string, eps []router.Endpoint)
}

// Options configure a Reconciler.
type Options struct {
	Fleet     *fleet.Fleet
	Catalog   *models.Registry
	Endpoints Endpoints
	// Grace is how long a node may go without a heartbeat before it is lost.
	Grace time.Duration
	// SuspectAfter is how long a node may go unheard before its replicas
	// are replaced elsewhere (they keep serving until it is lost); a node
	// whose session ends is suspect at once (it takes no new work) and its
	// replicas are replaced once it stays away this long. Zero: a third of
	// Grace.
	SuspectAfter time.Duration
	// Routing, when set, is told each model's routing policy and whether
	// it loads on demand, and is asked what was demanded of each model:
	// min-0 models are placed when asked for and stopped when idle, and
	// models scale between scaling.min and scaling.max with their load.
	Routing Routing
	// Autoscale tunes that scaling; zero fields take DefaultAutoscale's.
	Autoscale Autoscale
	// Interval is the period of the background pass; changes trigger a pass
	// sooner.
	Interval time.Duration
	Logger   *slog.Logger
	// Now is the clock (tests); defaults to time.Now.
	Now func() time.Time
	// Expected are the replicas that were live when the control plane last
	// ran. Until each has been reported again by its agents, or until
	// HoldPlacementUntil, nothing is placed, so that running engines are
	// adopted rather than duplicated.
	Expected           []string
	HoldPlacementUntil time.Time
	// OnLiveReplicas is called, outside any lock, with the sorted ids of the
	// live replicas whenever that set changes (the server records it for
	// its next start).
	OnLiveReplicas func(ids []string)
	// LoadTimes, when set, returns how long each model's last replica took
	// from placement to ready as an earlier control plane measured it (the
	// server keeps what the leader last wrote): a model this reconciler
	// has not yet seen load is told to clients with that ETA, not none.
	LoadTimes func() map[string]time.Duration
	// OnLoadTime, when set, is told each model's load time as it is
	// measured (for LoadTimes after a restart or a change of leader). It
	// is called with the fleet locked and must not block.
	OnLoadTime func(model string, took time.Duration)
	// StallAfter is how long a needed replica must fail to place, with
	// nothing freeing room, before Stalled and DrainBlocked report it
	// (DefaultStallAfter when zero).
	StallAfter time.Duration
	// DrainTimeout bounds how long a replica taken out of routing to be
	// stopped (a scale-down, an idle replica evicted) waits for the
	// requests in flight on it before it is stopped with them: the
	// gateway's timeouts.generation, the most one request may take
	// (DefaultDrainTimeout when zero).
	DrainTimeout time.Duration
	// DrainSettle is how long such a replica stays out of routing before a
	// count of no request in flight on it is believed, counted from the
	// pass that drained it, not from when the routes flagging it were
	// written or read: other control planes route by the routes they read
	// a moment after they change, and report what they have in flight a
	// moment after that. It is meant to cover them at their normal pace;
	// one that lags longer may still route a request to the replica, which
	// ends when the replica stops. Zero: the count is believed at once, in
	// the pass that drains it (the tests; the server sets it whether or
	// not standbys run).
	DrainSettle time.Duration
}

// DefaultDrainTimeout is DrainTimeout when unset: timeouts.generation's
// default.
const DefaultDrainTimeout = 10 * time.Minute

// Reconciler drives the fleet towards the catalog.
type Reconciler struct {
	opts Options
	log  *slog.Logger
	// backoffMu guards backoff, stalls, rollouts, wants, notPlaced and
	// drainingIDs, which the management API reads.
	backoffMu sync.Mutex
	backoff   map[string]backoff
	// wants is, per model, the replicas of its current generation the last
	// pass wanted (desired): scaling.min, more with its load, and one
	// while a model loaded on demand is asked for.
	wants map[string]int
	// notPlaced is, per model loaded on demand that is asked for and has
	// no live replica, why none is being loaded (the router's
	// ModelConfig.NotPlaced).
	notPlaced map[string]notPlaced
	// stalls are the models whose needed replica did not place in the
	// last pass that tried (stall.go); slow the models with a replica
	// starting past its profile's bound (slowstart.go).
	stalls map[string]stall
	slow   map[string]slowStart
	// rollouts holds, per model whose rollout is manual, what
	// RequestRollout asked for: per profile, the replica generation its
	// stale replicas are to be replaced with ("" for a profile the model
	// no longer has). A stale replica is replaced only while its profile's
	// current generation is the one asked for.
	rollouts map[string]map[string]string
	// freeing is set during a pass in which room may appear by itself.
	freeing bool
	routed  map[string]bool
	// configured holds the models configureRouting configured: one that
	// left the catalog is forgotten by the router.
	configured map[string]bool
	// holdLogged records that the placement hold was announced.
	holdLogged bool
	// holding is true while placement waits for expected replicas.
	holding bool
	// live is the last set of live replica ids passed to OnLiveReplicas.
	live []string
	// ready is set once a pass ran with placement not held.
	ready atomic.Bool
	// passes counts the passes completed (Passes).
	passes atomic.Uint64
	// placing is the pass's scheduler view, built at its first placement
	// and updated as replicas are placed; nil when the fleet changed in a
	// way it does not follow (a replica retired or failed).
	placing *scheduler.Fleet

	// What scaling.go keeps: per model, the replica count decided between
	// min and max; replacements owed for replicas lost with their node
	// (placed whatever the backoff); replicas being stopped to make room;
	// when the reconciler started (the idle clock of models nobody asked
	// for since); the ready replicas seen, and each model's last measured
	// load time.
	scaling map[string]*scaleState
	owed    map[string]int
	// evicting is, per replica being stopped to make room, the model the
	// room is for.
	evicting map[string]string
	// roomFor is, per model that evicted a replica of another to make
	// room, when; it is placed first until it places, EvictAfter passes
	// or the replica evicted is wanted again (undrain).
	roomFor   map[string]time.Time
	started   time.Time
	readySeen map[string]bool
	loadTime  map[string]time.Duration
	// startTime is, per build of a profile and node, the slowest start of
	// its replicas on that node placed by this control plane with their
	// weights at hand, from startSince (slowstart.go).
	startTime map[startKey]time.Duration
	// together are the replicas whose start overlapped another of their
	// build's on a shared node, whose starts are not bounded
	// (slowstart.go).
	together map[string]bool
	// inflight is the requests in flight per replica, read from Routing
	// once per pass.
	inflight map[string]int64
	// lostAt is, per node now silent or draining, since when the
	// reconciler has seen it so.
	lostAt map[string]time.Time
	// draining holds the replicas taken out of routing to be stopped once
	// nothing is in flight on them (drain.go); only Pass touches it.
	// drainingIDs is its ids as the last pass left them (Draining).
	draining    map[string]drain
	drainingIDs map[string]bool
}

type backoff struct {
	failures int
	until    time.Time
	last     string
	// at is when the last failure was recorded: a replacement for a
	// replica on a node that went silent or draining after it bypasses
	// the backoff, one earned after does not.
	at time.Time
}

// New returns a reconciler.
func New(opts Options) *Reconciler {
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Grace <= 0 {
		opts.Grace = 30 * time.Second
	}
	if opts.SuspectAfter <= 0 {
		opts.SuspectAfter = opts.Grace / 3
	}
	opts.Autoscale = opts.Autoscale.withDefaults()
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.StallAfter <= 0 {
		opts.StallAfter = DefaultStallAfter
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = DefaultDrainTimeout
	}
	return &Reconciler{opts: opts, log: opts.Logger.With("component", "reconcile"), backoff: map[string]backoff{}, wants: map[string]int{}, notPlaced: map[string]notPlaced{}, stalls: map[string]stall{}, routed: map[string]bool{}, configured: map[string]bool{},
		scaling: map[string]*scaleState{}, owed: map[string]int{}, evicting: map[string]string{}, roomFor: map[string]time.Time{}, started: opts.Now(), readySeen: map[string]bool{}, loadTime: map[string]time.Duration{}, lostAt: map[string]time.Time{},
		startTime: map[startKey]time.Duration{}, together: map[string]bool{}, draining: map[string]drain{}}
}

// Run reconciles until ctx ends.
func (r *Reconciler) Run(ctx context.Context) {
	t := time.NewTicker(r.opts.Interval)
	defer t.Stop()
	for {
		r.Pass()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.opts.Fleet.Changed():
		case <-r.opts.Catalog.Changed():
		case <-r.demanded():
		}
	}
}

// Ready reports whether the reconciler is driving the fleet: it has run a
// pass and is not waiting for agents after a restart.
func (r *Reconciler) Ready() bool { return r.ready.Load() }

// Passes returns how many passes have completed since New. A pass that
// began after a change (to the catalog, the fleet, a drain) has acted on
// it once the count has grown by two from a reading taken after the
// change: the first may have been under way already. It is exported as
// llmgw_reconcile_passes_total.
func (r *Reconciler) Passes() uint64 { return r.passes.Load() }

// LastFailure returns the most recent replica failure of a model, if any.
func (r *Reconciler) LastFailure(model string) string {
	r.backoffMu.Lock()
	defer r.backoffMu.Unlock()
	return r.backoff[model].last
}

// Pass runs one reconciliation. It is not safe to call concurrently with
// itself (Run calls it from one goroutine).
func (r *Reconciler) Pass() {
	for _, id := range r.opts.Fleet.ExpireLost(r.opts.Grace) {
		r.log.Warn("node lost", "node", id, "grace", r.opts.Grace.String())
	}
	for _, id := range r.opts.Fleet.ExpireSilent(r.opts.SuspectAfter) {
		r.log.Warn("node silent: its replicas are being replaced", "node", id, "after", r.opts.SuspectAfter.String())
	}
	entries := byPriority(r.opts.Catalog.List())
	r.readInflight()
	now := r.opts.Now()
	entries = r.roomFirst(entries, now)
	byName := make(map[string]models.Entry, len(entries))
	for _, e := range entries {
		byName[e.Model.Name] = e
	}
	r.forgetStalls(byName)
	endpoints := map[string][]router.Endpoint{}
	var live []string
	r.opts.Fleet.Update(func(tx *fleet.Tx) {
		r.placing = nil
		defer func() { r.placing = nil }()
		r.holding = r.holdPlacement(tx, now)
		r.noteLostNodes(tx, now)
		r.retire(tx, byName, now)
		r.freeing = fleetFreeing(tx) || r.drainFreeing(now)
		for _, rep := range tx.Replicas() {
			if e, ok := byName[rep.Model]; ok {
				followRouting(rep, e)
				r.restamp(tx, rep, e)
			}
		}
		for _, e := range entries {
			r.scale(tx, e, now)
		}
		r.noteReady(tx, now)
		r.forgetStarts(byName)
		r.noteSlowStarts(tx, byName, now)
		for _, rep := range tx.Replicas() {
			if rep.Live() {
				live = append(live, rep.ID)
			}
			if rep.State != fleet.ReplicaReady || len(rep.Shards) == 0 || rep.Shards[0].Endpoint == "" {
				continue
			}
			if _, ok := byName[rep.Model]; !ok {
				continue
			}
			_, draining := r.draining[rep.ID]
			endpoints[rep.Model] = append(endpoints[rep.Model], router.Endpoint{
				ReplicaID: rep.ID, Model: rep.Model, URL: "http://" + rep.Shards[0].Endpoint, Weight: max(rep.Profile.Weight, 1),
				Draining: draining,
			})
		}
	})
	if !r.holding {
		r.ready.Store(true)
	}
	if r.opts.OnLiveReplicas != nil && !r.holding && !slices.Equal(live, r.live) {
		r.live = live
		r.opts.OnLiveReplicas(slices.Clone(live))
	}
	r.configureRouting(entries, now)
	if r.opts.Endpoints != nil {
		for name := range byName {
			r.opts.Endpoints.SetEndpoints(name, endpoints[name])
			r.routed[name] = true
		}
		for name := range r.routed {
			if _, ok := byName[name]; !ok {
				r.opts.Endpoints.SetEndpoints(name, nil)
				delete(r.routed, name)
			}
		}
	}
	// Once the router has them flagged, so no new request reaches them.
	r.finishDrains(now)
	r.noteDraining()
	r.passes.Add(1)
}

// followRouting gives a running replica every field of the catalog's
// current profile of the same name that routes or places it (weight,
// priority, placement constraints: spec.FollowProfile). Those are left
// out of its generation, so editing them rolls nothing: the replica keeps
// running and the router weighs it by the new weight from this pass on (an
// adopted replica, rebuilt from what its agents echoed, is corrected the
// same way). Its startup timeout stays the one it was started under.
func followRouting(rep *fleet.Replica, e models.Entry) {
	for _, p := range e.Model.Profiles {
		if p.Name == rep.Profile.Name {
			rep.Profile = spec.FollowProfile(rep.Profile, p)
			return
		}
	}
}

// restamp gives a live replica that carries the whole-model generation of
// an earlier release, for exactly the current definition, its per-replica
// generation (models.Entry.Restamp), and tells its shards' agents, which
// report it as their replica_generation from then on, after a restart of
// either (their model_generation, which a control plane of the earlier
// release reads, stays as it was): an edit that leaves its own profile's
// build fields alone then leaves it current, as it does every replica
// placed since. A shard not started yet carries it in its StartShard.
//
// An agent that misses the message (disconnected, or of a release that
// ignores it and is upgraded later) reports the earlier stamp, or none,
// in its next Hello or ShardStatus: a current replica's shard whose agent
// last reported anything but the replica's generation is told again, at
// most once a pass, until its agent reports it. Otherwise the stamp would
// live in this control plane's memory only, and after an edit that
// changes the whole-model hash a control-plane restart would adopt the
// replica as stale and replace it.
func (r *Reconciler) restamp(tx *fleet.Tx, rep *fleet.Replica, e models.Entry) {
	if !rep.Live() {
		return
	}
	if gen, ok := e.Restamp(rep.Profile.Name, rep.Generation); ok {
		rep.Generation = gen
		for _, sh := range rep.Shards {
			if !sh.Sent && sh.Start != nil {
				sh.Start.ReplicaGeneration = gen // not handed to a connection yet
			}
		}
		r.log.Info("replica restamped", "model", rep.Model, "replica", rep.ID, "profile", rep.Profile.Name, "generation", gen)
	}
	if rep.Generation != e.ReplicaGeneration(rep.Profile.Name) {
		return // stale, or a whole-model stamp: nothing an agent should record
	}
	for _, sh := range rep.Shards {
		if !sh.Sent || sh.ReplicaGeneration == rep.Generation || shardEnded(sh.State) {
			continue
		}
		msg := &agentv1.ControlMessage{Msg: &agentv1.ControlMessage_Restamp{Restamp: &agentv1.Restamp{ShardId: sh.ID, ReplicaGeneration: rep.Generation}}}
		if err := tx.Send(sh.Node, msg); err != nil {
			r.log.Debug("restamp not delivered", "node", sh.Node, "shard", sh.ID, "err", err)
			continue
		}
		// Until its agent reports otherwise (an agent that ignored it
		// reports "" again with its next status or Hello).
		sh.ReplicaGeneration = rep.Generation
	}
}

// shardEnded reports whether a shard has stopped or failed: no Restamp is
// sent to it.
func shardEnded(s agentv1.ShardState) bool {
	return s == agentv1.ShardState_SHARD_STATE_STOPPED || s == agentv1.ShardState_SHARD_STATE_FAILED
}

// retire handles failed replicas, replicas of models no longer in the
// catalog, replicas stuck starting, and starts workers of multi-node
// replicas once rank 0 has its rendezvous address.
func (r *Reconciler) retire(tx *fleet.Tx, byName map[string]models.Entry, now time.Time) {
	for _, rep := range tx.Replicas() {
		_, known := byName[rep.Model]
		switch {
		case rep.State == fleet.ReplicaStopping:
			if rep.Stopped() || now.Sub(rep.StopRequested) > stopGrace {
				tx.Remove(rep)
			}
			continue
		case rep.State == fleet.ReplicaFailed:
			r.log.Warn("replica failed", "model", rep.Model, "replica", rep.ID, "error", rep.Error)
			r.stopShards(tx, rep, "replica failed: "+rep.Error)
			r.retireReplica(tx, rep, now)
			if rep.NodeFailed {
				// Not the replica's fault: no backoff, and its
				// replacement is placed whatever backoff the model has.
				r.owed[rep.Model]++
				continue
			}
			r.backoffMu.Lock()
			b := r.backoff[rep.Model]
			b.failures++
			b.until = now.Add(min(time.Second<<min(b.failures-1, 6), time.Minute))
			b.last = rep.Error
			b.at = now
			r.backoff[rep.Model] = b
			r.backoffMu.Unlock()
			continue
		case !known:
			r.log.Info("replica stopped", "model", rep.Model, "replica", rep.ID, "reason", "model removed from catalog")
			r.stopShards(tx, rep, "model removed from catalog")
			r.retireReplica(tx, rep, now)
			continue
		}
		if rep.State == fleet.ReplicaStarting {
			if !rep.Adopted {
				limit := rep.Profile.StartupTimeout.Std() + 30*time.Second
				since := rep.Created
				if rep.FetchActivity.After(since) {
					since = rep.FetchActivity // a fetch moving bytes is not a start that hangs
				}
				if now.Sub(since) > limit {
					tx.Fail(rep, "not ready within "+limit.String())
					continue
				}
			}
			// A replica rebuilt from agent reports waits for the agents of
			// its other shards for one grace period, then is failed: a
			// replica short of shards never serves.
			if rep.Adopted && len(rep.Shards) < rep.ShardsExpected() && now.Sub(rep.Created) > r.opts.Grace {
				tx.Fail(rep, fmt.Sprintf("only %d of %d shards reported after a control-plane restart", len(rep.Shards), rep.ShardsExpected()))
				continue
			}
			r.startWorkers(tx, rep)
		}
		// Only a replica of the current generation that became ready
		// since the last pass (noteReady has not seen it yet) clears the
		// backoff: the old replicas serving through a rollout, or a
		// replica that was ready before and is being replaced off a
		// draining or silent node, must not hide that every replacement
		// fails.
		if e := byName[rep.Model]; rep.State == fleet.ReplicaReady && !r.readySeen[rep.ID] && !e.Stale(rep.Profile.Name, rep.Generation) {
			r.backoffMu.Lock()
			if b, ok := r.backoff[rep.Model]; ok && b.failures > 0 {
				b.failures = 0
				b.until = time.Time{}
				r.backoff[rep.Model] = b
			}
			r.backoffMu.Unlock()
		}
	}
}

// isCurrent reports whether rep, a live replica of e's model, counts as
// the model's current generation: built as e asks (not stale) and on a
// node neither draining nor silent. Any other live replica is old: it
// serves until a ready replacement takes its place (scale, PlanRollout,
// a drain's check).
func isCurrent(tx *fleet.Tx, e models.Entry, rep *fleet.Replica) bool {
	return !e.Stale(rep.Profile.Name, rep.Generation) && !onDrainingNode(tx, rep)
}

// onDrainingNode reports whether a shard of rep runs on a draining node or
// one silent for SuspectAfter: such a replica is replaced like an outdated
// one, the replacement ready first (a silent node's replicas keep serving
// meanwhile, and if the node is heard from again first, the replacement is
// the one above the count, and is stopped).
func onDrainingNode(tx *fleet.Tx, rep *fleet.Replica) bool {
	for _, s := range rep.Shards {
		if n := tx.Node(s.Node); n != nil && (n.Draining || n.Silent) {
			return true
		}
	}
	return false
}

// onSilentNode reports whether a shard of rep runs on a node silent for
// SuspectAfter.
func onSilentNode(tx *fleet.Tx, rep *fleet.Replica) bool {
	for _, s := range rep.Shards {
		if n := tx.Node(s.Node); n != nil && n.Silent {
			return true
		}
	}
	return false
}

// noteLostNodes stamps when each node was first seen silent or draining,
// and forgets the nodes that are neither any more.
func (r *Reconciler) noteLostNodes(tx *fleet.Tx, now time.Time) {
	seen := map[string]bool{}
	for _, n := range tx.Nodes() {
		if !n.Draining && !n.Silent {
			continue
		}
		seen[n.ID] = true
		if _, ok := r.lostAt[n.ID]; !ok {
			r.lostAt[n.ID] = now
		}
	}
	for id := range r.lostAt {
		if !seen[id] {
			delete(r.lostAt, id)
		}
	}
}

// lostSince is since when rep has run on a silent or draining node (the
// earliest of its nodes').
func (r *Reconciler) lostSince(rep *fleet.Replica) time.Time {
	var since time.Time
	for _, s := range rep.Shards {
		if t, ok := r.lostAt[s.Node]; ok && (since.IsZero() || t.Before(since)) {
			since = t
		}
	}
	return since
}

// holdPlacement reports whether placement must wait for replicas that were
// live before a restart and have not been reported again yet.
func (r *Reconciler) holdPlacement(tx *fleet.Tx, now time.Time) bool {
	if len(r.opts.Expected) == 0 || !now.Before(r.opts.HoldPlacementUntil) {
		return false
	}
	present := map[string]bool{}
	for _, rep := range tx.Replicas() {
		present[rep.ID] = true
	}
	var missing []string
	for _, id := range r.opts.Expected {
		if !present[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) == 0 {
		r.opts.Expected = nil
		r.log.Info("every replica live before the restart was reported again")
		return false
	}
	if !r.holdLogged {
		r.holdLogged = true
		r.log.Info("waiting for agents to report running engines before placing replicas",
			"missing", missing, "until", r.opts.HoldPlacementUntil.Format(time.RFC3339))
	}
	return true
}

// stopGrace bounds how long a stopping replica holds its GPUs when its
// agents do not report its shards stopped (a lost or removed node).
const stopGrace = 30 * time.Second

// retireReplica keeps a replica whose shards were told to stop until they
// have: its GPUs are not given to anything else before the engine is gone.
func (r *Reconciler) retireReplica(tx *fleet.Tx, rep *fleet.Replica, now time.Time) {
	r.placing = nil
	tx.Stopping(rep, now)
	if rep.Stopped() {
		tx.Remove(rep)
	}
}

// startWorkers sends StartShard to ranks > 0 once rank 0 reported where it
// listens for the rendezvous.
func (r *Reconciler) startWorkers(tx *fleet.Tx, rep *fleet.Replica) {
	if len(rep.Shards) < 2 || rep.Shards[0].RendezvousAddr == "" {
		return
	}
	for _, s := range rep.Shards[1:] {
		if s.Sent || s.Start == nil {
			continue
		}
		s.Start.RendezvousAddr = rep.Shards[0].RendezvousAddr
		if err := tx.Send(s.Node, startMsg(s.Start)); err != nil {
			tx.Fail(rep, "starting shard "+s.ID+" on "+s.Node+": "+err.Error())
			return
		}
		s.Sent = true
		s.ReplicaGeneration = s.Start.GetReplicaGeneration()
	}
}

func (r *Reconciler) stopShards(tx *fleet.Tx, rep *fleet.Replica, reason string) {
	for _, s := range rep.Shards {
		if !s.Sent {
			continue
		}
		if err := tx.Send(s.Node, &agentv1.ControlMessage{Msg: &agentv1.ControlMessage_StopShard{StopShard: &agentv1.StopShard{ShardId: s.ID, Reason: reason}}}); err != nil {
			r.log.Debug("stop not delivered", "shard", s.ID, "node", s.Node, "err", err)
		}
	}
}

// scale places replicas up to scaling.min for the current generation and
// replaces the others one at a time.
//
// A replica is old when it was placed for another generation (its profile,
// engine, args, source, ... changed since: stale) or runs on a draining
// node. Missing capacity (fewer live replicas than scaling.min) is placed
// at once. Old replicas are then replaced one at a time: one replacement
// is placed only while no replica of the current generation is starting,
// and an old replica is stopped only when a ready replica of the current
// generation takes its place (the ready ones and the remaining old ones
// still make scaling.min). So a rollout never has fewer serving replicas
// than it started with, and never starts more than one replacement at
// once. A stale replica of a model whose rollout is manual is not replaced
// until RequestRollout asked for its profile's current generation; it keeps serving
// meanwhile (a replica on a draining node is replaced whatever the policy).
func (r *Reconciler) scale(tx *fleet.Tx, e models.Entry, now time.Time) {
	want, why := r.desired(tx, e, now)
	var np notPlaced
	defer func() { r.noteWant(e.Model.Name, want, np) }()
	var current, currentReady, old, drained []*fleet.Replica
	for _, rep := range tx.ModelReplicas(e.Model.Name) {
		if !rep.Live() {
			continue
		}
		if _, ok := r.draining[rep.ID]; ok {
			// Leaving: not serving, and not to be scaled down again.
			if isCurrent(tx, e, rep) {
				drained = append(drained, rep)
			}
			continue
		}
		if isCurrent(tx, e, rep) {
			current = append(current, rep)
			if rep.State == fleet.ReplicaReady {
				currentReady = append(currentReady, rep)
			}
		} else {
			old = append(old, rep)
		}
	}
	// Old replicas that may be replaced now: not ready first, then those
	// on a silent node (lost first: a stale replica on a healthy node
	// serves longer), then oldest.
	var rollable, heldReps []*fleet.Replica
	held := 0
	requested := r.rolloutRequested(e.Model.Name)
	for _, rep := range old {
		asked, ok := requested[rep.Profile.Name]
		if e.Model.ManualRollout() && (!ok || asked != e.ReplicaGeneration(rep.Profile.Name)) && !onDrainingNode(tx, rep) {
			held++
			heldReps = append(heldReps, rep)
			continue
		}
		rollable = append(rollable, rep)
	}
	if len(rollable) == 0 && held == 0 {
		r.clearRollout(e.Model.Name)
	}
	rolloutOrder(tx, rollable)
	if len(current) < want && r.holding {
		return
	}
	r.backoffMu.Lock()
	b := r.backoff[e.Model.Name]
	r.backoffMu.Unlock()
	until := b.until
	// Missing capacity at once; then one replacement at a time. Replicas
	// lost with their node, on a node now silent (whatever their
	// generation), or of the current generation on a draining node, count
	// as missing: their replacements are placed at once. They wait for no
	// backoff the model earned before the node was lost (owed), but a
	// replacement that fails earns a backoff of its own that the next one
	// waits for. A stale replica on a draining node that is still heard
	// from is left to the rollout, one at a time.
	owed := r.owed[e.Model.Name]
	lostOld := 0
	for _, rep := range old {
		if onSilentNode(tx, rep) || (!e.Stale(rep.Profile.Name, rep.Generation) && onDrainingNode(tx, rep)) {
			lostOld++
			if b.at.Before(r.lostSince(rep)) {
				owed++
			}
		}
	}
	missing := want - len(current) - (len(old) - lostOld)
	// A replica draining for a scale-down that is wanted again (the load
	// came back, the model was asked for) returns to routing rather than
	// a new one being placed.
	for ; missing > 0 && len(drained) > 0; missing-- {
		rep := drained[len(drained)-1]
		drained = drained[:len(drained)-1]
		r.undrain(rep)
		current = append(current, rep)
		currentReady = append(currentReady, rep)
	}
	if len(rollable) > 0 && len(current) == len(currentReady) && len(current)+held < want {
		missing = max(missing, 1)
	}
	var failed *scheduler.Explanation
	if missing > 0 && (owed > 0 || !now.Before(until)) {
		for i := 0; i < missing && (owed > 0 || !now.Before(until)); i++ {
			rep, ok, expl := r.place(tx, e, now)
			if !ok {
				failed = &expl
				r.evictFor(tx, e, now)
				break
			}
			owed--
			if r.owed[e.Model.Name] > 0 {
				r.owed[e.Model.Name]--
			}
			current = append(current, rep)
		}
		if failed != nil {
			r.noteStall(tx, e, true, *failed, want, len(current), old, now)
		} else {
			r.noteStall(tx, e, false, scheduler.Explanation{}, 0, 0, nil, now)
		}
	} else if len(current)+held >= want {
		// Nothing more is needed (stale replicas held by a manual rollout
		// count): nothing is stuck.
		r.noteStall(tx, e, false, scheduler.Explanation{}, 0, 0, nil, now)
	}
	if e.Model.Scaling.OnDemand() && want > 0 && len(current)+len(old) == 0 {
		// Asked for, and nothing is loading: say why, unless room is being
		// made for it (evictFor).
		_, making := r.roomFor[e.Model.Name]
		switch {
		case failed != nil && !making:
			np = notPlaced{why: WhyNotPlaced(*failed)}
		case failed == nil && missing > 0 && owed <= 0 && now.Before(until):
			np = notPlaced{why: fmt.Sprintf("its last replica failed (%s); the next is placed after a backoff of %s", b.last, b.until.Sub(b.at)), failed: true}
		}
	}
	if len(current) >= want {
		delete(r.owed, e.Model.Name)
		delete(r.roomFor, e.Model.Name)
	}
	// An old replica stops once a ready replica of this generation makes
	// up for it.
	remaining := len(old)
	for _, rep := range rollable {
		if len(currentReady)+remaining-1 < want {
			break
		}
		r.log.Info("replica stopped", "model", rep.Model, "replica", rep.ID, "reason", "replaced (newer definition or draining node)")
		r.stopShards(tx, rep, "replaced (newer definition or draining node)")
		r.retireReplica(tx, rep, now)
		remaining--
	}
	// Not while placement is held: the routes are not published (a
	// standby's routes serve meanwhile), so a replica flagged draining
	// would still be sent requests, and the agents are still reporting
	// what runs.
	if extra := len(current) + held - want; extra > 0 && remaining-held == 0 && !r.holding {
		// Retire the least useful first, stale replicas held by a manual
		// rollout as well as current ones: not ready, then the fewest
		// requests in flight, then newest.
		surplus := append(slices.Clone(current), heldReps...)
		sort.SliceStable(surplus, func(i, j int) bool {
			ri, rj := surplus[i].State == fleet.ReplicaReady, surplus[j].State == fleet.ReplicaReady
			if ri != rj {
				return !ri
			}
			if fi, fj := r.inflight[surplus[i].ID], r.inflight[surplus[j].ID]; fi != fj {
				return fi < fj
			}
			return surplus[i].Created.After(surplus[j].Created)
		})
		serving := len(currentReady) + held
		for _, rep := range surplus[:min(extra, len(surplus))] {
			isHeld := slices.Contains(heldReps, rep)
			if rep.State == fleet.ReplicaReady && serving <= want {
				break
			}
			if rep.State == fleet.ReplicaReady {
				// It may carry requests: out of routing now, stopped once
				// they are done (finishDrains).
				r.startDrain(rep, "scaled down: "+why, now)
			} else {
				r.log.Info("replica stopped", "model", rep.Model, "replica", rep.ID, "reason", why)
				r.stopShards(tx, rep, "scaled down: "+why)
				r.retireReplica(tx, rep, now)
			}
			if isHeld || rep.State == fleet.ReplicaReady {
				serving--
			}
		}
	}
}

// rolloutOrder sorts old replicas in the order a rollout replaces them:
// not ready first, then those on a silent node (lost first: a stale
// replica on a healthy node serves longer), then oldest.
func rolloutOrder(tx *fleet.Tx, old []*fleet.Replica) {
	sort.SliceStable(old, func(i, j int) bool {
		ri, rj := old[i].State == fleet.ReplicaReady, old[j].State == fleet.ReplicaReady
		if ri != rj {
			return !ri
		}
		if si, sj := onSilentNode(tx, old[i]), onSilentNode(tx, old[j]); si != sj {
			return si
		}
		return old[i].Created.Before(old[j].Created)
	})
}

// RequestRollout asks for the stale replicas of a model whose rollout is
// manual to be replaced, one at a time, by replicas of e, the model's
// current definition. It returns the ids of the live replicas that e calls
// stale (their own profile changed since they were placed), the ones that
// will be replaced. What it asks for is each profile's generation in e: a
// later edit that changes a profile's generation holds that profile's
// stale replicas until the next request; adding a profile, or editing
// another one, leaves the rollout going.
func (r *Reconciler) RequestRollout(e models.Entry) []string {
	model := e.Model.Name
	var stale []string
	asked := map[string]string{}
	for _, p := range e.Model.Profiles {
		asked[p.Name] = e.ReplicaGeneration(p.Name)
	}
	r.opts.Fleet.Read(func(tx *fleet.Tx) {
		for _, rep := range tx.ModelReplicas(model) {
			if rep.Live() && e.Stale(rep.Profile.Name, rep.Generation) {
				stale = append(stale, rep.ID)
				asked[rep.Profile.Name] = e.ReplicaGeneration(rep.Profile.Name) // "" for a profile removed
			}
		}
	})
	sort.Strings(stale)
	r.backoffMu.Lock()
	if len(stale) > 0 {
		if r.rollouts == nil {
			r.rollouts = map[string]map[string]string{}
		}
		r.rollouts[model] = asked
	}
	r.backoffMu.Unlock()
	if len(stale) > 0 {
		r.log.Info("rollout requested", "model", model, "generation", e.Generation, "stale", len(stale))
	}
	return stale
}

// rolloutRequested returns what RequestRollout last asked for (nil when
// nothing is asked).
func (r *Reconciler) rolloutRequested(model string) map[string]string {
	r.backoffMu.Lock()
	defer r.backoffMu.Unlock()
	return r.rollouts[model]
}

// clearRollout forgets a finished rollout request.
func (r *Reconciler) clearRollout(model string) {
	r.backoffMu.Lock()
	defer r.backoffMu.Unlock()
	delete(r.rollouts, model)
}

// rebuildEachPlacement makes place build its view from the fleet for every
// replica, as it did before the pass kept one: the reference the tests hold
// the pass's view to.
var rebuildEachPlacement = false

// place places one replica of e; when none places it returns the
// scheduler's explanation.
func (r *Reconciler) place(tx *fleet.Tx, e models.Entry, now time.Time) (*fleet.Replica, bool, scheduler.Explanation) {
	if r.placing == nil || rebuildEachPlacement {
		r.placing = scheduler.NewFleet(snapshot(tx.Nodes(), tx.UsedGPUs(), tx.Replicas()))
	}
	d := demand(e.Model)
	plan := r.placing.Place(d)
	if !plan.Placed {
		r.log.Debug("model not placed", "model", e.Model.Name, "why", plan.Explanation.String())
		return nil, false, plan.Explanation
	}
	rep := &fleet.Replica{
		ID:         newID("r"),
		Model:      e.Model.Name,
		Profile:    plan.Profile,
		Generation: e.ReplicaGeneration(plan.Profile.Name),
		Fabric:     plan.Fabric,
		Created:    now,
	}
	// Every shard carries the profile itself; its nodes is the world size.
	profile := specpb.ProfileToProto(plan.Profile)
	fetched := false
	if src, err := spec.ParseSource(e.Model.Source); err == nil && src.Fetched() {
		fetched = true
	}
	var placedNodes []string
	shardNodes := make([]string, len(plan.Shards))
	for i, sp := range plan.Shards {
		shardNodes[i] = sp.NodeID
	}
	rep.WarmStart = warmStart(tx, e.Model.Source, plan.Profile.Engine, shardNodes)
	for _, sp := range plan.Shards {
		gpus := make([]int32, len(sp.GPUIndices))
		for i, g := range sp.GPUIndices {
			gpus[i] = int32(g)
		}
		start := &agentv1.StartShard{
			ShardId:           rep.ID + "-" + strconv.Itoa(sp.Rank),
			ReplicaId:         rep.ID,
			Model:             e.Model.Name,
			Source:            e.Model.Source,
			Rank:              int32(sp.Rank),
			GpuIndices:        gpus,
			Fabric:            plan.Fabric,
			ContextLength:     int32(e.Model.ContextLength),
			ModelGeneration:   e.LegacyGeneration(),
			ReplicaGeneration: rep.Generation,
			Profile:           profile,
		}
		if fetched {
			start.WeightsPeers = weightsPeers(tx, sp.NodeID, e.Model.Source, placedNodes)
		}
		placedNodes = append(placedNodes, sp.NodeID)
		rep.Shards = append(rep.Shards, &fleet.Shard{
			ID: start.ShardId, Rank: sp.Rank, Node: sp.NodeID, GPUs: append([]int(nil), sp.GPUIndices...),
			State: agentv1.ShardState_SHARD_STATE_STARTING, Start: start, Source: e.Model.Source,
		})
	}
	tx.Add(rep)
	r.notePlaced(tx, rep)
	// As the next snapshot would read it: the GPUs held, one more replica
	// per node, free memory as the agents last reported it.
	r.placing.Take(d, plan)
	r0 := rep.Shards[0]
	if err := tx.Send(r0.Node, startMsg(r0.Start)); err != nil {
		r.placing = nil // a failed replica no longer counts for spreading
		tx.Fail(rep, "starting shard "+r0.ID+" on "+r0.Node+": "+err.Error())
		return rep, true, scheduler.Explanation{}
	}
	r0.Sent = true
	r0.ReplicaGeneration = r0.Start.GetReplicaGeneration()
	r.fetchAhead(tx, rep, e.Model.Source)
	nodes := make([]string, len(rep.Shards))
	for i, s := range rep.Shards {
		nodes[i] = s.Node
	}
	r.log.Info("replica placed", "model", rep.Model, "replica", rep.ID, "profile", rep.Profile.Name, "nodes", nodes, "fabric", rep.Fabric)
	for _, sh := range plan.Shards {
		if sh.TopologyNote != "" {
			r.log.Warn("gpus not grouped by nvlink", "model", rep.Model, "replica", rep.ID, "node", sh.NodeID, "gpus", sh.GPUIndices, "why", sh.TopologyNote)
		}
	}
	return rep, true, scheduler.Explanation{}
}

func startMsg(s *agentv1.StartShard) *agentv1.ControlMessage {
	return &agentv1.ControlMessage{Msg: &agentv1.ControlMessage_StartShard{StartShard: s}}
}

// Explain evaluates placing one more replica of m on the fleet as it is.
func (r *Reconciler) Explain(m spec.Model) scheduler.Explanation {
	return scheduler.Explain(r.view(), demand(m))
}

// PlanOne evaluates placing one replica of m and returns the whole plan.
func (r *Reconciler) PlanOne(m spec.Model) scheduler.Plan {
	return scheduler.Place(r.view(), demand(m))
}

// view is the scheduler's view of the fleet, built under its read lock: a
// dry run works on it without holding the lock agent reports and
// reconciler passes need.
func (r *Reconciler) view() scheduler.Snapshot {
	var snap scheduler.Snapshot
	r.opts.Fleet.Read(func(tx *fleet.Tx) {
		snap = snapshot(tx.Nodes(), tx.UsedGPUs(), tx.Replicas())
	})
	return snap
}

// Capacity says how many replicas of m the fleet holds now: running, the
// live replicas of m (any generation), and more, how many further replicas
// fit as the reconciler would place them, counted up to limit.
func (r *Reconciler) Capacity(m spec.Model, limit int) (running int, more scheduler.Capacity) {
	var snap scheduler.Snapshot
	r.opts.Fleet.Read(func(tx *fleet.Tx) {
		for _, rep := range tx.ModelReplicas(m.Name) {
			if rep.Live() {
				running++
			}
		}
		snap = snapshot(tx.Nodes(), tx.UsedGPUs(), tx.Replicas())
	})
	return running, scheduler.Fit(snap, demand(m), max(limit-running, 0))
}

func newID(prefix string) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// fetchAhead asks the nodes of a multi-node replica's workers to fetch the
// weights now, while rank 0 fetches and starts: a worker's StartShard comes
// only once rank 0 has its rendezvous address, and would otherwise begin
// its download then. A node that misses the message fetches when its shard
// starts, as it would have.
func (r *Reconciler) fetchAhead(tx *fleet.Tx, rep *fleet.Replica, source string) {
	if len(rep.Shards) < 2 {
		return
	}
	if src, err := spec.ParseSource(source); err != nil || !src.Fetched() {
		return
	}
	for _, s := range rep.Shards[1:] {
		msg := &agentv1.ControlMessage{Msg: &agentv1.ControlMessage_FetchWeights{FetchWeights: &agentv1.FetchWeights{Source: source, Reason: "worker " + s.ID + " of replica " + rep.ID, Peers: s.Start.GetWeightsPeers()}}}
		if err := tx.Send(s.Node, msg); err != nil {
			r.log.Debug("fetch ahead not delivered", "node", s.Node, "shard", s.ID, "err", err)
		}
	}
}

// maxWeightsPeers bounds the peers a node is told to ask before the source.
const maxWeightsPeers = 3

// weightsPeers are the nodes of node's fabric a fetch of source asks before
// the source itself: first those whose cache holds it, then those fetching
// it (a live shard of that source, or a shard of this replica placed
// before, named in placedNow), each serving peers. A node outside any
// fabric asks no one: the fabric is what makes a peer near.
func weightsPeers(tx *fleet.Tx, node, source string, placedNow []string) []*agentv1.WeightsPeer {
	nodes := tx.Nodes()
	fabric := ""
	for _, n := range nodes {
		if n.ID == node {
			fabric = n.Fabric()
		}
	}
	if fabric == "" {
		return nil
	}
	fetching := map[string]bool{}
	for _, id := range placedNow {
		fetching[id] = true
	}
	for _, r := range tx.Replicas() {
		if !r.Live() {
			continue
		}
		for _, s := range r.Shards {
			if s.Source == source && s.State != agentv1.ShardState_SHARD_STATE_STOPPED && s.State != agentv1.ShardState_SHARD_STATE_FAILED {
				fetching[s.Node] = true
			}
		}
	}
	var holders, others []*agentv1.WeightsPeer
	for _, n := range nodes {
		if n.ID == node || !n.Connected || n.PeerAddress == "" || n.Fabric() != fabric {
			continue
		}
		p := &agentv1.WeightsPeer{Node: n.ID, Address: n.PeerAddress}
		switch {
		case n.Holds(source):
			holders = append(holders, p)
		case fetching[n.ID]:
			others = append(others, p)
		}
	}
	out := append(holders, others...)
	return out[:min(len(out), maxWeightsPeers)]
}
