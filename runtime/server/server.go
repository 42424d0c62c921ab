// Package server assembles the control plane from its parts: store, catalog,
// fleet, scheduler-driven reconciler, agent sessions, management API,
// gateway and metrics, each on its own listener.
package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/api/specpb"
	"github.com/llmgw/llmgw/pki"
	"github.com/llmgw/llmgw/runtime/agentsvc"
	"github.com/llmgw/llmgw/runtime/auth"
	"github.com/llmgw/llmgw/runtime/config"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/gateway"
	"github.com/llmgw/llmgw/runtime/manage"
	"github.com/llmgw/llmgw/runtime/metrics"
	"github.com/llmgw/llmgw/runtime/models"
	"github.com/llmgw/llmgw/runtime/reconcile"
	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/runtime/router/probe"
	"github.com/llmgw/llmgw/runtime/sourcecheck"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/runtime/tenancy"
	"github.com/llmgw/llmgw/runtime/users"
	"github.com/llmgw/llmgw/spec"
)

// Server is a control plane: New assembles every part and binds the
// listeners, Run serves on them until its context ends.
type Server struct {
	cfg     config.Server
	version string
	log     *slog.Logger

	Store      store.Store
	Catalog    *models.Registry
	Fleet      *fleet.Fleet
	Router     *router.Router
	Reconciler *reconcile.Reconciler
	// Metrics is the registry served on metrics_listen; register other
	// collectors on it.
	Metrics  *metrics.Registry
	observer *metrics.Observer

	// admission checks limits and budgets; recorder writes a usage row
	// per request; both serve the gateway.
	admission *tenancy.Admission
	recorder  *tenancy.Recorder
	gateway   *gateway.Gateway

	// The servers Run starts on the listeners of the same names.
	agentSrv, manageSrv             *grpc.Server
	clientSrv, metricsSrv, pprofSrv *http.Server

	metaKick    chan struct{}
	metaPending string

	// ha is this control plane's part in the leader election; runCtx and
	// leaderCtx are Run's context and the one the reconciler runs under
	// while leading (stopLeading cancels it); wg counts Run's goroutines.
	ha           *ha
	runCtx       context.Context
	leaderCtx    context.Context
	cancelLeader context.CancelFunc
	wg           sync.WaitGroup

	listeners map[string]net.Listener
	addrs     map[string]string
	mu        sync.Mutex
}

// The gateway's parts, as the gateway names what it needs of them.
var (
	_ gateway.Auth        = (*auth.Keys)(nil)
	_ gateway.Auth        = auth.Anonymous{}
	_ gateway.Admission   = (*tenancy.Admission)(nil)
	_ gateway.ModelFilter = (*tenancy.Admission)(nil)
	_ gateway.Observer    = (*tenancy.Recorder)(nil)
	_ gateway.Observer    = (*metrics.Observer)(nil)
)

// Listener names, as Addr takes them.
const (
	ListenClient  = "client"
	ListenAgents  = "agents"
	ListenManage  = "manage"
	ListenMetrics = "metrics"
	ListenPprof   = "pprof"
)

// New assembles the control plane: it opens the store, loads the catalog,
// builds every part and binds every listener, so that a configuration or
// port problem is reported before anything runs. Run serves it.
func New(ctx context.Context, cfg config.Server, version string, logger *slog.Logger) (*Server, error) {
	if logger == nil {
		logger = slog.Default()
	}
	s := &Server{cfg: cfg, version: version, log: logger, listeners: map[string]net.Listener{}, addrs: map[string]string{}, metaKick: make(chan struct{}, 1)}
	st, err := store.Open(ctx, cfg.Auth.Store, store.WithLogger(logger.With("component", "store")))
	if err != nil {
		return nil, fmt.Errorf("auth.store: %w", err)
	}
	s.Store = st
	if err := s.build(ctx); err != nil {
		s.release()
		return nil, err
	}
	if err := s.bind(); err != nil {
		s.release()
		return nil, err
	}
	if s.ha, err = newHA(s); err != nil {
		s.release()
		return nil, err
	}
	return s, nil
}

