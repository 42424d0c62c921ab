package reconcile

import (
	"fmt"
	"slices"
	"time"

	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/models"
	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/runtime/scheduler"
)

// Routing is what the reconciler tells the router beyond endpoints, and
// what it reads back of the requests; *router.Router implements it.
type Routing interface {
	SetModel(model string, c router.ModelConfig)
	Demand(model string) router.Demand
	TakePending(model string) bool
	// Forget drops what was asked of a model that left the catalog, so a
	// model created later under its name starts with no request.
	Forget(model string)
	Demanded() <-chan struct{}
	Snapshot() map[string][]router.EndpointLoad
}

var _ Routing = (*router.Router)(nil)

// Autoscale says when a model with scaling.max above scaling.min gains or
// loses a replica, and when an idle on-demand replica may make room for
// another model (config.Autoscale documents each field).
type Autoscale struct {
	UpLoad, DownLoad               float64
	UpAfter, DownAfter, EvictAfter time.Duration
	// DefaultIdleTimeout is the idle_timeout of a model that sets none.
	DefaultIdleTimeout time.Duration
}

// DefaultAutoscale is what zero Autoscale fields take.
var DefaultAutoscale = Autoscale{UpLoad: 0.8, DownLoad: 0.3, UpAfter: 30 * time.Second, DownAfter: 5 * time.Minute,
	EvictAfter: 2 * time.Minute, DefaultIdleTimeout: 15 * time.Minute}

func (a Autoscale) withDefaults() Autoscale {
	d := DefaultAutoscale
	if a.UpLoad <= 0 {
		a.UpLoad = d.UpLoad
	}
	if a.DownLoad <= 0 {
		a.DownLoad = d.DownLoad
	}
	if a.UpAfter <= 0 {
		a.UpAfter = d.UpAfter
	}
	if a.DownAfter <= 0 {
		a.DownAfter = d.DownAfter
	}
	if a.EvictAfter <= 0 {
		a.EvictAfter = d.EvictAfter
	}
	if a.DefaultIdleTimeout <= 0 {
		a.DefaultIdleTimeout = d.DefaultIdleTimeout
	}
	return a
}

// scaleState is what the reconciler keeps per autoscaled model.
type scaleState struct {
	// want is the replica count decided last, between min and max.
	want int
	// above and below are since when the load has been at or above the up
	// target, at or below the down target; zero when it is not.
	above, below time.Time
	// evicted is when a replica of the model was last stopped to make room
	// for another model.
	evicted time.Time
}

// byPriority orders the catalog so that models at scaling.min ≥ 1 are
// placed (and get room) before models loaded on demand.
func byPriority(entries []models.Entry) []models.Entry {
	out := slices.Clone(entries)
	slices.SortStableFunc(out, func(a, b models.Entry) int {
		ao, bo := a.Model.Scaling.Min == 0, b.Model.Scaling.Min == 0
		switch {
		case ao == bo:
			return 0
		case ao:
			return 1
		}
		return -1
	})
	return out
}

// roomFirst moves the models that evicted a replica to make room, and have
// not placed since, ahead of the other models loaded on demand, so the
// room freed goes to the model that asked for it; the claim lapses after
// EvictAfter.
func (r *Reconciler) roomFirst(entries []models.Entry, now time.Time) []models.Entry {
	for name, at := range r.roomFor {
		if now.Sub(at) > r.opts.Autoscale.EvictAfter || !slices.ContainsFunc(entries, func(e models.Entry) bool { return e.Model.Name == name }) {
			delete(r.roomFor, name)
		}
	}
	if len(r.roomFor) == 0 {
		return entries
	}
	// Models at min ≥ 1 stay first (byPriority), then the models owed
	// room, then the other models loaded on demand.
	rank := func(e models.Entry) int {
		if e.Model.Scaling.Min != 0 {
			return 0
		}
		if _, ok := r.roomFor[e.Model.Name]; ok {
			return 1
		}
		return 2
	}
	slices.SortStableFunc(entries, func(a, b models.Entry) int { return rank(a) - rank(b) })
	return entries
}

// demanded signals when a request found a model loaded on demand without
// a replica; nil without Routing (a nil channel never fires).
func (r *Reconciler) demanded() <-chan struct{} {
	if r.opts.Routing == nil {
		return nil
	}
	return r.opts.Routing.Demanded()
}

