package router

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// modelState is what the router keeps per model across table changes: its
// policy, its prefix index, and what was asked of it.
type modelState struct {
	name string
	sel  atomic.Pointer[Selector]
	// index remembers which endpoints took each prompt prefix; bitUsers
	// counts the endpoints holding each of its 64 bits (under the
	// router's mu).
	index    *prefixIndex
	bitUsers [64]int
	// lastRequest is when a request for the model last arrived (Unix ns).
	lastRequest atomic.Int64
	// pending is when a request last found no endpoint of a model loaded
	// on demand (Unix ns), 0 when none did since the reconciler took it
	// (TakePending); it counts for PendingFor.
	pending  atomic.Int64
	onDemand atomic.Bool
	// eta is when the replica being loaded should serve (Unix ns), 0 when
	// unknown.
	eta atomic.Int64
	// notPlaced is ModelConfig.NotPlaced; nil or "" while the model can
	// be loaded.
	notPlaced atomic.Pointer[string]
	// waiting counts requests in Wait.
	waiting atomic.Int64

	mu    sync.Mutex
	ready chan struct{} // closed when the model gains an endpoint that answers
}

func newModelState(name string) *modelState {
	return &modelState{name: name, index: newPrefixIndex(defaultIndexBlocks)}
}

func (ms *modelState) policy() Selector {
	if s := ms.sel.Load(); s != nil {
		return *s
	}
	return PrefixAffinity{}
}

func (ms *modelState) asked(now time.Time) {
	ns := now.UnixNano()
	// Skip the store when it would change nothing visible: many requests a
	// millisecond need not all write the same cache line.
	if ns-ms.lastRequest.Load() > int64(time.Millisecond) {
		ms.lastRequest.Store(ns)
	}
}

// wake releases every request waiting for the model.
func (ms *modelState) wake() {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.ready != nil {
		close(ms.ready)
		ms.ready = nil
	}
}

// ModelConfig is how the router treats one model.
type ModelConfig struct {
	// Policy chooses among the model's endpoints; nil keeps the router's
	// default (PrefixAffinity).
	Policy Selector
	// OnDemand is true for a model whose replicas are placed when a request
	// asks for it (scaling.min 0 with a max above it): a request that finds
	// no endpoint is counted as demand and told the model is loading.
	OnDemand bool
	// ETA is when the replica being loaded is expected to serve; zero when
	// none is loading.
	ETA time.Time
	// NotPlaced says, for a model loaded on demand that was asked for and
	// has no replica, why none is being loaded: no node can hold one, or
	// its last replica failed and the next waits for its backoff. "" while
	// one is placed or loading. A request that finds no endpoint is then
	// told why instead of that the model is loading (a client told to
	// retry in 5 s would be told so for as long as it asks); it still
	// counts as demand, so a replica is placed once one can be.
	NotPlaced string
}

// SetModel configures model. The reconciler calls it on every pass for
// every catalog model; a model never configured has the default policy and
// is not loaded on demand.
func (r *Router) SetModel(model string, c ModelConfig) {
	r.mu.Lock()
	ms := r.modelLocked(model)
	r.mu.Unlock()
	sel := c.Policy
	if sel == nil {
		sel = r.defaultPolicy
	}
	ms.sel.Store(&sel)
	ms.onDemand.Store(c.OnDemand)
	if !c.OnDemand {
		// Not (or no longer) loaded on demand: a request that found no
		// endpoint before asks for nothing now.
		ms.pending.Store(0)
	}
	var eta int64
	if !c.ETA.IsZero() {
		eta = c.ETA.UnixNano()
	}
	ms.eta.Store(eta)
	why := c.NotPlaced
	if !c.OnDemand {
		why = ""
	}
	if old := ms.notPlaced.Swap(&why); why != "" && (old == nil || *old == "") {
		// Requests waiting for the model to load are told at once that it
		// cannot be, rather than at the end of their wait.
		ms.wake()
	}
}

// notPlacedWhy is ModelConfig.NotPlaced of a model loaded on demand, ""
// when it can be loaded.
func (ms *modelState) notPlacedWhy() string {
	if why := ms.notPlaced.Load(); why != nil && ms.onDemand.Load() {
		return *why
	}
	return ""
}

