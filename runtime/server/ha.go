package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/pki"
	"github.com/llmgw/llmgw/runtime/agentsvc"
	"github.com/llmgw/llmgw/runtime/config"
	"github.com/llmgw/llmgw/runtime/leader"
	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/runtime/store"
)

// Keys of what the leader writes for the fleet (store.FleetState).
const (
	fleetRoutes       = "routes"
	fleetLiveReplicas = "live_replicas"
	// fleetLoading holds, per model loaded on demand whose replica is
	// loading with none ready, when the leader expects it to serve (Unix
	// ms): a standby tells its requests the same Retry-After.
	fleetLoading = "loading"
	// fleetNotPlaced holds, per model loaded on demand that is asked for
	// and cannot be loaded now, why (router.ModelConfig.NotPlaced): a
	// standby tells its requests the same, not that the model is loading.
	fleetNotPlaced = "not_placed"
	// fleetLoadTimes holds, per model, how long its last replica took from
	// placement to ready (ms), as the leader measured it: a control plane
	// that restarts or takes over gives the same ETA before it has seen the
	// model load itself.
	fleetLoadTimes = "load_times"
)

// Timings of the follower and the publisher.
const (
	// followEvery is how often a standby reads the stored catalog, and
	// followRoutes how often the leader's routes: a request waiting for a
	// model to load is served, and a replica the leader stopped is left
	// alone, within about twice that of the leader's change.
	followEvery  = time.Second
	followRoutes = 250 * time.Millisecond
	// followFresh is how old a standby's last successful read may be for
	// it to count as ready.
	followFresh = 5 * time.Second
	// publishEvery is how often the leader writes changed routes.
	publishEvery = 250 * time.Millisecond
)

// ha is a control plane's part in the election among those sharing its
// store. The leader owns the fleet: it runs the reconciler, takes the
// agents' sessions, and publishes the routes (which replica serves which
// model, at which address) to the store under its fencing token. A
// standby serves the client API from those routes, refuses agents with
// the leader's address, and relays management calls to the leader.
type ha struct {
	s     *Server
	el    *leader.Elector
	name  string
	addrs struct{ agents, manage, client string }
	cfg   config.HA
	// relayTLS verifies the leader's management certificate.
	relayTLS *tls.Config

	mu sync.Mutex
	// routes are those last applied to the router from the store, raw as
	// read; followedAt is when the store was last read successfully and
	// followed whether a standby applied any.
	routesRaw  string
	followed   map[string][]router.Endpoint
	followedAt time.Time
	hasRoutes  bool
	// published are the leader's routes: set by the reconciler's passes,
	// written to the store by publish when dirty.
	published map[string][]router.Endpoint
	dirty     bool
	// routesWritten is set once the leader has written its routes, so
	// that standbys follow (and are ready) even while no model runs.
	routesWritten bool
	// etas are, per model loading on demand, when the leader expects it
	// to serve, written (fleetLoading) when etasDirty; loadingRaw is what
	// a standby last read of them.
	etas       map[string]time.Time
	etasDirty  bool
	loadingRaw string
	loading    map[string]time.Time
	// notPlaced are, per model loaded on demand that is asked for and
	// cannot be loaded, why: the leader's, written (fleetNotPlaced) with
	// the ETAs; notPlacedRaw and notPlacedRead what a standby last read.
	notPlaced     map[string]string
	notPlacedRaw  string
	notPlacedRead map[string]string
	// loadTimes are the models' load times (fleetLoadTimes): read from
	// the store when this control plane is elected, then measured by its
	// reconciler (written when loadTimesDirty).
	loadTimes      map[string]time.Duration
	loadTimesDirty bool
	// configured holds the models a standby last configured the router
	// for: one that left the catalog is forgotten (what was asked of it
	// does not count for a model created later under its name).
	configured map[string]bool
	// demand shares what this control plane is asked with the leader
	// (demand.go).
	demand  *demand
	started bool
	relays  map[string]*grpc.ClientConn
	// lost is told once why leadership ended.
	lost chan string
}

