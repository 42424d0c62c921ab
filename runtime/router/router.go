// Package router holds the control plane's routing table: for every model,
// the rank-0 endpoints of its ready replicas, the requests in flight on each,
// whether each answers (passive health), the load its engine last reported,
// and the policy that chooses among them. The gateway asks it for an
// endpoint per request; the reconciler replaces a model's endpoints whenever
// readiness changes and reads back what was asked of each model (demand) to
// load models on demand and scale them.
//
// The table is immutable and swapped atomically, so Pick takes no lock; the
// per-endpoint state (in-flight counter, health, engine load) is shared
// between successive tables, so a request that started before a change is
// still counted after it.
//
// The package does no I/O: runtime/router/probe asks the engines whether
// they answer and how loaded they are, and reports it here.
//
// Files: router.go (the table, leases, picking), selection.go (the
// round-robin and least-loaded policies), prefix.go (prefix affinity and
// the affinity key), health.go (passive health and engine load), demand.go
// (what models were asked for, waiting for a loading model).
package router

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmgw/llmgw/spec"
)

// ErrNoReplica is returned by Pick when the model has no ready endpoint.
var ErrNoReplica = errors.New("no ready replica")

// NotReadyError is Route's error when the model has no endpoint that may
// take the request. It wraps ErrNoReplica.
type NotReadyError struct {
	Model string
	// Loading is true for a model loaded on demand: the request was
	// counted as demand, so a replica is being (or will be) placed.
	Loading bool
	// ETA is when the replica being loaded is expected to serve; zero when
	// nothing is being loaded yet.
	ETA time.Time
	// NotPlaced, for a model loaded on demand, says why no replica is
	// being loaded (ModelConfig.NotPlaced); Loading is false then. The
	// request was counted as demand all the same.
	NotPlaced string
	// Down is how many endpoints the model has that failed and have not
	// answered since; Tried how many the request already tried.
	Down, Tried int
}

func (e *NotReadyError) Error() string {
	switch {
	case e.Loading:
		return fmt.Sprintf("routing model %q: %v (loading on demand)", e.Model, ErrNoReplica)
	case e.NotPlaced != "":
		return fmt.Sprintf("routing model %q: %v (cannot be loaded on demand: %s)", e.Model, ErrNoReplica, e.NotPlaced)
	case e.Tried > 0:
		return fmt.Sprintf("routing model %q: %v (every replica tried failed)", e.Model, ErrNoReplica)
	case e.Down > 0:
		return fmt.Sprintf("routing model %q: %v (%d failed and not answering)", e.Model, ErrNoReplica, e.Down)
	}
	return fmt.Sprintf("routing model %q: %v", e.Model, ErrNoReplica)
}

func (e *NotReadyError) Unwrap() error { return ErrNoReplica }

// Endpoint is the rank-0 shard of one ready replica: where requests for its
// model are sent.
type Endpoint struct {
	// ReplicaID names the replica.
	ReplicaID string
	// Model is the canonical model name the replica serves.
	Model string
	// URL is the engine's base URL, http://host:port.
	URL string
	// Weight is the replica's routing-profile weight: the requests it
	// carries at once at its latency target (ctl bench measures it); values
	// below 1 count as 1.
	Weight int
	// Draining is true for a replica taken out of routing to be stopped (a
	// scale-down, an idle replica evicted): it takes no new request, but
	// stays in the table, so the requests in flight on it finish, are
	// counted (Snapshot, Demand.InFlight) and the reconciler stops it once
	// none is left.
	Draining bool `json:",omitempty"`
}

// EndpointLoad is an endpoint with its live state.
type EndpointLoad struct {
	Endpoint
	InFlight int64
	// Down is true while the endpoint is out of the table after a failed
	// connection, until its engine answers again.
	Down bool
	// Engine is the load its engine last reported; Known false when none.
	Engine EngineLoad
}

// upstreamState is what is kept about one endpoint across table changes.
type upstreamState struct {
	inflight atomic.Int64
	down     atomic.Bool
	// draining is the endpoint's Draining, in the state shared with the
	// leases: Route checks it after counting a request in flight (drain).
	draining atomic.Bool
	// engine is the load the engine last reported; nil when unknown.
	// external is how many more requests it reported running or waiting
	// than this router had in flight on it then.
	engine   atomic.Pointer[EngineLoad]
	external atomic.Int64
	// bit stands for the endpoint in its model's prefix index.
	bit uint64
}

