// Package server assembles the control plane from its parts: store, catalog,
// fleet, scheduler-driven reconciler, agent sessions, management API,
// gateway and metrics, each on its own listener.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

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
	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/runtime/tenancy"
	"github.com/llmgw/llmgw/runtime/users"
	"github.com/llmgw/llmgw/spec"
)

// Server is a running control plane.
type Server struct {
	cfg     config.Server
	version string
	log     *slog.Logger

	Store      store.Store
	Catalog    *models.Registry
	Fleet      *fleet.Fleet
	Router     *router.Router
	Reconciler *reconcile.Reconciler
	gateway    *gateway.Gateway
	// Metrics is the registry served on metrics_listen; register other
	// collectors on it.
	Metrics  *metrics.Registry
	observer *metrics.Observer

	metaKick    chan struct{}
	metaPending string

	listeners map[string]net.Listener
	addrs     map[string]string
	mu        sync.Mutex
}

// Listener names, as Addr takes them.
const (
	ListenClient  = "client"
	ListenAgents  = "agents"
	ListenManage  = "manage"
	ListenMetrics = "metrics"
	ListenPprof   = "pprof"
)

// New opens the store, loads the catalog and binds every listener, so that
// a configuration or port problem is reported before anything runs.
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
	s.Catalog, err = models.New(cfg.Models, st, logger)
	if err != nil {
		st.Close()
		return nil, err
	}
	if err := s.Catalog.Load(ctx); err != nil {
		st.Close()
		return nil, err
	}
	s.Fleet = fleet.New()
	s.Router = router.New()
	if err := s.setupMetrics(); err != nil {
		st.Close()
		return nil, err
	}
	expected, err := s.liveReplicasHint(ctx)
	if err != nil {
		st.Close()
		return nil, err
	}
	s.Reconciler = reconcile.New(reconcile.Options{
		Fleet: s.Fleet, Catalog: s.Catalog, Endpoints: s.Router, Grace: cfg.Agents.Grace, Logger: logger,
		Expected: expected, HoldPlacementUntil: time.Now().Add(cfg.Agents.Settle), OnLiveReplicas: s.recordLiveReplicas,
	})
	binds := []struct{ name, addr string }{
		{ListenClient, cfg.Listen}, {ListenAgents, cfg.AgentListen}, {ListenManage, cfg.ManageListen},
		{ListenMetrics, cfg.MetricsListen}, {ListenPprof, cfg.PprofListen},
	}
	for _, b := range binds {
		if b.addr == "" {
			continue
		}
		l, err := net.Listen("tcp", b.addr)
		if err != nil {
			s.closeListeners()
			st.Close()
			return nil, fmt.Errorf("listening for %s on %s: %w", b.name, b.addr, err)
		}
		s.listeners[b.name] = l
		s.addrs[b.name] = l.Addr().String()
	}
	return s, nil
}

// metaLiveReplicas is the store key of the replicas live at the last run.
const metaLiveReplicas = "live_replicas"