// build constructs every part in the order they depend on each other.
func (s *Server) build(ctx context.Context) error {
	cfg := s.cfg
	var err error
	s.Catalog, err = models.New(cfg.Models, s.Store, s.log)
	if err != nil {
		return err
	}
	if err := s.Catalog.Load(ctx); err != nil {
		return err
	}
	s.Fleet = fleet.New()
	s.Router = router.New()
	if err := s.setupMetrics(); err != nil {
		return err
	}
	expected, err := s.liveReplicasHint(ctx)
	if err != nil {
		return err
	}

	s.Reconciler = reconcile.New(reconcile.Options{
		Fleet: s.Fleet, Catalog: s.Catalog, Endpoints: haEndpoints{s}, Routing: haRouting{s}, Grace: cfg.Agents.Grace, Logger: s.log,
		// The agents' own bound: a session silent for three heartbeats is
		// replaced by the node's next one; its node is suspect from then.
		SuspectAfter: 3 * cfg.Agents.HeartbeatInterval,
		Autoscale: reconcile.Autoscale{UpLoad: cfg.Autoscale.UpLoad, UpAfter: cfg.Autoscale.UpAfter,
			DownLoad: cfg.Autoscale.DownLoad, DownAfter: cfg.Autoscale.DownAfter, EvictAfter: cfg.Autoscale.EvictAfter},
		Expected: expected, HoldPlacementUntil: time.Now().Add(cfg.Agents.Settle), OnLiveReplicas: s.recordLiveReplicas,
		// s.ha is made once the listeners are bound, before the first
		// pass; it reads the load times when elected.
		LoadTimes:  func() map[string]time.Duration { return s.ha.knownLoadTimes() },
		OnLoadTime: func(model string, took time.Duration) { s.ha.setLoadTime(model, took) },
		// A replica scaled down drains for at most what one request may
		// take; with nothing in flight it is stopped no sooner than the
		// time, counted from the pass that drained it, a standby takes at
		// its normal pace to read the routes without it and report what
		// it still has in flight on it (twice that, for the store's
		// latency).
		DrainTimeout: cfg.Timeouts.Generation,
		DrainSettle:  2 * (publishEvery + followRoutes + 2*demandEvery),
	})
	if err := s.Metrics.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "reconcile_passes_total",
		Help: "Reconcile passes this control plane has completed since it started (none while it is a standby).",
	}, func() float64 { return float64(s.Reconciler.Passes()) })); err != nil {
		return fmt.Errorf("registering reconcile metrics: %w", err)
	}

	// Agents: mutual TLS, the certificate's CN is the node.
	agentTLS, err := pki.ServerTLS(cfg.AgentTLS.Cert, cfg.AgentTLS.Key, cfg.AgentTLS.CA, true)
	if err != nil {
		return fmt.Errorf("agent_tls: %w", err)
	}
	manageTLS, err := pki.ServerTLS(cfg.ManageTLS.Cert, cfg.ManageTLS.Key, "", false)
	if err != nil {
		return fmt.Errorf("manage_tls: %w", err)
	}
	s.agentSrv = grpc.NewServer(grpc.Creds(newRefusalLog(credentials.NewTLS(agentTLS), s.log.With("component", "agents"), "agent_listen")),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// A peer that vanished without closing its connection is noticed
		// within a minute, so its session ends and its node is marked lost.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 20 * time.Second}))
	agentv1.RegisterAgentServiceServer(s.agentSrv, agentsvc.New(agentsvc.Options{
		Fleet: s.Fleet, Declarations: storeDeclarations{s.Store}, RequireDeclared: cfg.Agents.RequireDeclared,
		HeartbeatInterval: cfg.Agents.HeartbeatInterval, Logger: s.log,
		Leadership: func() agentsvc.Leadership { return s.ha.leadership() },
	}))

	// Tenancy: limits and budgets at admission, a usage row per request.
	// Both price with the same Prices; the recorder is made first, as
	// admission counts its unwritten rows against budgets.
	// On PostgreSQL, which several control planes may share, limits and
	// budgets are counted in slices leased from the store; on SQLite (one
	// control plane) in memory.
	prices := tenancy.Prices{Models: s.Catalog, Default: cfg.Auth.DefaultPrice}
	var shared *tenancy.Shared
	if store.SharesLimits(s.Store) {
		sl := cfg.SharedLimits
		// The holder is this process: a restarted control plane does not
		// inherit the slices its predecessor leased (they expire).
		var id [8]byte
		_, _ = rand.Read(id[:])
		shared = &tenancy.Shared{Store: s.Store, Holder: hex.EncodeToString(id[:]),
			BudgetSlice: sl.BudgetSlice, RateSlice: sl.RateSlice, TTL: sl.SliceTTL, Idle: sl.IdleReturn}
	}
	ropts := tenancy.RecorderOptions{
		Store:      s.Store,
		Price:      prices.Cost,
		Logger:     s.log,
		Registerer: s.Metrics.Registerer(),
	}
	if shared != nil {
		ropts.Holder = shared.Holder
	}
	s.recorder = tenancy.NewRecorder(ropts)
	s.admission = tenancy.NewAdmission(tenancy.Options{
		Store: s.Store, Models: s.Catalog, Pending: s.recorder,
		DefaultRPM: cfg.Auth.DefaultRPM, DefaultTPM: cfg.Auth.DefaultTPM,
		DefaultMaxTokens: cfg.Auth.DefaultMaxTokens, DefaultPrice: cfg.Auth.DefaultPrice,
		CacheTTL: cfg.Auth.KeyCacheTTL, Logger: s.log, Shared: shared,
	})
	s.warnUnpricedBudgets(ctx, prices)
	if err := s.Metrics.Register(s.admission.Collector()); err != nil {
		return fmt.Errorf("registering budget metrics: %w", err)
	}

	// Management API: TLS and a bearer admin token.
	msvc := manage.New(manage.Options{Version: s.version, Fleet: s.Fleet, Catalog: s.Catalog, Reconciler: s.Reconciler, Tokens: s.Store, Store: s.Store, DefaultPrice: cfg.Auth.DefaultPrice, TenancyChanged: s.admission.Invalidate,
		Users: users.New(s.Store, 0), LoginTTL: cfg.Auth.LoginTTL, Logger: s.log,
		Sources:     &sourcecheck.Checker{Logger: s.log.With("component", "sourcecheck")},
		HA:          func(ctx context.Context) (*managev1.HAStatus, error) { return s.ha.status(ctx) },
		OnDrain:     func(ctx context.Context, node string, draining bool) error { return s.ha.drained(ctx, node, draining) },
		EngineLoads: s.engineLoads})
	// A standby relays every call to the leader, which authenticates it.
	s.manageSrv = grpc.NewServer(grpc.Creds(newRefusalLog(credentials.NewTLS(manageTLS), s.log.With("component", "manage"), "manage_listen")), grpc.ChainUnaryInterceptor(
		func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			return s.ha.relay(ctx, req, info, handler)
		}, msvc.AuthInterceptor()))
	managev1.RegisterManageServiceServer(s.manageSrv, msvc)

	// Client API.
	var clientAuth gateway.Auth = auth.NewKeys(s.Store, cfg.Auth.KeyCacheTTL, s.log)
	if !cfg.Auth.Enabled {
		s.log.Warn("client API authentication is off (auth.enabled: false): every request is accepted as the default project")
		clientAuth = auth.Anonymous{}
	}
	s.gateway = gateway.New(gateway.Config{
		MaxBodyBytes:          cfg.Limits.MaxBodyBytes,
		BodyTimeout:           cfg.Timeouts.ClientBody,
		ResponseHeaderTimeout: cfg.Timeouts.ResponseHeader,
		GenerationTimeout:     cfg.Timeouts.Generation,
		StreamIdleTimeout:     cfg.Timeouts.StreamIdle,
		ColdStartWait:         coldStartWait(cfg.Timeouts.ColdStartWait),
		MaxNotesPerAgent:      cfg.Limits.MaxNotesPerAgent,
		MaxNotesPerProject:    cfg.Limits.MaxNotesPerProject,
		Logger:                s.log.With("component", "gateway"),
	}, gateway.Deps{
		Catalog:   catalogView{s.Catalog},
		Auth:      clientAuth,
		Routes:    s.Router,
		Admission: s.admission,
		// A usage row per request; requests, latency, tokens and
		// admission outcomes as metrics.
		Observer: gateway.Observers{s.recorder, s.observer},
		// Stored responses of projects that keep conversations.
		Content: s.Store,
		// Serving once the reconciler drives the fleet (after a restart:
		// once the engines that were running have been reported again), or,
		// on a standby, while it follows the leader's routes.
		Ready: func() bool { return s.ha.ready() },
	})
	if err := s.Metrics.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "thread_turns_not_stored_total",
		Help: "Turns on threads (x-llmgw-thread) answered but not stored in their thread (the store failing or timing out, or the thread changing on every try); each answer said so.",
	}, func() float64 { return float64(s.gateway.ThreadTurnsNotStored()) })); err != nil {
		return fmt.Errorf("registering thread metrics: %w", err)
	}
	// The gateway bounds the body (timeouts.client_body, answering 408)
	// and lifts the bound once the body is in; there is no ReadTimeout,
	// which would also count the header time, and no WriteTimeout, which
	// would end the streams that run for minutes. bind counts the
	// connections that have not authenticated.
	s.clientSrv = &http.Server{Handler: s.gateway.Handler(),
		ReadHeaderTimeout: cfg.Timeouts.ClientHeader, IdleTimeout: cfg.Timeouts.ClientIdle}

	// Metrics: nothing else is served there.
	s.metricsSrv = &http.Server{Handler: s.Metrics.Handler(), ReadHeaderTimeout: 10 * time.Second}

	// pprof: loopback only (the config refuses anything else).
	pmux := http.NewServeMux()
	pmux.HandleFunc("/debug/pprof/", pprof.Index)
	pmux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	pmux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	pmux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	pmux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	s.pprofSrv = &http.Server{Handler: pmux, ReadHeaderTimeout: 10 * time.Second}
	return nil
}