func newHA(s *Server) (*ha, error) {
	cfg := s.cfg.HA
	h := &ha{s: s, cfg: cfg, name: cfg.Name, published: map[string][]router.Endpoint{}, etas: map[string]time.Time{}, notPlaced: map[string]string{},
		relays: map[string]*grpc.ClientConn{}, lost: make(chan string, 1)}
	if h.name == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("ha.name is not set and the host name is unknown: %w", err)
		}
		h.name = host
	}
	h.addrs.agents = advertised(cfg.AdvertiseAgents, s.addrs[ListenAgents])
	h.addrs.manage = advertised(cfg.AdvertiseManage, s.addrs[ListenManage])
	h.addrs.client = advertised(cfg.AdvertiseClient, s.addrs[ListenClient])
	ca := cfg.ManageCA
	if ca == "" {
		ca = s.cfg.AgentTLS.CA
	}
	var err error
	if h.relayTLS, err = pki.ClientTLS(ca, "", "", ""); err != nil {
		return nil, fmt.Errorf("ha.manage_ca: %w", err)
	}
	h.el = leader.New(leader.Options{
		Store: s.Store, Name: h.name, Version: s.version,
		AgentAddr: h.addrs.agents, ManageAddr: h.addrs.manage, ClientAddr: h.addrs.client,
		TTL: cfg.Lease, Renew: cfg.Renew, Retry: cfg.Retry,
		OnElected: h.elected, OnLost: h.lose,
		Logger: s.log,
	})
	h.demand = newDemand(h)
	return h, nil
}

// advertised is the configured address, or the bound one with the host
// name in place of an unspecified host.
func advertised(configured, bound string) string {
	if configured != "" || bound == "" {
		return configured
	}
	host, port, err := net.SplitHostPort(bound)
	if err != nil {
		return bound
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if hn, err := os.Hostname(); err == nil {
			host = hn
		}
	}
	return net.JoinHostPort(host, port)
}

// leading reports the fencing token while this control plane leads.
func (h *ha) leading() (int64, bool) { return h.el.Leading() }

// leaderElsewhere returns the lease holder when it is another control
// plane whose lease may still be valid: what was left of it when last
// read, less the time since on this clock (a standby cut off from the
// store does not trust its last view for ever).
func (h *ha) leaderElsewhere() (store.Lease, bool) {
	st := h.el.Status()
	l := st.Lease
	if st.Leading || l.Holder == "" || l.Instance == st.Instance || !st.LeaseValid(time.Now()) {
		return store.Lease{}, false
	}
	return l, true
}

// leadership is what agent sessions need to know.
func (h *ha) leadership() agentsvc.Leadership {
	if tok, ok := h.leading(); ok {
		return agentsvc.Leadership{Leading: true, Token: tok}
	}
	if l, ok := h.leaderElsewhere(); ok {
		return agentsvc.Leadership{Leader: l.Holder, LeaderAddr: l.AgentAddr}
	}
	return agentsvc.Leadership{}
}