// Upstream is one endpoint as a Selector sees it: the endpoint and its live
// state. Upstreams are created by the Router only.
type Upstream struct {
	ep       Endpoint
	weight   int64
	inflight *atomic.Int64
	st       *upstreamState
	model    *modelState
}

// Endpoint returns the endpoint this upstream sends to.
func (u *Upstream) Endpoint() Endpoint { return u.ep }

// Weight returns the endpoint's weight, at least 1.
func (u *Upstream) Weight() int64 { return u.weight }

// InFlight returns the number of requests currently leased on the upstream.
func (u *Upstream) InFlight() int64 { return u.inflight.Load() }

// Queue is the upstream's load in requests: those this router has in
// flight on it now, plus those others sent (other gateways, benchmarks) as
// its engine last reported them: the requests it reported running or
// waiting beyond what this router had in flight on it then. The engine's
// figure is up to a scrape interval old, so only that difference is taken
// from it; this router's own count is always current.
func (u *Upstream) Queue() int64 {
	return u.inflight.Load() + u.st.external.Load()
}

// kvFull reports whether u's engine last said its KV cache was full
// (spec.KVCacheFull); false when it reported no KV use.
func (u *Upstream) kvFull() bool {
	l := u.st.engine.Load()
	return l != nil && l.KVUsage >= spec.KVCacheFull
}

// less reports whether a request goes better to u than to o by load: u's
// load after taking it, (Queue+1)/weight, is lower.
func (u *Upstream) less(o *Upstream) bool {
	return (u.Queue()+1)*o.weight < (o.Queue()+1)*u.weight
}

// Pool is the set of upstreams serving one model, or the part of it a
// request may go to. It is immutable except for the upstreams' state and
// the rotation cursor.
type Pool struct {
	upstreams []*Upstream
	cursor    *atomic.Uint64
	model     *modelState
}

// Upstreams returns the pool's upstreams; callers must not modify the slice.
func (p *Pool) Upstreams() []*Upstream { return p.upstreams }

// Rotate returns a start offset in [0, len(upstreams)) that advances on every
// call, so policies can break ties round-robin instead of always favouring
// the first upstream.
func (p *Pool) Rotate() int {
	return int(p.cursor.Add(1) % uint64(len(p.upstreams)))
}

// leastLoaded returns the upstream with the lowest load after taking one
// more request, ties broken round-robin.
func (p *Pool) leastLoaded() *Upstream {
	ups := p.upstreams
	n := len(ups)
	if n == 1 {
		return ups[0]
	}
	start := p.Rotate()
	best := ups[start]
	for i := 1; i < n; i++ {
		if u := ups[(start+i)%n]; u.less(best) {
			best = u
		}
	}
	return best
}

// Lease is one request's hold on an endpoint. Call Done exactly when the
// request has finished; further calls do nothing. The zero Lease is valid and
// holds nothing.
type Lease struct {
	l *lease
}

type lease struct {
	up   *Upstream
	done atomic.Bool
}

// Endpoint returns the leased endpoint.
func (l Lease) Endpoint() Endpoint {
	if l.l == nil {
		return Endpoint{}
	}
	return l.l.up.ep
}

// Done releases the lease, decrementing the endpoint's in-flight count. It is
// safe to call more than once and from several goroutines.
func (l Lease) Done() {
	if l.l == nil {
		return
	}
	if l.l.done.CompareAndSwap(false, true) {
		l.l.up.inflight.Add(-1)
	}
}

// Fail releases the lease and takes its endpoint out of the table: the
// connection to it was refused or reset before it answered. It returns
// when its engine answers again (see Router.MarkUp).
func (l Lease) Fail() {
	if l.l == nil {
		return
	}
	l.l.up.st.down.Store(true)
	l.Done()
}

type table map[string]*Pool

// Router is the routing table. The zero value is not usable; call New.
type Router struct {
	mu    sync.Mutex // serialises writers; readers never take it
	table atomic.Pointer[table]
	// models holds what is kept per model across table changes; written
	// copy-on-write under mu.
	models atomic.Pointer[map[string]*modelState]
	// states is every endpoint's state by key, for reuse across tables.
	states map[upstreamKey]*upstreamState
	// defaultPolicy is the policy of models given none.
	defaultPolicy Selector
	demanded      chan struct{}
	now           func() time.Time
}