// bind opens every configured listener.
func (s *Server) bind() error {
	binds := []struct{ name, addr string }{
		{ListenClient, s.cfg.Listen}, {ListenAgents, s.cfg.AgentListen}, {ListenManage, s.cfg.ManageListen},
		{ListenMetrics, s.cfg.MetricsListen}, {ListenPprof, s.cfg.PprofListen},
	}
	for _, b := range binds {
		if b.addr == "" {
			continue
		}
		l, err := net.Listen("tcp", b.addr)
		if err != nil {
			return fmt.Errorf("listening for %s on %s: %w", b.name, b.addr, err)
		}
		if b.name == ListenClient {
			cl := newClientListener(l, s.cfg.Limits.MaxUnauthenticatedConns, s.log.With("component", "gateway"))
			s.clientSrv.ConnContext = cl.connContext
			if err := s.Metrics.Register(cl.collectors()...); err != nil {
				_ = l.Close()
				return fmt.Errorf("registering client connection metrics: %w", err)
			}
			l = cl
		}
		s.mu.Lock()
		s.listeners[b.name] = l
		s.addrs[b.name] = l.Addr().String()
		s.mu.Unlock()
	}
	return nil
}

// release undoes what New did when it fails: nothing has run yet, so
// nothing is waited for.
func (s *Server) release() {
	s.closeListeners()
	if s.recorder != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.recorder.Close(ctx)
		cancel()
	}
	if s.admission != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s.admission.Close(ctx)
		cancel()
	}
	if s.gateway != nil {
		s.gateway.Close()
	}
	s.Store.Close()
}