// PendingFor is how long a request that found no endpoint of a model
// loaded on demand counts as asking for one (Demand.Pending) when nothing
// takes it: the reconciler takes it on its next pass, at once; one it never
// takes (the model left the catalog meanwhile) must not place a replica of
// a model created much later under that name.
const PendingFor = time.Minute

// Forget drops everything kept about model (it left the catalog).
func (r *Router) Forget(model string) {
	r.SetEndpoints(model, nil)
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.models.Load()
	ms := old[model]
	if ms == nil {
		return
	}
	next := make(map[string]*modelState, len(old))
	for k, v := range old {
		if k != model {
			next[k] = v
		}
	}
	r.models.Store(&next)
	ms.wake()
}

// Demand is what was asked of one model, as the reconciler reads it.
type Demand struct {
	// LastRequest is when a request for the model last arrived; zero if
	// none did since the router started.
	LastRequest time.Time
	// Pending is true when a request found no endpoint of a model loaded
	// on demand since TakePending last cleared it, within PendingFor.
	Pending bool
	// InFlight is the requests in flight on the model's endpoints (draining
	// ones too); Waiting those waiting for one to be ready.
	InFlight, Waiting int64
	// Capacity is the sum of the weights of the endpoints that answer and
	// are not draining: the requests they carry at once at their latency
	// target.
	Capacity int64
	// Queue is the sum of those endpoints' loads (Upstream.Queue).
	Queue int64
}

// Load is the requests asked of the model per unit of its capacity (the
// demand on a model with no endpoint is reported as its waiting requests).
func (d Demand) Load() float64 {
	if d.Capacity == 0 {
		return float64(d.Waiting)
	}
	return float64(d.Queue+d.Waiting) / float64(d.Capacity)
}

// TakePending reports whether a request found no endpoint of model (loaded
// on demand) since the last call, within PendingFor, and clears it.
func (r *Router) TakePending(model string) bool {
	ms := (*r.models.Load())[model]
	return ms != nil && r.recent(ms.pending.Swap(0))
}

// recent reports whether a request that found no endpoint at ns (Unix ns,
// 0 for none) still counts.
func (r *Router) recent(ns int64) bool {
	return ns != 0 && r.now().Sub(time.Unix(0, ns)) <= PendingFor
}

// Demand reports what was asked of model.
func (r *Router) Demand(model string) Demand {
	ms := (*r.models.Load())[model]
	if ms == nil {
		return Demand{}
	}
	var d Demand
	if ns := ms.lastRequest.Load(); ns != 0 {
		d.LastRequest = time.Unix(0, ns)
	}
	d.Pending = r.recent(ms.pending.Load())
	d.Waiting = ms.waiting.Load()
	if p := (*r.table.Load())[model]; p != nil {
		for _, u := range p.upstreams {
			d.InFlight += u.inflight.Load()
			if u.serves() {
				d.Capacity += u.weight
				d.Queue += u.Queue()
			}
		}
	}
	return d
}

// Demanded is signalled (coalesced) when a request found no endpoint of a
// model loaded on demand, so the reconciler places one at once.
func (r *Router) Demanded() <-chan struct{} { return r.demanded }

// Wait blocks until model has an endpoint that answers, or ctx ends (its
// error is returned), or the model cannot be loaded on demand now
// (ModelConfig.NotPlaced; a *NotReadyError saying why is returned). The
// wait counts as demand.
func (r *Router) Wait(ctx context.Context, model string) error {
	r.mu.Lock()
	ms := r.modelLocked(model)
	r.mu.Unlock()
	ms.waiting.Add(1)
	defer ms.waiting.Add(-1)
	for {
		ms.mu.Lock()
		if ms.ready == nil {
			ms.ready = make(chan struct{})
		}
		ch := ms.ready
		ms.mu.Unlock()
		if r.hasUp(model) {
			return nil
		}
		if why := ms.notPlacedWhy(); why != "" {
			return &NotReadyError{Model: model, NotPlaced: why}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (r *Router) hasUp(model string) bool {
	p := (*r.table.Load())[model]
	if p == nil {
		return false
	}
	for _, u := range p.upstreams {
		if u.serves() {
			return true
		}
	}
	return false
}