// Option configures a Router.
type Option func(*Router)

// WithSelector sets the policy of models given none (SetModel); the default
// is PrefixAffinity.
func WithSelector(s Selector) Option {
	return func(r *Router) { r.defaultPolicy = s }
}

// WithClock sets the clock demand is stamped with (tests).
func WithClock(now func() time.Time) Option {
	return func(r *Router) { r.now = now }
}

// New returns an empty Router.
func New(opts ...Option) *Router {
	r := &Router{defaultPolicy: PrefixAffinity{}, states: map[upstreamKey]*upstreamState{},
		demanded: make(chan struct{}, 1), now: time.Now}
	for _, o := range opts {
		o(r)
	}
	t := table{}
	r.table.Store(&t)
	m := map[string]*modelState{}
	r.models.Store(&m)
	return r
}

// upstreamKey identifies an endpoint across table changes: a replica that
// moved to another URL is a different upstream.
type upstreamKey struct{ replica, url string }

// modelLocked returns model's state, creating it. r.mu must be held.
func (r *Router) modelLocked(model string) *modelState {
	old := *r.models.Load()
	if st := old[model]; st != nil {
		return st
	}
	st := newModelState(model)
	sel := r.defaultPolicy
	st.sel.Store(&sel)
	next := make(map[string]*modelState, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[model] = st
	r.models.Store(&next)
	return st
}

// SetEndpoints replaces the ready endpoints of model. An empty eps removes the
// model's endpoints. Endpoints present before and after (same ReplicaID and
// URL) keep their state (in-flight counter, health, engine load); duplicates
// in eps are ignored after the first.
func (r *Router) SetEndpoints(model string, eps []Endpoint) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ms := r.modelLocked(model)
	old := *r.table.Load()
	var ups []*Upstream
	if len(eps) > 0 {
		seen := make(map[upstreamKey]bool, len(eps))
		ups = make([]*Upstream, 0, len(eps))
		for _, ep := range eps {
			k := upstreamKey{ep.ReplicaID, ep.URL}
			if seen[k] {
				continue
			}
			seen[k] = true
			if ep.Model == "" {
				ep.Model = model
			}
			st := r.states[k]
			if st == nil {
				st = &upstreamState{bit: ms.takeBit()}
				r.states[k] = st
			}
			st.draining.Store(ep.Draining)
			ups = append(ups, &Upstream{ep: ep, weight: int64(max(ep.Weight, 1)), inflight: &st.inflight, st: st, model: ms})
		}
	}
	// Forget the state of endpoints no table holds any more.
	var prev []*Upstream
	if p := old[model]; p != nil {
		prev = p.upstreams
	}
	for _, u := range prev {
		k := upstreamKey{u.ep.ReplicaID, u.ep.URL}
		if !slices.ContainsFunc(ups, func(n *Upstream) bool { return n.st == u.st }) {
			delete(r.states, k)
			u.model.freeBit(u.st.bit)
		}
	}
	r.storeLocked(model, ups, ms)
}

// storeLocked swaps in a table where model's pool holds ups.
func (r *Router) storeLocked(model string, ups []*Upstream, ms *modelState) {
	old := *r.table.Load()
	next := make(table, len(old)+1)
	for m, p := range old {
		if m != model {
			next[m] = p
		}
	}
	if len(ups) > 0 {
		cursor := new(atomic.Uint64)
		if p := old[model]; p != nil {
			cursor = p.cursor
		}
		next[model] = &Pool{upstreams: ups, cursor: cursor, model: ms}
	}
	r.table.Store(&next)
	for _, u := range ups {
		if u.serves() {
			ms.wake()
			break
		}
	}
}

// Request is what a policy knows of one request.
type Request struct {
	// Key is the prompt's prefix blocks (PrefixKey); nil when the request
	// has no prompt worth keeping together.
	Key Key
	// Exclude names replicas the request already failed on.
	Exclude []string
}

// Pick chooses an endpoint for one request to model and leases it. key is
// the prompt (or any text whose shared prefixes should meet on one replica)
// and may be empty. It returns an error wrapping ErrNoReplica when the model
// has no ready endpoint.
func (r *Router) Pick(model, key string) (Lease, error) {
	var k Key
	if key != "" {
		k = PrefixKey([]byte(key))
	}
	return r.Route(model, Request{Key: k})
}

