package server

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/llmgw/llmgw/runtime/leader"
	"github.com/llmgw/llmgw/runtime/reconcile"
	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/runtime/store"
)

// What a standby is asked reaches the leader through the store: each
// standby writes what its client API is asked of each model (when a
// request last came, the requests in flight on each replica and waiting
// for one, and the requests that found no replica of a model loaded on
// demand) to its own record (store.DemandStore), and the leader reads every
// record and counts it with its own requests in what its reconciler reads
// (haRouting). The reconciler does no I/O: it reads the merged view in
// memory.

// demandEvery is how often a standby checks whether what it is asked
// changed, writing its record when it did, and how often the leader reads
// the records: a first request through a standby reaches the leader's
// reconciler within about two of these (a request that finds no replica
// has the standby write at once).
const demandEvery = 250 * time.Millisecond

// pruneAfter is, in ha.lease, how old a record is when the leader removes
// it: its standby died without removing it (a live standby rewrites its
// record at least every ha.renew while it has anything to report, and one
// with nothing to report loses nothing when its record goes).
const pruneAfter = 10

// demandRecord is a standby's record as stored (store.PeerDemand.Value).
// Times are ages at the write, so the clocks of the machines need not
// agree: the leader adds the record's age by the database's clock.
type demandRecord struct {
	Models map[string]modelDemand `json:"models,omitempty"`
}

// modelDemand is what a standby was asked of one model.
type modelDemand struct {
	// IdleMS is how long before the write a request last asked for the
	// model; absent when none did since the process started.
	IdleMS *int64 `json:"idle_ms,omitempty"`
	// Waiting counts the requests waiting for a replica to be ready.
	Waiting int64 `json:"waiting,omitempty"`
	// InFlight counts the requests in flight, by replica.
	InFlight map[string]int64 `json:"in_flight,omitempty"`
	// Asks counts the requests that found no replica of the model (loaded
	// on demand) since the process started; AskedMS is how long before the
	// write the last of them came.
	Asks    uint64 `json:"asks,omitempty"`
	AskedMS int64  `json:"asked_ms,omitempty"`
}

// peerModel is what the standbys are asked of one model, merged.
type peerModel struct {
	inFlight, waiting int64
	// pending is set when a standby reported a first request the
	// reconciler has not taken yet (TakePending); pendingAt is when that
	// request came, on this process's clock. It counts for ttl, and only
	// while the model is in the catalog and loaded on demand.
	pending   bool
	pendingAt time.Time
}

// demand is a control plane's part in sharing what it is asked: the
// standby's writer and the leader's merged view of every standby's record.
type demand struct {
	h *ha
	// ttl is how long a record counts after it was written (ha.lease);
	// refresh is the longest a standby goes without writing (ha.renew).
	ttl, refresh time.Duration
	// kick wakes the reconciler: a request here or at a standby found no
	// replica of a model loaded on demand. write wakes the standby's
	// writer for the same reason.
	kick, write chan struct{}

	mu sync.Mutex
	// What the standby writer keeps: per model, how many requests found
	// no replica and when the last did.
	asks    map[string]uint64
	askedAt map[string]time.Time
	// What the leader merged from the standbys' records that are fresh:
	// per model, and the requests in flight per replica.
	models   map[string]*peerModel
	replicas map[string]peerReplica
	// lastRequest is, per model, the latest request a standby reported,
	// on this process's clock; it is kept when the record ages out (a
	// request came then).
	lastRequest map[string]time.Time
	// seenAsks is, per standby instance and model, the asks counted.
	seenAsks map[askKey]uint64
	// readFailing, writeFailing and pruneFailing are set while reading,
	// writing or removing records fails, so each failure is logged once.
	readFailing, writeFailing, pruneFailing bool
}

type askKey struct{ instance, model string }

// peerReplica is what the standbys have in flight on one replica.
type peerReplica struct {
	model    string
	inFlight int64
}

func newDemand(h *ha) *demand {
	ttl, refresh := h.cfg.Lease, h.cfg.Renew
	if ttl <= 0 {
		ttl = leader.DefaultTTL
	}
	if refresh <= 0 || refresh > ttl/2 {
		refresh = ttl / 3
	}
	return &demand{h: h, ttl: ttl, refresh: refresh, kick: make(chan struct{}, 1), write: make(chan struct{}, 1),
		asks: map[string]uint64{}, askedAt: map[string]time.Time{}, lastRequest: map[string]time.Time{}, seenAsks: map[askKey]uint64{}}
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// forward passes the router's signal that a request found no replica of
// a model loaded on demand to the reconciler (when leading) and to the
// standby's writer (when not).
func (d *demand) forward(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.h.s.Router.Demanded():
			notify(d.kick)
			notify(d.write)
		}
	}
}