// metaLiveReplicas is the store key of the replicas live at the last run.
const metaLiveReplicas = "live_replicas"

// liveReplicasHint returns the replicas that were live when the control
// plane last ran: after a restart, placement waits for their agents.
func (s *Server) liveReplicasHint(ctx context.Context) ([]string, error) {
	var v string
	fs, err := s.Store.GetFleetState(ctx, fleetLiveReplicas)
	if err == nil {
		v = fs.Value
	} else if errors.Is(err, store.ErrNotFound) {
		// Written by a release before the leader lease.
		v, err = s.Store.GetMeta(ctx, metaLiveReplicas)
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the replicas of the last run: %w", err)
	}
	var ids []string
	if err := json.Unmarshal([]byte(v), &ids); err != nil {
		s.log.Warn("ignoring an unreadable record of the last run's replicas", "err", err)
		return nil, nil
	}
	return ids, nil
}

// recordLiveReplicas keeps the set of live replicas for the next start. It
// runs when the set changes, which is rare, and never blocks the reconciler.
func (s *Server) recordLiveReplicas(ids []string) {
	b, _ := json.Marshal(ids)
	s.mu.Lock()
	s.metaPending = string(b)
	s.mu.Unlock()
	select {
	case s.metaKick <- struct{}{}:
	default:
	}
}

// writeMeta writes the latest recorded replica set; a burst of changes
// becomes one write.
func (s *Server) writeMeta(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.metaKick:
			s.mu.Lock()
			v := s.metaPending
			s.mu.Unlock()
			token, leading := s.ha.leading()
			if !leading {
				continue
			}
			wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := s.Store.PutFleetState(wctx, token, fleetLiveReplicas, v)
			cancel()
			switch {
			case errors.Is(err, store.ErrFenced):
				s.ha.el.Abdicate("the store refused the live replicas: " + err.Error())
			case err != nil:
				s.log.Warn("recording live replicas", "err", err)
			}
		}
	}
}