// readInflight reads the requests in flight per replica.
func (r *Reconciler) readInflight() {
	r.inflight = map[string]int64{}
	if r.opts.Routing == nil {
		return
	}
	for _, eps := range r.opts.Routing.Snapshot() {
		for _, ep := range eps {
			r.inflight[ep.ReplicaID] += ep.InFlight
		}
	}
}

// idleTimeout is a model's scaling.idle_timeout, or the default when unset.
func (r *Reconciler) idleTimeout(e models.Entry) time.Duration {
	if d := e.Model.Scaling.IdleTimeout.Std(); d > 0 {
		return d
	}
	return r.opts.Autoscale.DefaultIdleTimeout
}

// desired returns how many replicas of the current generation a model
// should have, and, for replicas above it, why.
//
// A model with scaling.max at scaling.min (or without Routing) has min. An
// autoscaled one starts at the replicas it has when the reconciler starts
// driving the fleet (none, or what a control plane before it decided),
// between min and max; with min 0 it gets one replica when a request asks
// for it. Once nothing was asked of it for its idle_timeout,
// nothing is in flight and nobody waits (so the last replica a request is
// waiting on is never stopped) it goes back to min: none for a model loaded
// on demand. While all its replicas are ready it gains one, up to max, when
// its load stayed at or above the up target for UpAfter, and loses one, down
// to min (or one while it is in use), when the load stayed at or below the
// down target for DownAfter.
func (r *Reconciler) desired(tx *fleet.Tx, e models.Entry, now time.Time) (int, string) {
	sc := e.Model.Scaling
	if r.opts.Routing == nil || sc.Max <= sc.Min {
		return sc.Min, "above scaling.min"
	}
	name := e.Model.Name
	d := r.opts.Routing.Demand(name)
	d.Pending = r.opts.Routing.TakePending(name)
	ready, live := 0, 0
	for _, rep := range tx.ModelReplicas(name) {
		if _, leaving := r.draining[rep.ID]; !rep.Live() || leaving || e.Stale(rep.Profile.Name, rep.Generation) {
			continue
		}
		live++
		if rep.State == fleet.ReplicaReady {
			ready++
		}
	}
	st := r.scaling[name]
	if st == nil {
		st = &scaleState{}
		r.scaling[name] = st
	}
	if !r.ready.Load() {
		// What runs is what the last control plane decided (a restart,
		// a new leader): the count starts there, not at min, which
		// would scale every model down whatever its load. Until the
		// reconciler drives the fleet, agents are still reporting their
		// replicas, so the count follows them.
		st.want = min(max(live, sc.Min), sc.Max)
	}
	w := max(st.want, sc.Min)
	why := "load below autoscale.down_load"
	floor := sc.Min
	// Idle is counted from the last request, or from the reconciler's
	// start for replicas it found running (adopted after a restart).
	last := d.LastRequest
	if last.IsZero() && live > 0 {
		last = r.started
	}
	inUse := d.Pending || d.Waiting > 0 || d.InFlight > 0
	// A model evicted to make room is idle until asked for again: its last
	// request is what it was evicted despite.
	recent := !last.IsZero() && now.Sub(last) < r.idleTimeout(e) && last.After(st.evicted)
	switch {
	case inUse || recent:
		if sc.Min == 0 {
			w = max(w, 1)
			floor = 1
		}
	default:
		// Nobody asked within idle_timeout and nothing is in flight or
		// waiting: back to min (none, for a model loaded on demand).
		if w > sc.Min {
			why = fmt.Sprintf("idle for %s (scaling.idle_timeout)", r.idleTimeout(e))
		}
		w = sc.Min
	}
	if d.Pending && live == 0 {
		r.log.Info("model asked for: placing a replica on demand", "model", name)
	}
	a := r.opts.Autoscale
	if w > 0 && ready > 0 && ready >= live {
		load := d.Load()
		switch {
		case load >= a.UpLoad:
			st.below = time.Time{}
			if st.above.IsZero() {
				st.above = now
			}
			if now.Sub(st.above) >= a.UpAfter && w < sc.Max && ready >= w {
				w++
				st.above = now
				r.log.Info("scaling up", "model", name, "load", load, "replicas", w)
			}
		case load <= a.DownLoad:
			st.above = time.Time{}
			if st.below.IsZero() {
				st.below = now
			}
			if now.Sub(st.below) >= a.DownAfter && w > floor {
				w--
				st.below = now
				r.log.Info("scaling down", "model", name, "load", load, "replicas", w)
			}
		default:
			st.above, st.below = time.Time{}, time.Time{}
		}
	}
	w = min(max(w, sc.Min), sc.Max)
	st.want = w
	return w, why
}