// gather takes what this control plane's router was asked, as a standby
// writes it, and a signature of it that ignores the passing of time. It
// takes the router's pending first requests (no reconciler runs here to
// take them).
func (d *demand) gather(now time.Time) (demandRecord, string) {
	s := d.h.s
	snap := s.Router.Snapshot()
	rec := demandRecord{Models: map[string]modelDemand{}}
	type sig struct {
		Last     int64            `json:"l,omitempty"`
		Waiting  int64            `json:"w,omitempty"`
		InFlight map[string]int64 `json:"f,omitempty"`
		Asks     uint64           `json:"a,omitempty"`
	}
	sigs := map[string]sig{}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, e := range s.Catalog.List() {
		name := e.Model.Name
		rd := s.Router.Demand(name)
		if s.Router.TakePending(name) {
			d.asks[name]++
			d.askedAt[name] = now
		}
		var md modelDemand
		var g sig
		if !rd.LastRequest.IsZero() {
			idle := max(now.Sub(rd.LastRequest), 0).Milliseconds()
			md.IdleMS = &idle
			g.Last = rd.LastRequest.UnixNano()
		}
		md.Waiting, g.Waiting = rd.Waiting, rd.Waiting
		for _, ep := range snap[name] {
			if ep.InFlight > 0 {
				if md.InFlight == nil {
					md.InFlight = map[string]int64{}
				}
				md.InFlight[ep.ReplicaID] += ep.InFlight
			}
		}
		g.InFlight = md.InFlight
		if n := d.asks[name]; n > 0 {
			md.Asks, g.Asks = n, n
			md.AskedMS = max(now.Sub(d.askedAt[name]), 0).Milliseconds()
		}
		if md.IdleMS == nil && md.Waiting == 0 && md.InFlight == nil && md.Asks == 0 {
			continue
		}
		rec.Models[name] = md
		sigs[name] = g
	}
	b, _ := json.Marshal(sigs)
	return rec, string(b)
}

// report is a standby's writer: every demandEvery (and at once when a
// request found no replica) it writes its record if what it was asked
// changed, and at least every refresh while it has anything to report,
// so that the leader's view of it stays fresh. While this control plane
// leads it writes nothing (its requests are counted directly) and removes
// the record it wrote as a standby. When ctx
// ends (after the client API has stopped) it removes its record.
func (d *demand) report(ctx context.Context) {
	t := time.NewTicker(demandEvery)
	defer t.Stop()
	var last string
	var wrote time.Time
	written := false
	remove := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := d.h.s.Store.DeleteDemand(dctx, d.h.name, d.h.el.Status().Instance); err != nil {
			d.h.s.log.Warn("removing this control plane's demand record", "err", err)
			return
		}
		written, last = false, ""
	}
	for {
		select {
		case <-ctx.Done():
			if written {
				remove()
			}
			return
		case <-t.C:
		case <-d.write:
		}
		if _, leading := d.h.leading(); leading {
			// Took over: its requests count directly now.
			if written {
				remove()
			}
			continue
		}
		now := time.Now()
		rec, sig := d.gather(now)
		if sig == last && (len(rec.Models) == 0 || now.Sub(wrote) < d.refresh) {
			continue
		}
		b, err := json.Marshal(rec)
		if err != nil {
			d.h.s.log.Error("encoding demand", "err", err)
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = d.h.s.Store.PutDemand(wctx, d.h.name, d.h.el.Status().Instance, string(b))
		cancel()
		d.mu.Lock()
		failing := d.writeFailing
		d.writeFailing = err != nil
		d.mu.Unlock()
		if err != nil {
			if !failing && ctx.Err() == nil {
				d.h.s.log.Warn("writing this control plane's demand for the leader", "err", err)
			}
			continue
		}
		if failing {
			d.h.s.log.Info("writing this control plane's demand for the leader again")
		}
		last, wrote, written = sig, now, true
	}
}