// Addr returns the bound address of a listener (useful with port 0).
func (s *Server) Addr(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addrs[name]
}

func (s *Server) closeListeners() {
	for _, l := range s.listeners {
		_ = l.Close()
	}
}

// storeDeclarations serves node declarations from the store.
type storeDeclarations struct{ st store.NodeStore }

func (d storeDeclarations) Declaration(ctx context.Context, node string) (*agentv1.Declaration, bool, error) {
	sn, err := d.st.GetNode(ctx, node)
	if errors.Is(err, store.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading declaration of %s: %w", node, err)
	}
	var decl spec.Declaration
	if err := json.Unmarshal(sn.Declaration, &decl); err != nil {
		return nil, false, fmt.Errorf("decoding declaration of %s: %w", node, err)
	}
	return specpb.DeclarationToProto(decl), true, nil
}

func (d storeDeclarations) RevokedAt(ctx context.Context, node string) (time.Time, bool, error) {
	at, err := d.st.NodeRevokedAt(ctx, node)
	if errors.Is(err, store.ErrNotFound) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, err
	}
	return at, true, nil
}

// warnUnpricedBudgets warns at start when budgets exist that can never
// bind because nothing has a price.
func (s *Server) warnUnpricedBudgets(ctx context.Context, prices tenancy.Prices) {
	budgets, err := s.Store.ListBudgets(ctx, "")
	if err != nil {
		s.log.Warn("reading budgets", "err", err)
		return
	}
	if len(budgets) == 0 {
		return
	}
	var names []string
	for _, e := range s.Catalog.List() {
		names = append(names, e.Model.Name)
	}
	if !prices.Priced(names) {
		s.log.Warn("budgets never bind: no model has a price and auth.default_price is unset", "budgets", len(budgets))
	}
}

// catalogView adapts the registry to what the gateway needs.
type catalogView struct{ r *models.Registry }

func (c catalogView) Lookup(name string) (request.Model, bool) { return c.r.Lookup(name) }

func (c catalogView) List() []gateway.ModelInfo {
	entries := c.r.List()
	out := make([]gateway.ModelInfo, 0, len(entries))
	for _, e := range entries {
		out = append(out, gateway.ModelInfo{ID: e.Model.Name, Aliases: e.Model.Aliases, OwnedBy: "llmgw"})
	}
	return out
}