// notPlaced is why a model loaded on demand that is asked for has no
// replica being loaded; failed when it is its last replica's failure (the
// next waits for the backoff), not placement.
type notPlaced struct {
	why    string
	failed bool
}

// noteWant records what scale decided for a model: the replicas it wants,
// and for a model loaded on demand that is asked for and has none, why
// none is being loaded (zero when one is).
func (r *Reconciler) noteWant(model string, want int, np notPlaced) {
	r.backoffMu.Lock()
	defer r.backoffMu.Unlock()
	r.wants[model] = want
	old := r.notPlaced[model]
	if np.why == "" {
		delete(r.notPlaced, model)
	} else {
		r.notPlaced[model] = np
	}
	switch {
	case np.why != "" && old.why == "":
		r.log.Warn("model asked for but cannot be loaded", "model", model, "why", np.why)
	case np.why == "" && old.why != "" && want > 0:
		r.log.Info("model asked for can be loaded now", "model", model)
	}
}

// Wanted returns how many replicas of a model's current generation the
// reconciler wants, as its last pass decided: scaling.min, more while its
// load asks for them, and one while a model loaded on demand is asked for.
// ok is false before a pass has looked at the model.
func (r *Reconciler) Wanted(model string) (n int, ok bool) {
	r.backoffMu.Lock()
	defer r.backoffMu.Unlock()
	n, ok = r.wants[model]
	return n, ok
}

// NotPlaced says why a model loaded on demand that is asked for has no
// replica being loaded: no node can hold one (the scheduler's reason), or,
// with failed, its last replica failed and the next waits for its backoff.
// "" when a replica is placed or loading, or the model is not asked for.
func (r *Reconciler) NotPlaced(model string) (why string, failed bool) {
	r.backoffMu.Lock()
	defer r.backoffMu.Unlock()
	np := r.notPlaced[model]
	return np.why, np.failed
}

// evictFor makes room for a model that did not place by stopping one idle
// replica of another model loaded on demand, when that frees what the
// model needs. Only replicas of models at scaling.min 0 (a model at min ≥ 1
// is a promise to stay up), of one node (a multi-node replica is tens of
// minutes to rebuild), that have run for EvictAfter (so two models with
// room for one do not take turns), with no request in flight or waiting,
// whose model nobody asked for within EvictAfter; one at a time. The least
// recently used model's replica goes first. It leaves routing at once and
// is stopped once nothing is in flight on it (drain.go): a request may
// have reached it since its count was read.
func (r *Reconciler) evictFor(tx *fleet.Tx, e models.Entry, now time.Time) {
	if r.opts.Routing == nil {
		return
	}
	reps := tx.Replicas()
	for id := range r.evicting {
		if !slices.ContainsFunc(reps, func(rep *fleet.Replica) bool { return rep.ID == id }) {
			delete(r.evicting, id)
		}
	}
	if len(r.evicting) > 0 {
		return // one at a time
	}
	a := r.opts.Autoscale
	var best *fleet.Replica
	var bestLast time.Time
	for _, rep := range reps {
		if _, leaving := r.draining[rep.ID]; leaving {
			continue
		}
		if rep.Model == e.Model.Name || rep.State != fleet.ReplicaReady || rep.ShardsExpected() != 1 ||
			now.Sub(rep.Created) < a.EvictAfter || r.inflight[rep.ID] > 0 {
			continue
		}
		m, ok := r.opts.Catalog.Get(rep.Model)
		if !ok || m.Model.Scaling.Min != 0 {
			continue
		}
		d := r.opts.Routing.Demand(rep.Model)
		if d.Pending || d.Waiting > 0 || (!d.LastRequest.IsZero() && now.Sub(d.LastRequest) < a.EvictAfter) {
			continue
		}
		if best != nil && !d.LastRequest.Before(bestLast) {
			continue
		}
		if !placesWithout(tx, reps, rep, e) {
			continue
		}
		best, bestLast = rep, d.LastRequest
	}
	if best == nil {
		return
	}
	r.evicting[best.ID] = e.Model.Name
	r.roomFor[e.Model.Name] = now
	if st := r.scaling[best.Model]; st != nil {
		st.want, st.evicted = 0, now
	}
	r.startDrain(best, "idle, evicted to make room for "+e.Model.Name, now)
}