// liveReplicasHint returns the replicas that were live when the control
// plane last ran: after a restart, placement waits for their agents.
func (s *Server) liveReplicasHint(ctx context.Context) ([]string, error) {
	v, err := s.Store.GetMeta(ctx, metaLiveReplicas)
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
			wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := s.Store.PutMeta(wctx, metaLiveReplicas, v); err != nil {
				s.log.Warn("recording live replicas", "err", err)
			}
			cancel()
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
func (s *Server) warnUnpricedBudgets(ctx context.Context, adm *tenancy.Admission) {
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
	if !adm.Priced(names) {
		s.log.Warn("budgets never bind: no model has a price and auth.default_price is unset", "budgets", len(budgets))
	}
}

// catalogView adapts the registry to what the gateway needs.
type catalogView struct{ r *models.Registry }

func (c catalogView) Resolve(name string) (string, bool) { return c.r.Resolve(name) }

func (c catalogView) List() []gateway.ModelInfo {
	entries := c.r.List()
	out := make([]gateway.ModelInfo, 0, len(entries))
	for _, e := range entries {
		out = append(out, gateway.ModelInfo{ID: e.Model.Name, Aliases: e.Model.Aliases, OwnedBy: "llmgw"})
	}
	return out
}

// Run serves until ctx ends, then shuts every listener down.
func (s *Server) Run(ctx context.Context) error {
	defer s.Store.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 8)
	var wg sync.WaitGroup
	goServe := func(name string, serve func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) && !errors.Is(err, net.ErrClosed) {
				errc <- fmt.Errorf("%s listener: %w", name, err)
			}
		}()
	}

	// Agents: mutual TLS, the certificate's CN is the node.
	agentTLS, err := pki.ServerTLS(s.cfg.AgentTLS.Cert, s.cfg.AgentTLS.Key, s.cfg.AgentTLS.CA, true)
	if err != nil {
		return fmt.Errorf("agent_tls: %w", err)
	}
	agentSrv := grpc.NewServer(grpc.Creds(credentials.NewTLS(agentTLS)),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// A peer that vanished without closing its connection is noticed
		// within a minute, so its session ends and its node is marked lost.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 20 * time.Second}))
	agentv1.RegisterAgentServiceServer(agentSrv, agentsvc.New(agentsvc.Options{
		Fleet: s.Fleet, Declarations: storeDeclarations{s.Store}, RequireDeclared: s.cfg.Agents.RequireDeclared,
		HeartbeatInterval: s.cfg.Agents.HeartbeatInterval, Logger: s.log,
	}))
	if l := s.listeners[ListenAgents]; l != nil {
		goServe(ListenAgents, func() error { return agentSrv.Serve(l) })
	}

	// Tenancy: limits and budgets at admission, a usage row per request.
	var adm *tenancy.Admission
	recorder := tenancy.NewRecorder(tenancy.RecorderOptions{
		Store:      s.Store,
		Price:      func(model string, p, c int64) float64 { return adm.Cost(model, p, c) },
		Logger:     s.log,
		Registerer: s.Metrics.Registerer(),
	})
	adm = tenancy.NewAdmission(tenancy.Options{
		Store: s.Store, Models: s.Catalog, Pending: recorder,
		DefaultRPM: s.cfg.Auth.DefaultRPM, DefaultTPM: s.cfg.Auth.DefaultTPM,
		DefaultMaxTokens: s.cfg.Auth.DefaultMaxTokens, DefaultPrice: s.cfg.Auth.DefaultPrice,
		CacheTTL: s.cfg.Auth.KeyCacheTTL, Logger: s.log,
	})
	s.warnUnpricedBudgets(ctx, adm)
	if err := s.Metrics.Register(adm.Collector()); err != nil {
		return fmt.Errorf("registering budget metrics: %w", err)
	}

	// Management API: TLS and a bearer admin token.
	manageTLS, err := pki.ServerTLS(s.cfg.ManageTLS.Cert, s.cfg.ManageTLS.Key, "", false)
	if err != nil {
		return fmt.Errorf("manage_tls: %w", err)
	}
	msvc := manage.New(manage.Options{Version: s.version, Fleet: s.Fleet, Catalog: s.Catalog, Reconciler: s.Reconciler, Tokens: s.Store, Store: s.Store, DefaultPrice: s.cfg.Auth.DefaultPrice, TenancyChanged: adm.Invalidate,
		Users: users.New(s.Store, 0), LoginTTL: s.cfg.Auth.LoginTTL, Logger: s.log})
	manageSrv := grpc.NewServer(grpc.Creds(credentials.NewTLS(manageTLS)), grpc.UnaryInterceptor(msvc.AuthInterceptor()))
	managev1.RegisterManageServiceServer(manageSrv, msvc)
	if l := s.listeners[ListenManage]; l != nil {
		goServe(ListenManage, func() error { return manageSrv.Serve(l) })
	}

	// Client API.
	var clientAuth gateway.Auth = auth.NewKeys(s.Store, s.cfg.Auth.KeyCacheTTL, s.log)
	if !s.cfg.Auth.Enabled {
		s.log.Warn("client API authentication is off (auth.enabled: false): every request is accepted as the default project")
		clientAuth = auth.Anonymous{}
	}
	s.gateway = gateway.New(gateway.Config{
		MaxBodyBytes:          s.cfg.Limits.MaxBodyBytes,
		ResponseHeaderTimeout: s.cfg.Timeouts.ResponseHeader,
		GenerationTimeout:     s.cfg.Timeouts.Generation,
		Logger:                s.log.With("component", "gateway"),
	}, gateway.Deps{
		Catalog:   catalogView{s.Catalog},
		Auth:      clientAuth,
		Routes:    s.Router,
		Admission: adm,
		// A usage row per request; requests, latency, tokens and
		// admission outcomes as metrics.
		Observer: gateway.Observers{recorder, s.observer},
		// Serving once the reconciler drives the fleet (after a restart:
		// once the engines that were running have been reported again).
		Ready: s.Reconciler.Ready,
	})
	defer s.gateway.Close()
	clientSrv := &http.Server{Handler: s.gateway.Handler(), ReadHeaderTimeout: 30 * time.Second}
	if l := s.listeners[ListenClient]; l != nil {
		goServe(ListenClient, func() error { return clientSrv.Serve(l) })
	}

	// Metrics: nothing else is served there.
	metricsSrv := &http.Server{Handler: s.Metrics.Handler(), ReadHeaderTimeout: 10 * time.Second}
	if l := s.listeners[ListenMetrics]; l != nil {
		goServe(ListenMetrics, func() error { return metricsSrv.Serve(l) })
	}

	// pprof: loopback only (the config refuses anything else).
	pmux := http.NewServeMux()
	pmux.HandleFunc("/debug/pprof/", pprof.Index)
	pmux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	pmux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	pmux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	pmux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	pprofSrv := &http.Server{Handler: pmux, ReadHeaderTimeout: 10 * time.Second}
	if l := s.listeners[ListenPprof]; l != nil {
		goServe(ListenPprof, func() error { return pprofSrv.Serve(l) })
	}

	wg.Add(2)
	go func() {
		defer wg.Done()
		s.Reconciler.Run(ctx)
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
	}
	cancel()
	shutdownCtx, done := context.WithTimeout(context.Background(), 10*time.Second)
	defer done()
	// Stop taking requests, let those in flight finish (streams get the
	// shutdown timeout, then their connections are closed), and write
	// every usage row before the store closes.
	if err := clientSrv.Shutdown(shutdownCtx); err != nil {
		s.log.Warn("requests still running at shutdown; closing their connections", "err", err)
		_ = clientSrv.Close()
	}
	waitCtx, waitDone := context.WithTimeout(context.Background(), 5*time.Second)
	if err := s.gateway.Wait(waitCtx); err != nil {
		s.log.Warn("requests did not end after their connections closed", "err", err)
	}
	waitDone()
	flushCtx, flushDone := context.WithTimeout(context.Background(), 10*time.Second)
	if err := recorder.Close(flushCtx); err != nil {
		s.log.Error("writing usage at shutdown", "err", err)
	}
	flushDone()
	_ = metricsSrv.Shutdown(shutdownCtx)
	_ = pprofSrv.Shutdown(shutdownCtx)
	agentSrv.Stop()
	stopGracefully(manageSrv, 5*time.Second)
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
