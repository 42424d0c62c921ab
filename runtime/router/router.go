// Package router holds the control plane's routing table: for every model,
// the rank-0 endpoints of its ready replicas and the requests in flight on
// each. The gateway asks it for an endpoint per request; the reconciler
// replaces a model's endpoints whenever readiness changes.
//
// The table is immutable and swapped atomically, so Pick takes no lock; the
// in-flight counters are atomics shared between successive tables, so a
// request that started before a change is still counted after it.
package router

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// ErrNoReplica is returned by Pick when the model has no ready endpoint.
var ErrNoReplica = errors.New("no ready replica")

// Endpoint is the rank-0 shard of one ready replica: where requests for its
// model are sent.
type Endpoint struct {
	// ReplicaID names the replica.
	ReplicaID string
	// Model is the canonical model name the replica serves.
	Model string
	// URL is the engine's base URL, http://host:port.
	URL string
	// Weight is the replica's routing-profile weight; values below 1 count as 1.
	Weight int
}

// EndpointLoad is an endpoint with the number of requests in flight on it.
type EndpointLoad struct {
	Endpoint
	InFlight int64
}

// Upstream is one endpoint as a Selector sees it: the endpoint and its live
// in-flight counter. Upstreams are created by the Router only.
type Upstream struct {
	ep       Endpoint
	weight   int64
	inflight *atomic.Int64
}

// Endpoint returns the endpoint this upstream sends to.
func (u *Upstream) Endpoint() Endpoint { return u.ep }

// Weight returns the endpoint's weight, at least 1.
func (u *Upstream) Weight() int64 { return u.weight }

// InFlight returns the number of requests currently leased on the upstream.
func (u *Upstream) InFlight() int64 { return u.inflight.Load() }

// Pool is the set of upstreams serving one model. It is immutable except for
// the upstreams' counters and the rotation cursor.
type Pool struct {
	upstreams []*Upstream
	cursor    atomic.Uint64
}

// Upstreams returns the pool's upstreams; callers must not modify the slice.
func (p *Pool) Upstreams() []*Upstream { return p.upstreams }

// Rotate returns a start offset in [0, len(upstreams)) that advances on every
// call, so policies can break ties round-robin instead of always favouring
// the first upstream.
func (p *Pool) Rotate() int {
	return int(p.cursor.Add(1) % uint64(len(p.upstreams)))
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

type table map[string]*Pool

// Router is the routing table. The zero value is not usable; call New.
type Router struct {
	sel   Selector
	mu    sync.Mutex // serialises writers; readers never take it
	table atomic.Pointer[table]
}

// Option configures a Router.
type Option func(*Router)

// WithSelector sets the selection policy; the default is LeastLoaded.
func WithSelector(s Selector) Option {
	return func(r *Router) { r.sel = s }
}

// New returns an empty Router.
func New(opts ...Option) *Router {
	r := &Router{sel: LeastLoaded{}}
	for _, o := range opts {
		o(r)
	}
	t := table{}
	r.table.Store(&t)
	return r
}

// upstreamKey identifies an endpoint across table changes: a replica that
// moved to another URL is a different upstream.
type upstreamKey struct{ replica, url string }

// SetEndpoints replaces the ready endpoints of model. An empty eps removes the
// model. Endpoints present before and after (same ReplicaID and URL) keep
// their in-flight counters; duplicates in eps are ignored after the first.
func (r *Router) SetEndpoints(model string, eps []Endpoint) {
	r.mu.Lock()
	defer r.mu.Unlock()

	old := *r.table.Load()
	existing := map[upstreamKey]*atomic.Int64{}
	if p := old[model]; p != nil {
		for _, u := range p.upstreams {
			existing[upstreamKey{u.ep.ReplicaID, u.ep.URL}] = u.inflight
		}
	}

	next := make(table, len(old)+1)
	for m, p := range old {
		if m != model {
			next[m] = p
		}
	}
	if len(eps) > 0 {
		seen := make(map[upstreamKey]bool, len(eps))
		ups := make([]*Upstream, 0, len(eps))
		for _, ep := range eps {
			k := upstreamKey{ep.ReplicaID, ep.URL}
			if seen[k] {
				continue
			}
			seen[k] = true
			if ep.Model == "" {
				ep.Model = model
			}
			w := int64(ep.Weight)
			if w < 1 {
				w = 1
			}
			c := existing[k]
			if c == nil {
				c = new(atomic.Int64)
			}
			ups = append(ups, &Upstream{ep: ep, weight: w, inflight: c})
		}
		next[model] = &Pool{upstreams: ups}
	}
	r.table.Store(&next)
}

// Pick chooses an endpoint for one request to model and leases it. key is the
// prefix-affinity key and may be empty. It returns ErrNoReplica (wrapped with
// the model's name) when the model has no ready endpoint.
func (r *Router) Pick(model, key string) (Lease, error) {
	p := (*r.table.Load())[model]
	if p == nil || len(p.upstreams) == 0 {
		return Lease{}, fmt.Errorf("routing model %q: %w", model, ErrNoReplica)
	}
	u := r.sel.Select(p, key)
	if u == nil {
		return Lease{}, fmt.Errorf("routing model %q: %w", model, ErrNoReplica)
	}
	u.inflight.Add(1)
	return Lease{l: &lease{up: u}}, nil
}

// Snapshot returns every model's endpoints with their in-flight counts, for
// the management API and metrics.
func (r *Router) Snapshot() map[string][]EndpointLoad {
	t := *r.table.Load()
	out := make(map[string][]EndpointLoad, len(t))
	for m, p := range t {
		loads := make([]EndpointLoad, len(p.upstreams))
		for i, u := range p.upstreams {
			loads[i] = EndpointLoad{Endpoint: u.ep, InFlight: u.inflight.Load()}
		}
		out[m] = loads
	}
	return out
}