// follow is the leader's reader: every demandEvery, while leading, it
// reads the standbys' records into the merged view, and removes those of
// standbys that died (prune).
func (d *demand) follow(ctx context.Context) {
	t := time.NewTicker(demandEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, leading := d.h.leading(); !leading {
			d.reset()
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		rows, err := d.h.s.Store.ListDemand(rctx)
		cancel()
		d.mu.Lock()
		failing := d.readFailing
		d.readFailing = err != nil
		d.mu.Unlock()
		if err != nil {
			if !failing && ctx.Err() == nil {
				d.h.s.log.Warn("reading the standbys' demand", "err", err)
			}
			continue
		}
		if failing {
			d.h.s.log.Info("reading the standbys' demand again")
		}
		if d.merge(rows, time.Now()) {
			notify(d.kick)
		}
		d.prune(ctx, rows)
	}
}

// prune removes the records older than pruneAfter × ttl when rows, just
// read, hold one. The store removes only what is that old when it deletes,
// so a record its standby rewrote meanwhile stays.
func (d *demand) prune(ctx context.Context, rows []store.PeerDemand) {
	bound := pruneAfter * d.ttl
	if !slices.ContainsFunc(rows, func(r store.PeerDemand) bool { return r.Age > bound }) {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	n, err := d.h.s.Store.PruneDemand(pctx, bound)
	cancel()
	d.mu.Lock()
	failing := d.pruneFailing
	d.pruneFailing = err != nil
	d.mu.Unlock()
	switch {
	case err != nil:
		if !failing && ctx.Err() == nil {
			d.h.s.log.Warn("removing the demand records of control planes gone", "err", err)
		}
	case n > 0:
		d.h.s.log.Info("removed the demand records of control planes gone", "records", n, "older_than", bound.String())
	}
}

// reset forgets the standbys' demand (this control plane does not lead).
func (d *demand) reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.models, d.replicas = nil, nil
	clear(d.lastRequest)
	clear(d.seenAsks)
}

// merge replaces the view with the records read at now (this process's
// clock): those of other control planes written within ttl count; a
// record older than that (its control plane died or cannot reach the
// store) counts for nothing but the time of its last request, already
// taken. Only models in the catalog take the time of a request or a first
// request. It reports whether a standby had a first request not seen
// before, within ttl, for a model loaded on demand.
func (d *demand) merge(rows []store.PeerDemand, now time.Time) bool {
	models := map[string]*peerModel{}
	replicas := map[string]peerReplica{}
	instances := map[string]bool{}
	d.mu.Lock()
	defer d.mu.Unlock()
	// What the reconciler has not taken yet stays pending, within ttl
	// and while the model loads on demand.
	for name, m := range d.models {
		if m.pending && now.Sub(m.pendingAt) <= d.ttl && d.onDemand(name) {
			models[name] = &peerModel{pending: true, pendingAt: m.pendingAt}
		}
	}
	fresh := false
	for _, row := range rows {
		instances[row.Instance] = true
		if row.Name == d.h.name || row.Age > d.ttl {
			continue
		}
		var rec demandRecord
		if err := json.Unmarshal([]byte(row.Value), &rec); err != nil {
			d.h.s.log.Warn("ignoring an unreadable demand record", "control_plane", row.Name, "err", err)
			continue
		}
		for name, md := range rec.Models {
			_, known := d.h.s.Catalog.Get(name)
			m := models[name]
			if m == nil {
				m = &peerModel{}
				models[name] = m
			}
			if md.IdleMS != nil && known {
				at := now.Add(-time.Duration(*md.IdleMS)*time.Millisecond - row.Age)
				if at.After(d.lastRequest[name]) {
					d.lastRequest[name] = at
				}
			}
			m.waiting += max(md.Waiting, 0)
			for id, n := range md.InFlight {
				if n > 0 {
					m.inFlight += n
					replicas[id] = peerReplica{model: name, inFlight: replicas[id].inFlight + n}
				}
			}
			k := askKey{row.Instance, name}
			if md.Asks > d.seenAsks[k] {
				d.seenAsks[k] = md.Asks
				at := now.Add(-time.Duration(md.AskedMS)*time.Millisecond - row.Age)
				if now.Sub(at) <= d.ttl && d.onDemand(name) {
					m.pending, m.pendingAt = true, at
					fresh = true
				}
			}
		}
	}
	for k := range d.seenAsks {
		if !instances[k.instance] {
			delete(d.seenAsks, k)
		}
	}
	d.models, d.replicas = models, replicas
	return fresh
}

// onDemand reports whether model is in the catalog and loaded on demand
// (what the router's ModelConfig.OnDemand says).
func (d *demand) onDemand(model string) bool {
	e, ok := d.h.s.Catalog.Get(model)
	return ok && e.Model.Scaling.OnDemand()
}

// forget drops what the standbys were asked of model, which left the
// catalog.
func (d *demand) forget(model string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.models, model)
	delete(d.lastRequest, model)
}