// placesWithout reports whether a replica of e would place if victim's
// GPUs were free.
func placesWithout(tx *fleet.Tx, reps []*fleet.Replica, victim *fleet.Replica, e models.Entry) bool {
	used := tx.UsedGPUs()
	for _, s := range victim.Shards {
		for _, g := range s.GPUs {
			delete(used[s.Node], g)
		}
	}
	others := slices.DeleteFunc(slices.Clone(reps), func(rep *fleet.Replica) bool { return rep == victim })
	return scheduler.Place(snapshot(tx.Nodes(), used, others), demand(e.Model)).Placed
}

// noteReady measures how long each replica took from placement to ready:
// a model's last figure is the ETA a request for it is told while one loads.
func (r *Reconciler) noteReady(tx *fleet.Tx, now time.Time) {
	present := map[string]bool{}
	for _, rep := range tx.Replicas() {
		present[rep.ID] = true
		if rep.State == fleet.ReplicaReady && !r.readySeen[rep.ID] {
			r.readySeen[rep.ID] = true
			if !rep.Adopted {
				r.loadTime[rep.Model] = now.Sub(rep.Created)
				if r.opts.OnLoadTime != nil {
					r.opts.OnLoadTime(rep.Model, r.loadTime[rep.Model])
				}
			}
			r.noteStart(rep, now)
		}
	}
	for id := range r.readySeen {
		if !present[id] {
			delete(r.readySeen, id)
		}
	}
}

// configureRouting gives the router each model's policy, whether it loads
// on demand and, while a replica of it loads with none ready, when it is
// expected to serve, or, while it is asked for and none can be loaded,
// why (noteWant); it has the router forget what was asked of a model
// that left the catalog.
func (r *Reconciler) configureRouting(entries []models.Entry, now time.Time) {
	if r.opts.Routing == nil {
		return
	}
	starting := map[string]time.Time{}
	ready, present := map[string]bool{}, map[string]bool{}
	for _, rep := range r.opts.Fleet.Replicas() {
		switch rep.State {
		case fleet.ReplicaReady:
			ready[rep.Model] = true
		case fleet.ReplicaStarting:
			if t, ok := starting[rep.Model]; !ok || rep.Created.Before(t) {
				starting[rep.Model] = rep.Created
			}
		}
	}
	var known map[string]time.Duration
	if r.opts.LoadTimes != nil {
		known = r.opts.LoadTimes()
	}
	for _, e := range entries {
		m := e.Model
		policy, err := router.Policy(m.RoutingProfile)
		if err != nil {
			r.log.Warn("unknown routing profile: using the default", "model", m.Name, "err", err)
			policy = nil
		}
		c := router.ModelConfig{Policy: policy, OnDemand: m.Scaling.OnDemand()}
		c.NotPlaced, _ = r.NotPlaced(m.Name)
		// A load that has taken longer than the last one gives no ETA
		// (the gateway's default Retry-After then): a second from now
		// would bring every waiting client back each second.
		if t, ok := starting[m.Name]; ok && !ready[m.Name] {
			lt, ok := r.loadTime[m.Name]
			if !ok {
				lt, ok = known[m.Name]
			}
			if ok && t.Add(lt).After(now) {
				c.ETA = t.Add(lt)
			}
		}
		r.opts.Routing.SetModel(m.Name, c)
		present[m.Name] = true
	}
	for name := range r.configured {
		if !present[name] {
			r.opts.Routing.Forget(name)
			delete(r.scaling, name)
			// A model created later under its name loads as it will.
			delete(r.loadTime, name)
		}
	}
	r.configured = present
}