// Run serves on every listener and runs the reconciler until ctx ends,
// then shuts everything down: the client API first (requests in flight
// finish), then the usage rows are written, then the rest, and the store
// is closed last.
func (s *Server) Run(ctx context.Context) error {
	defer s.Store.Close()
	defer s.gateway.Close()
	defer s.ha.close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.runCtx = ctx
	s.leaderCtx, s.cancelLeader = context.WithCancel(ctx)
	errc := make(chan error, 8)
	wg := &s.wg
	serves := []struct {
		name  string
		serve func(net.Listener) error
	}{
		{ListenAgents, s.agentSrv.Serve},
		{ListenManage, s.manageSrv.Serve},
		{ListenClient, s.clientSrv.Serve},
		{ListenMetrics, s.metricsSrv.Serve},
		{ListenPprof, s.pprofSrv.Serve},
	}
	for _, sv := range serves {
		l := s.listeners[sv.name]
		if l == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sv.serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) && !errors.Is(err, net.ErrClosed) {
				errc <- fmt.Errorf("%s listener: %w", sv.name, err)
			}
		}()
	}
	// The election runs until the agents' sessions have stopped, so that
	// its lease is released only once this control plane no longer acts.
	electCtx, stopElection := context.WithCancel(context.Background())
	defer stopElection()
	go s.ha.el.Run(electCtx)
	// What a standby is asked reaches the leader through the store
	// (demand.go); a standby reports until its client API has stopped.
	// SQLite serves one control plane: there is nobody to share with.
	reportCtx, stopReport := context.WithCancel(context.Background())
	defer stopReport()
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.ha.demand.forward(ctx)
	}()
	if store.SharesLimits(s.Store) {
		wg.Add(2)
		go func() {
			defer wg.Done()
			s.ha.demand.follow(ctx)
		}()
		go func() {
			defer wg.Done()
			s.ha.demand.report(reportCtx)
		}()
	}
	wg.Add(5)
	go func() {
		defer wg.Done()
		s.ha.follow(ctx)
	}()
	go func() {
		defer wg.Done()
		s.ha.publish(ctx)
	}()
	go func() {
		defer wg.Done()
		pruneContent(ctx, s.Store, PruneEvery, time.Now, s.log)
	}()
	go func() {
		defer wg.Done()
		// Replicas the gateway took out after a failed connection return
		// when their engines answer; engines' load feeds the routing.
		probe.New(probe.Options{Router: s.Router, Logger: s.log}).Run(ctx)
	}()
	go func() {
		defer wg.Done()
		s.writeMeta(ctx)
	}()
	s.log.Info("control plane serving", "client", s.addrs[ListenClient], "agents", s.addrs[ListenAgents],
		"manage", s.addrs[ListenManage], "metrics", s.addrs[ListenMetrics], "models", len(s.Catalog.List()))

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	case reason := <-s.ha.lost:
		runErr = fmt.Errorf("%w: %s", ErrLeadershipLost, reason)
	}
	cancel()
	shutdownCtx, done := context.WithTimeout(context.Background(), 10*time.Second)
	defer done()
	// Stop taking requests, let those in flight finish (streams get the
	// shutdown timeout, then their connections are closed), and write
	// every usage row before the store closes.
	if err := s.clientSrv.Shutdown(shutdownCtx); err != nil {
		s.log.Warn("requests still running at shutdown; closing their connections", "err", err)
		_ = s.clientSrv.Close()
	}
	waitCtx, waitDone := context.WithTimeout(context.Background(), 5*time.Second)
	if err := s.gateway.Wait(waitCtx); err != nil {
		s.log.Warn("requests did not end after their connections closed", "err", err)
	}
	waitDone()
	stopReport()
	flushCtx, flushDone := context.WithTimeout(context.Background(), 10*time.Second)
	if err := s.recorder.Close(flushCtx); err != nil {
		s.log.Error("writing usage at shutdown", "err", err)
	}
	// Give back the slices of shared limits, now that what they were
	// spent on is recorded.
	s.admission.Close(flushCtx)
	flushDone()
	_ = s.metricsSrv.Shutdown(shutdownCtx)
	_ = s.pprofSrv.Shutdown(shutdownCtx)
	s.stopLeading()
	stopElection()
	<-s.ha.el.Done()
	stopGracefully(s.manageSrv, 5*time.Second)
	wg.Wait()
	s.log.Info("control plane stopped")
	return runErr
}

func stopGracefully(srv *grpc.Server, timeout time.Duration) {
	done := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		srv.Stop()
	}
}

// coldStartWait is timeouts.cold_start_wait as the gateway takes it: 0
// there means its default, so "answer at once" is negative.
func coldStartWait(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// ErrLeadershipLost is Run's error when this control plane stopped
// leading while it ran: another took the fleet over, or the store could
// not be reached to renew the lease. The process should exit and be
// started again by its supervisor; it then comes back as a standby.
var ErrLeadershipLost = errors.New("leadership lost")

// stopLeading stops acting for the fleet at once: the reconciler stops and
// every agent session ends.
func (s *Server) stopLeading() {
	if s.cancelLeader != nil {
		s.cancelLeader()
	}
	s.agentSrv.Stop()
}

// haEndpoints hands the reconciler's routes to the election's part, which
// passes them on only while they are the fleet's.
type haEndpoints struct{ s *Server }

func (e haEndpoints) SetEndpoints(model string, eps []router.Endpoint) {
	e.s.ha.SetEndpoints(model, eps)
}

// engineLoads is what each replica's engine last said of its load, as the
// router's prober read it, by replica id (the management API's
// ListReplicas).
func (s *Server) engineLoads() map[string]*managev1.EngineLoad {
	out := map[string]*managev1.EngineLoad{}
	for _, eps := range s.Router.Snapshot() {
		for _, ep := range eps {
			if l := ep.Engine; l.Known {
				out[ep.ReplicaID] = &managev1.EngineLoad{Running: l.Running, Waiting: l.Waiting, KvCacheUsage: l.KVUsage, ScrapedUnixMs: l.At.UnixMilli()}
			}
		}
	}
	return out
}