// ready says whether the client API can serve: the leader once its
// reconciler drives the fleet, or while it takes over with the routes it
// followed as a standby; a standby while its routes are fresh.
func (h *ha) ready() bool {
	_, leading := h.leading()
	if leading && h.s.Reconciler.Ready() {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.hasRoutes {
		return false
	}
	return leading || time.Since(h.followedAt) < followFresh
}

// elected starts leading: the fleet's drains and live replicas are read
// from the store, then the reconciler runs, holding placement until the
// agents have reported the replicas the last leader ran.
func (h *ha) elected(token int64) {
	ctx := h.s.runCtx
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	expected, err := h.s.liveReplicasHint(rctx)
	if err != nil {
		h.s.log.Warn("reading the replicas the last leader ran", "err", err)
	}
	drains, err := h.s.Store.ListNodeDrains(rctx)
	if err != nil {
		h.s.log.Warn("reading drained nodes", "err", err)
	}
	if len(drains) > 0 {
		h.s.Fleet.DrainOnConnect(drains)
	}
	if err := h.readLoadTimes(rctx); err != nil {
		h.s.log.Warn("reading the models' load times", "err", err)
	}
	h.mu.Lock()
	if h.started || ctx.Err() != nil {
		h.mu.Unlock()
		return
	}
	h.started = true
	h.mu.Unlock()
	h.s.Reconciler.Resume(expected, time.Now().Add(h.s.cfg.Agents.Settle))
	h.s.log.Info("leading the fleet", "name", h.name, "token", token, "expected_replicas", len(expected), "drained_nodes", len(drains))
	h.s.wg.Add(1)
	go func() {
		defer h.s.wg.Done()
		h.s.Reconciler.Run(h.s.leaderCtx)
	}()
}

// lose ends leadership for good: the agents' sessions end and the
// reconciler stops at once, then the server stops with an error, to be
// started again (as a standby) by its supervisor.
func (h *ha) lose(reason string) {
	h.s.stopLeading()
	select {
	case h.lost <- reason:
	default:
	}
}

// SetEndpoints receives the reconciler's routes. They reach the router,
// and the store for the standbys, only once the reconciler drives the
// fleet: while it waits for agents after a takeover, the routes followed
// as a standby keep serving.
func (h *ha) SetEndpoints(model string, eps []router.Endpoint) {
	if !h.s.Reconciler.Ready() {
		return
	}
	h.s.Router.SetEndpoints(model, eps)
	h.mu.Lock()
	defer h.mu.Unlock()
	if old, ok := h.published[model]; ok == (eps != nil) && slices.Equal(old, eps) {
		return
	}
	if eps == nil {
		delete(h.published, model)
	} else {
		h.published[model] = slices.Clone(eps)
	}
	h.dirty = true
}

// setETA keeps when the leader expects a model loading on demand to
// serve (zero: none is loading), for the standbys. A change of less than a
// second is not worth a write.
func (h *ha) setETA(model string, eta time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	old, had := h.etas[model]
	switch {
	case eta.IsZero() && had:
		delete(h.etas, model)
	case eta.IsZero():
		return
	case had && eta.Sub(old).Abs() < time.Second:
		return
	default:
		h.etas[model] = eta
	}
	h.etasDirty = true
}

// setLoadTime keeps a model's load time as this control plane's
// reconciler measured it (0: the model is gone, forget it), to be written
// while it leads.
func (h *ha) setLoadTime(model string, took time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, had := h.loadTimes[model]; took == 0 && !had {
		return
	}
	if h.loadTimes == nil {
		h.loadTimes = map[string]time.Duration{}
	}
	if took == 0 {
		delete(h.loadTimes, model)
	} else {
		h.loadTimes[model] = took
	}
	h.loadTimesDirty = true
}

// forget drops what is kept for the standbys of a model that left the
// catalog: its ETA, why it cannot load, and its load time.
func (h *ha) forget(model string) {
	h.setETA(model, time.Time{})
	h.setNotPlaced(model, "")
	h.setLoadTime(model, 0)
}

// knownLoadTimes returns the models' load times as last measured, here or
// by the leader (reconcile.Options.LoadTimes).
func (h *ha) knownLoadTimes() map[string]time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.loadTimes)
}