// merged returns the router's demand on model with the standbys' added.
// eps are the model's endpoints in the leader's router, with their load;
// nil is read only when a standby has requests in flight on the model.
func (d *demand) merged(model string, own router.Demand, eps func() []router.EndpointLoad) router.Demand {
	d.mu.Lock()
	defer d.mu.Unlock()
	if at := d.lastRequest[model]; at.After(own.LastRequest) {
		own.LastRequest = at
	}
	m := d.models[model]
	if m == nil {
		return own
	}
	own.Pending = own.Pending || m.pending
	own.Waiting += m.waiting
	own.InFlight += m.inFlight
	if m.inFlight > 0 {
		// The engine's own count, when it reports one, already holds the
		// standbys' requests up to a scrape ago (the router's queue counts
		// what it reported beyond this router's own); a standby's count
		// adds only what that misses.
		for _, ep := range eps() {
			// A draining replica's requests are finishing, not load on
			// the replicas that remain (router.Demand leaves it out too).
			peer := d.replicas[ep.ReplicaID].inFlight
			if ep.Down || ep.Draining || peer == 0 {
				continue
			}
			var external int64
			if ep.Engine.Known {
				external = max(ep.Engine.Running+ep.Engine.Waiting-ep.InFlight, 0)
			}
			own.Queue += max(peer-external, 0)
		}
	}
	return own
}

// takePending reports whether a standby reported a first request for
// model the reconciler has not taken, and takes it.
func (d *demand) takePending(model string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := d.models[model]
	if m == nil || !m.pending {
		return false
	}
	m.pending = false
	return time.Since(m.pendingAt) <= d.ttl
}

// addInFlight adds the standbys' requests in flight to the leader's
// snapshot, by replica; a replica the leader's table does not hold is
// added as an endpoint of its model.
func (d *demand) addInFlight(snap map[string][]router.EndpointLoad) map[string][]router.EndpointLoad {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.replicas) == 0 {
		return snap
	}
	left := maps.Clone(d.replicas)
	for _, eps := range snap {
		for i := range eps {
			if p, ok := left[eps[i].ReplicaID]; ok {
				eps[i].InFlight += p.inFlight
				delete(left, eps[i].ReplicaID)
			}
		}
	}
	for id, p := range left {
		snap[p.model] = append(snap[p.model], router.EndpointLoad{Endpoint: router.Endpoint{ReplicaID: id, Model: p.model}, InFlight: p.inFlight})
	}
	return snap
}

// haRouting is what the reconciler reads of the requests: the router's
// own, with what the standbys reported added (demand.merge), and the
// models' ETAs and reasons not to load kept for the standbys.
type haRouting struct{ s *Server }

var _ reconcile.Routing = haRouting{}

func (r haRouting) SetModel(model string, c router.ModelConfig) {
	r.s.Router.SetModel(model, c)
	r.s.ha.setETA(model, c.ETA)
	r.s.ha.setNotPlaced(model, c.NotPlaced)
}

func (r haRouting) Demand(model string) router.Demand {
	return r.s.ha.demand.merged(model, r.s.Router.Demand(model), func() []router.EndpointLoad { return r.s.Router.Snapshot()[model] })
}

func (r haRouting) TakePending(model string) bool {
	own := r.s.Router.TakePending(model)
	peer := r.s.ha.demand.takePending(model)
	return own || peer
}

func (r haRouting) Forget(model string) {
	r.s.Router.Forget(model)
	r.s.ha.demand.forget(model)
	r.s.ha.forget(model)
}

func (r haRouting) Demanded() <-chan struct{} { return r.s.ha.demand.kick }

func (r haRouting) Snapshot() map[string][]router.EndpointLoad {
	return r.s.ha.demand.addInFlight(r.s.Router.Snapshot())
}