// Route chooses an endpoint for one request to model by the model's policy
// among its endpoints that answer and that req does not exclude, and leases
// it. With none it returns a *NotReadyError (which wraps ErrNoReplica); for
// a model loaded on demand the request then counts as demand.
func (r *Router) Route(model string, req Request) (Lease, error) {
	p := (*r.table.Load())[model]
	var ms *modelState
	if p != nil {
		ms = p.model
	} else if ms = (*r.models.Load())[model]; ms == nil {
		// A model the reconciler has not configured yet: what was asked of
		// it still counts.
		r.mu.Lock()
		ms = r.modelLocked(model)
		r.mu.Unlock()
	}
	now := r.now()
	ms.asked(now)
	var cand *Pool
	down := 0
	if p != nil {
		cand, down = p.candidates(req.Exclude)
	}
	if cand == nil {
		e := &NotReadyError{Model: model, Down: down, Tried: len(req.Exclude)}
		// Loading only when it has no replica at all (or only replicas
		// draining, which the request brings back): one whose replicas
		// failed is not loading, and neither is one the request tried.
		// One that cannot be placed now is not loading either, but is
		// asked for all the same, so that it is placed once it can be.
		if ms.onDemand.Load() && (p == nil || p.draining()) {
			if e.NotPlaced = ms.notPlacedWhy(); e.NotPlaced == "" {
				e.Loading = true
				if eta := ms.eta.Load(); eta != 0 {
					e.ETA = time.Unix(0, eta)
				}
			}
			ms.pending.Store(now.UnixNano())
			select {
			case r.demanded <- struct{}{}:
			default:
			}
		}
		return Lease{}, e
	}
	u := ms.policy().Select(cand, req.Key)
	if u == nil {
		return Lease{}, &NotReadyError{Model: model, Down: down, Tried: len(req.Exclude)}
	}
	u.inflight.Add(1)
	if u.st.draining.Load() {
		// Taken out of routing after the table this request read: the
		// reconciler, which flags it before reading its count, may have
		// read none and be stopping it. The request goes elsewhere.
		u.inflight.Add(-1)
		return r.Route(model, req)
	}
	if req.Key != nil {
		ms.index.record(req.Key, u.st.bit)
	}
	return Lease{l: &lease{up: u}}, nil
}

// serves reports whether the upstream may take a request: it answers and
// is not draining.
func (u *Upstream) serves() bool { return !u.st.down.Load() && !u.st.draining.Load() }

// draining reports whether every upstream of the pool is draining.
func (p *Pool) draining() bool {
	for _, u := range p.upstreams {
		if !u.st.draining.Load() {
			return false
		}
	}
	return true
}

// candidates returns the part of the pool a request may go to, and how
// many upstreams are down; nil when none may take it. With every upstream
// up, none draining and nothing excluded it is the pool itself.
func (p *Pool) candidates(exclude []string) (*Pool, int) {
	down := 0
	keep := 0
	for _, u := range p.upstreams {
		switch {
		case u.st.down.Load():
			down++
		case !u.st.draining.Load() && !slices.Contains(exclude, u.ep.ReplicaID):
			keep++
		}
	}
	switch {
	case keep == 0:
		return nil, down
	case keep == len(p.upstreams):
		return p, down
	}
	ups := make([]*Upstream, 0, keep)
	for _, u := range p.upstreams {
		if u.serves() && !slices.Contains(exclude, u.ep.ReplicaID) {
			ups = append(ups, u)
		}
	}
	return &Pool{upstreams: ups, cursor: p.cursor, model: p.model}, down
}

// Snapshot returns every model's endpoints with their state, for the
// management API, metrics and the reconciler.
func (r *Router) Snapshot() map[string][]EndpointLoad {
	t := *r.table.Load()
	out := make(map[string][]EndpointLoad, len(t))
	for m, p := range t {
		loads := make([]EndpointLoad, len(p.upstreams))
		for i, u := range p.upstreams {
			loads[i] = EndpointLoad{Endpoint: u.ep, InFlight: u.inflight.Load(), Down: u.st.down.Load()}
			if e := u.st.engine.Load(); e != nil {
				loads[i].Engine = *e
			}
		}
		out[m] = loads
	}
	return out
}