// readLoadTimes reads the models' load times the last leader wrote
// (fleetLoadTimes), for this control plane's reconciler to give their
// ETAs before it has seen a model load itself.
func (h *ha) readLoadTimes(ctx context.Context) error {
	raw, err := h.fleetState(ctx, fleetLoadTimes)
	if err != nil {
		return err
	}
	var ms map[string]int64
	if raw != "" {
		if err := json.Unmarshal([]byte(raw), &ms); err != nil {
			return fmt.Errorf("decoding the models' load times: %w", err)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.loadTimes = make(map[string]time.Duration, len(ms))
	for m, v := range ms {
		h.loadTimes[m] = time.Duration(v) * time.Millisecond
	}
	return nil
}

// setNotPlaced keeps why a model loaded on demand that is asked for cannot
// be loaded ("": it can), for the standbys.
func (h *ha) setNotPlaced(model, why string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.notPlaced[model] == why {
		return
	}
	switch {
	case why == "":
		delete(h.notPlaced, model)
	case h.notPlaced == nil:
		h.notPlaced = map[string]string{model: why}
	default:
		h.notPlaced[model] = why
	}
	h.etasDirty = true
}

// publish writes the leader's routes when they changed (and once, when its
// reconciler first drives the fleet, even if nothing runs), and the
// models' ETAs when they changed, under its token.
func (h *ha) publish(ctx context.Context) {
	t := time.NewTicker(publishEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h.publishOnce(ctx)
	}
}

// publishOnce writes what changed since the last write, while leading.
func (h *ha) publishOnce(ctx context.Context) {
	token, ok := h.leading()
	if !ok {
		return
	}
	h.mu.Lock()
	var writes []struct{ key, value string }
	if !h.routesWritten && h.s.Reconciler.Ready() {
		// The first write of a new leader replaces what the last
		// one wrote, ETAs too.
		h.etasDirty = true
	}
	if h.dirty || (!h.routesWritten && h.s.Reconciler.Ready()) {
		b, err := json.Marshal(h.published)
		if err != nil {
			h.s.log.Error("encoding routes", "err", err)
		} else {
			writes = append(writes, struct{ key, value string }{fleetRoutes, string(b)})
		}
		h.dirty, h.routesWritten = false, true
	}
	if h.etasDirty {
		ms := make(map[string]int64, len(h.etas))
		for m, t := range h.etas {
			ms[m] = t.UnixMilli()
		}
		b, _ := json.Marshal(ms)
		writes = append(writes, struct{ key, value string }{fleetLoading, string(b)})
		b, _ = json.Marshal(h.notPlaced)
		writes = append(writes, struct{ key, value string }{fleetNotPlaced, string(b)})
		h.etasDirty = false
	}
	if h.loadTimesDirty {
		ms := make(map[string]int64, len(h.loadTimes))
		for m, d := range h.loadTimes {
			ms[m] = d.Milliseconds()
		}
		b, _ := json.Marshal(ms)
		writes = append(writes, struct{ key, value string }{fleetLoadTimes, string(b)})
		h.loadTimesDirty = false
	}
	h.mu.Unlock()
	for _, w := range writes {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := h.s.Store.PutFleetState(wctx, token, w.key, w.value)
		cancel()
		switch {
		case errors.Is(err, store.ErrFenced):
			h.el.Abdicate("the store refused the " + w.key + ": " + err.Error())
		case err != nil:
			h.s.log.Warn("publishing fleet state", "key", w.key, "err", err)
			h.mu.Lock()
			switch w.key {
			case fleetRoutes:
				h.dirty = true
			case fleetLoadTimes:
				h.loadTimesDirty = true
			default:
				h.etasDirty = true
			}
			h.mu.Unlock()
		}
	}
}

// follow is a standby's loop: it reads the leader's routes into the router
// every followRoutes, and the stored catalog into the registry every
// followEvery. A run of failed reads is logged once, and so is the read
// that ends it.
func (h *ha) follow(ctx context.Context) {
	t := time.NewTicker(followRoutes)
	defer t.Stop()
	var last time.Time
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := h.el.Status()
		if st.Leading || st.Lease.Holder == "" || st.Lease.Holder == h.name {
			// Leading, or the lease was never read or is this control
			// plane's own from before a restart: nothing to follow.
			continue
		}
		full := time.Since(last) >= followEvery
		if full {
			last = time.Now()
		}
		rctx, cancel := context.WithTimeout(ctx, followEvery)
		err := h.followOnce(rctx, full)
		cancel()
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			h.s.log.Warn("following the leader", "err", err)
		case err == nil && failing:
			h.s.log.Info("following the leader again")
		}
		failing = err != nil
	}
}

// followLoading reads when the leader expects each model loading on
// demand to serve. When that or (with catalog) the catalog may have
// changed, or while a model loads, it configures the router for every
// catalog model as the leader's reconciler does: its routing profile,
// whether it loads on demand (a request that finds no replica is counted
// as demand, which the leader reads, and waits or is told to retry), and
// that ETA, none once it is past, as on the leader; or, for
// a model asked for that cannot be loaded, the leader's reason.
func (h *ha) followLoading(ctx context.Context, catalog bool) error {
	raw, err := h.fleetState(ctx, fleetLoading)
	if err != nil {
		return err
	}
	npRaw, err := h.fleetState(ctx, fleetNotPlaced)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.leading(); ok {
		return nil // elected meanwhile: the reconciler configures the router
	}
	if !catalog && raw == h.loadingRaw && npRaw == h.notPlacedRaw && len(h.loading) == 0 {
		return nil // nothing changed that the router takes
	}
	if npRaw != h.notPlacedRaw {
		var why map[string]string
		if npRaw != "" {
			if err := json.Unmarshal([]byte(npRaw), &why); err != nil {
				return fmt.Errorf("decoding why the leader cannot load models: %w", err)
			}
		}
		h.notPlacedRead, h.notPlacedRaw = why, npRaw
	}
	if raw != h.loadingRaw {
		var ms map[string]int64
		if raw != "" {
			if err := json.Unmarshal([]byte(raw), &ms); err != nil {
				return fmt.Errorf("decoding the leader's ETAs: %w", err)
			}
		}
		h.loading = make(map[string]time.Time, len(ms))
		for m, at := range ms {
			h.loading[m] = time.UnixMilli(at)
		}
		h.loadingRaw = raw
	}
	now := time.Now()
	present := map[string]bool{}
	for _, e := range h.s.Catalog.List() {
		m := e.Model
		present[m.Name] = true
		policy, _ := router.Policy(m.RoutingProfile)
		c := router.ModelConfig{Policy: policy, OnDemand: m.Scaling.OnDemand(), NotPlaced: h.notPlacedRead[m.Name]}
		// An ETA passed meanwhile is none (the default Retry-After), as
		// the leader's reconciler has it.
		if eta, ok := h.loading[m.Name]; ok && eta.After(now) {
			c.ETA = eta
		}
		h.s.Router.SetModel(m.Name, c)
	}
	for name := range h.configured {
		if !present[name] {
			h.s.Router.Forget(name)
			// Its routes are taken again at the next read, should the
			// model come back while the leader's routes stay the same.
			h.routesRaw = ""
		}
	}
	h.configured = present
	return nil
}

// fleetState reads what the leader wrote under key; "" when nothing.
func (h *ha) fleetState(ctx context.Context, key string) (string, error) {
	fs, err := h.s.Store.GetFleetState(ctx, key)
	switch {
	case err == nil:
		return fs.Value, nil
	case errors.Is(err, store.ErrNotFound):
		return "", nil
	}
	return "", err
}

// followOnce reads the leader's routes, ETAs and reasons not to load, and
// with catalog the stored catalog first.
func (h *ha) followOnce(ctx context.Context, catalog bool) error {
	if catalog {
		if _, err := h.s.Catalog.Reload(ctx); err != nil {
			return err
		}
	}
	if err := h.followLoading(ctx, catalog); err != nil {
		return err
	}
	fs, err := h.s.Store.GetFleetState(ctx, fleetRoutes)
	if errors.Is(err, store.ErrNotFound) {
		h.mu.Lock()
		h.followedAt = time.Now()
		h.mu.Unlock()
		return nil
	}
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.leading(); ok {
		return nil // elected meanwhile: the reconciler's routes rule
	}
	h.followedAt = time.Now()
	if fs.Value == h.routesRaw && h.hasRoutes {
		return nil
	}
	var routes map[string][]router.Endpoint
	if err := json.Unmarshal([]byte(fs.Value), &routes); err != nil {
		return fmt.Errorf("decoding the leader's routes: %w", err)
	}
	names := map[string]bool{}
	for _, e := range h.s.Catalog.List() {
		names[e.Model.Name] = true
	}
	for m := range maps.Keys(h.followed) {
		names[m] = true
	}
	// A model the leader routes may reach this control plane's catalog
	// after its routes do (the catalog is read less often): its endpoints
	// are set now, not skipped until the routes change again.
	for m := range routes {
		names[m] = true
	}
	for m := range names {
		h.s.Router.SetEndpoints(m, routes[m])
	}
	h.followed, h.routesRaw, h.hasRoutes = routes, fs.Value, true
	return nil
}

// relayedHeader marks a management call a standby relayed, with its name:
// a call is relayed at most once.
const relayedHeader = "x-llmgw-relayed"

// relay is the management API's interceptor on every control plane: the
// leader answers itself; a standby passes the call, with its credentials,
// to the leader and returns the answer.
func (h *ha) relay(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if _, ok := h.leading(); ok {
		return handler(ctx, req)
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if from := md.Get(relayedHeader); len(from) > 0 {
		// Relayed once already: the two control planes disagree on who
		// leads (one of them has a stale view). Relaying again could loop.
		return nil, status.Errorf(codes.Unavailable, "relayed by control plane %s, which took this one for the leader, but this one is a standby (a leader change is under way); retry in a few seconds", from[0])
	}
	l, ok := h.leaderElsewhere()
	if !ok {
		return nil, status.Error(codes.Unavailable, "this control plane is a standby and no leader is known (an election is under way); retry in a few seconds")
	}
	conn, err := h.relayConn(l.ManageAddr)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "relaying to the leader %s at %s: %v", l.Holder, l.ManageAddr, err)
	}
	reply, err := replyFor(info.FullMethod)
	if err != nil {
		return nil, status.Errorf(codes.Unimplemented, "relaying %s: %v", info.FullMethod, err)
	}
	out := metadata.MD{relayedHeader: {h.name}}
	if v := md.Get("authorization"); len(v) > 0 {
		out.Set("authorization", v...)
	}
	var header, trailer metadata.MD
	err = conn.Invoke(metadata.NewOutgoingContext(ctx, out), info.FullMethod, req, reply, grpc.Header(&header), grpc.Trailer(&trailer))
	_ = grpc.SetHeader(ctx, header)
	_ = grpc.SetTrailer(ctx, trailer)
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return nil, err
		}
		return nil, status.Errorf(codes.Unavailable, "relaying to the leader %s at %s: %v", l.Holder, l.ManageAddr, err)
	}
	return reply, nil
}

func (h *ha) relayConn(addr string) (*grpc.ClientConn, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.relays[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(h.relayTLS)))
	if err != nil {
		return nil, err
	}
	h.relays[addr] = c
	return c, nil
}

func (h *ha) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.relays {
		_ = c.Close()
	}
}

// replyFor returns an empty response message of a management method.
func replyFor(fullMethod string) (any, error) {
	svc, method, ok := cutMethod(fullMethod)
	if !ok {
		return nil, fmt.Errorf("malformed method name %q", fullMethod)
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return nil, err
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("%s is not a service", svc)
	}
	md := sd.Methods().ByName(protoreflect.Name(method))
	if md == nil {
		return nil, fmt.Errorf("no method %s in %s", method, svc)
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	if err != nil {
		return nil, err
	}
	return mt.New().Interface(), nil
}

// cutMethod splits "/pkg.Service/Method".
func cutMethod(full string) (svc, method string, ok bool) {
	if len(full) < 3 || full[0] != '/' {
		return "", "", false
	}
	for i := len(full) - 1; i > 0; i-- {
		if full[i] == '/' {
			return full[1:i], full[i+1:], i > 1 && i < len(full)-1
		}
	}
	return "", "", false
}

// status reports the election for ctl status.
func (h *ha) status(ctx context.Context) (*managev1.HAStatus, error) {
	out := &managev1.HAStatus{AnsweredBy: h.name, LeaseTtlMs: h.cfg.Lease.Milliseconds(), RenewMs: h.cfg.Renew.Milliseconds()}
	l, err := h.s.Store.GetLease(ctx, store.FleetLease)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	if err == nil {
		out.Leader, out.Token = l.Holder, l.Token
		out.LeaseAcquiredUnixMs, out.LeaseExpiresUnixMs = l.AcquiredAt.UnixMilli(), l.ExpiresAt.UnixMilli()
	}
	cps, err := h.s.Store.ListControlPlanes(ctx)
	if err != nil {
		return nil, err
	}
	for _, cp := range cps {
		role := "standby"
		switch {
		case l.Valid() && cp.Name == l.Holder && cp.Instance == l.Instance:
			role = "leader"
		case l.Now.Sub(cp.SeenAt) > 3*h.cfg.Lease:
			role = "gone"
		}
		out.ControlPlanes = append(out.ControlPlanes, &managev1.ControlPlane{Name: cp.Name, Role: role, AgentAddr: cp.AgentAddr,
			ManageAddr: cp.ManageAddr, ClientAddr: cp.ClientAddr, Version: cp.Version,
			LastSeenUnixMs: cp.SeenAt.UnixMilli(), StartedUnixMs: cp.StartedAt.UnixMilli()})
	}
	return out, nil
}

// drained records an operator's drain under the leader's token.
func (h *ha) drained(ctx context.Context, node string, draining bool) error {
	token, ok := h.leading()
	if !ok {
		return errors.New("this control plane no longer leads")
	}
	err := h.s.Store.SetNodeDrain(ctx, token, node, draining)
	if errors.Is(err, store.ErrFenced) {
		h.el.Abdicate("the store refused a drain: " + err.Error())
	}
	return err
}
