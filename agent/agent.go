// Package agent is the node agent: it discovers the node's hardware, dials
// the control plane over mutual TLS, reports what it found, and starts and
// stops engine shards on the control plane's word. The control plane never
// dials the agent.
package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	agentconfig "github.com/llmgw/llmgw/agent/config"
	"github.com/llmgw/llmgw/agent/discovery"
	"github.com/llmgw/llmgw/agent/enginecheck"
	"github.com/llmgw/llmgw/agent/fetch"
	"github.com/llmgw/llmgw/agent/supervisor"
	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/api/specpb"
	"github.com/llmgw/llmgw/internal/buildinfo"
	"github.com/llmgw/llmgw/internal/download"
	"github.com/llmgw/llmgw/pki"
	"github.com/llmgw/llmgw/spec"
)

// Options configure an Agent.
type Options struct {
	Config  agentconfig.Agent
	Version string
	// SelfBinary is the llmgw executable, which runs the sim engine.
	SelfBinary string
	// Discovery overrides the /proc paths (tests).
	Discovery discovery.Options
	// EngineCheckTimeout bounds each engine check; 0 means
	// enginecheck.DefaultTimeout.
	EngineCheckTimeout time.Duration
	Logger             *slog.Logger
}

// Agent is one node's agent.
type Agent struct {
	opts Options
	cfg  agentconfig.Agent
	log  *slog.Logger
	sup  *supervisor.Supervisor
	// weights is the node's cache of fetched weights.
	weights *fetch.Cache

	mu     sync.Mutex
	decl   spec.Declaration
	send   func(*agentv1.AgentMessage) error
	shards map[string]*shardState
	// checks are the engine checks last run, for the engines in checkedFor
	// (name to executable); recheck asks checkLoop to run them again.
	checks     []*agentv1.EngineCheck
	checkedFor map[string]string
	recheck    chan struct{}
	// gpus are the GPUs the last discovery listed; heartbeats refresh
	// their readings.
	gpus []*agentv1.GPU
	// cacheSent is the weights cache generation last reported.
	cacheSent uint64
	// runCtx is Run's context: fetches ahead of a shard outlive a session.
	runCtx context.Context
	// peerTLS serves the cache to peers; peerAddr is where they reach it
	// ("" when the agent serves none).
	peerTLS  *tls.Config
	peerAddr string
	// fencing is the highest leader fencing token seen: a session from a
	// control plane with a lower one (deposed) is refused.
	fencing int64
	// conns are the connections to the control planes, closed by Run.
	conns []*grpc.ClientConn

	// beforeStampWrite, when set (by a test, before the agent runs), runs
	// in recordStamp between its read of the stamp and its write: where a
	// Restamp may land. A field, not a package variable, so tests running
	// in parallel cannot race on it.
	beforeStampWrite func(id, generation string)
}

// New returns an agent; Run starts it.
func New(opts Options) (*Agent, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.SelfBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding the llmgw executable for the sim engine: %w", err)
		}
		opts.SelfBinary = exe
	}
	log := opts.Logger.With("component", "agent", "node", opts.Config.NodeID)
	if err := os.MkdirAll(opts.Config.StateDir, 0o750); err != nil {
		return nil, fmt.Errorf("creating state_dir %s: %w", opts.Config.StateDir, err)
	}
	var token string
	if f := opts.Config.Fetch.HFTokenFile; f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading fetch.hf_token_file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	s3 := download.S3ConfigFromEnv(os.Getenv)
	if e := opts.Config.Fetch.S3Endpoint; e != "" {
		s3.Endpoint = e
	}
	if r := opts.Config.Fetch.S3Region; r != "" {
		s3.Region = r
	}
	var peerServer, peerClient func(string) *tls.Config
	if c := opts.Config.TLS; c.CA != "" && c.Cert != "" && c.Key != "" {
		var perr error
		peerServer, peerClient, perr = fetch.PeerTLS(c.CA, c.Cert, c.Key)
		if perr != nil {
			log.Warn("weights peers off: the node identity does not load", "err", perr)
		}
	}
	weights, err := fetch.New(fetch.Options{
		PeerClient:  peerClient,
		S3:          s3,
		Dir:         opts.Config.WeightsPath(),
		HFEndpoint:  opts.Config.Fetch.HFEndpoint,
		HFToken:     token,
		StallAfter:  opts.Config.Fetch.StallAfter,
		GiveUpAfter: opts.Config.Fetch.GiveUpAfter,
		Logger:      opts.Logger.With("component", "fetch"),
	})
	if err != nil {
		return nil, err
	}
	a := &Agent{
		weights: weights,
		opts:    opts,
		cfg:     opts.Config,
		log:     log,
		sup:     supervisor.New(opts.Logger.With("component", "supervisor"), opts.Config.StateDir),
		decl:    opts.Config.Declaration,
		shards:  map[string]*shardState{},
		recheck: make(chan struct{}, 1),
	}
	if peerServer != nil {
		a.peerTLS = peerServer("")
	}
	return a, nil
}

// Run connects to the control plane and serves its commands until ctx ends.
// Running engines are left running when Run returns because of ctx: they
// belong to the node, not to this process (use StopAll to stop them).
func (a *Agent) Run(ctx context.Context) error {
	tlsCfg, err := pki.ClientTLS(a.cfg.TLS.CA, a.cfg.TLS.Cert, a.cfg.TLS.Key, a.cfg.ServerName)
	if err != nil {
		return fmt.Errorf("loading the agent's TLS identity: %w", err)
	}
	servers := a.cfg.ServerList()
	clients := map[string]agentv1.AgentServiceClient{}
	defer func() {
		for _, c := range a.conns {
			_ = c.Close()
		}
	}()
	dial := func(addr string) (agentv1.AgentServiceClient, error) {
		if c, ok := clients[addr]; ok {
			return c, nil
		}
		conn, err := grpc.NewClient(addr,
			grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)),
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 20 * time.Second, Timeout: 10 * time.Second}),
			grpc.WithUserAgent(buildinfo.UserAgent("llmgw-agent")),
		)
		if err != nil {
			return nil, fmt.Errorf("dialling control plane %s: %w", addr, err)
		}
		a.conns = append(a.conns, conn)
		clients[addr] = agentv1.NewAgentServiceClient(conn)
		return clients[addr], nil
	}
	a.log.Info("agent starting", "server", a.cfg.Server, "servers", len(servers), "address", a.cfg.Address)
	a.runCtx = ctx
	if err := a.servePeers(ctx); err != nil {
		return err
	}
	a.adopt()
	// The first hello carries the checks of the declaration in use; later
	// ones run beside the session.
	a.runChecks(ctx)
	go a.checkLoop(ctx)
	attempt := 0
	next, redirect := 0, ""
	var electing time.Time
	for {
		addr := redirect
		if addr == "" {
			addr = servers[next%len(servers)]
		}
		redirect = ""
		client, err := dial(addr)
		if err != nil {
			return err
		}
		started := time.Now()
		err = a.session(ctx, client, addr)
		if ctx.Err() != nil {
			return nil
		}
		var sb *standbyError
		if errors.As(err, &sb) {
			// A standby answered: the cluster is there and names its
			// leader, or is electing one. Not a failure to back off from.
			electing = time.Now()
			wait := 200*time.Millisecond + rand.N(300*time.Millisecond)
			if sb.leader != "" && sb.leader != addr {
				redirect = sb.leader
				a.log.Info("control plane is a standby; dialling the leader", "server", addr, "leader", sb.leader)
			} else {
				next++
				wait += 500 * time.Millisecond
				a.log.Info("control plane is a standby and knows no leader yet", "server", addr, "retry_in", wait.String())
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
			continue
		}
		// The next attempt goes to the next control plane listed.
		next++
		if time.Since(started) > 30*time.Second {
			attempt = 0
		}
		attempt++
		wait := backoff(attempt)
		if time.Since(electing) < 30*time.Second {
			// A leader just went away and a standby is taking over: keep
			// the wait short so the new leader hears from this node soon.
			wait = min(wait, time.Second)
		}
		st, _ := status.FromError(err)
		switch st.Code() {
		case codes.PermissionDenied, codes.Unauthenticated:
			a.log.Error("refused by control plane", "server", addr, "reason", st.Message(), "retry_in", wait.String())
		case codes.AlreadyExists:
			// Another agent holds this node's session: a second agent with
			// this node's certificate, or this agent's previous session
			// that the control plane has not yet seen go silent.
			a.log.Error("refused by control plane", "server", addr, "code", st.Code().String(), "reason", st.Message(), "retry_in", wait.String())
		default:
			a.log.Warn("control plane session ended", "server", addr, "err", err, "retry_in", wait.String())
		}
		if len(servers) > 1 {
			// Another control plane is listed: it answers at once.
			wait = min(wait, time.Second)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// standbyError is a standby's refusal: leader is the agent address of the
// control plane that leads, "" while none is known.
type standbyError struct {
	leader string
	msg    string
}

func (e *standbyError) Error() string { return e.msg }

// asStandby turns a FailedPrecondition refusal into a standbyError, reading
// the leader's address from the stream's trailer.
func asStandby(err error, stream grpc.ClientStream) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return err
	}
	var leader string
	if v := stream.Trailer().Get(agentv1.MetadataLeaderAddr); len(v) > 0 {
		leader = v[0]
	}
	return &standbyError{leader: leader, msg: st.Message()}
}

// backoff returns the wait before reconnect attempt n: exponential from
// 500ms to 30s, with full jitter on half of it so a restarted control plane
// is not hit by every agent at once.
func backoff(n int) time.Duration {
	d := 500 * time.Millisecond << min(n-1, 6)
	d = min(d, 30*time.Second)
	return d/2 + rand.N(d/2+1)
}

func (a *Agent) session(ctx context.Context, client agentv1.AgentServiceClient, addr string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.Connect(ctx)
	if err != nil {
		return fmt.Errorf("opening session: %w", err)
	}
	var sendMu sync.Mutex
	send := func(m *agentv1.AgentMessage) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(m)
	}
	a.mu.Lock()
	decl := a.decl
	a.mu.Unlock()
	inv := a.discover(ctx, decl)
	// The snapshot of shard statuses, the hello and the session's send
	// function are set under one lock: a status that changes from here on is
	// reported after the hello on this session, never dropped.
	a.mu.Lock()
	hello := &agentv1.Hello{
		NodeId:       a.cfg.NodeID,
		Version:      a.opts.Version,
		Address:      a.cfg.Address,
		Inventory:    inv,
		Declaration:  specpb.DeclarationToProto(decl),
		Shards:       a.shardStatusesLocked(),
		EngineChecks: a.checks,
		PeerAddress:  a.peerAddr,
	}
	err = send(&agentv1.AgentMessage{Msg: &agentv1.AgentMessage_Hello{Hello: hello}})
	if err == nil {
		a.send = send
	}
	a.mu.Unlock()
	if errors.Is(err, io.EOF) {
		// The control plane ended the stream (a standby refuses before the
		// hello): its status comes from Recv.
		_, err = stream.Recv()
		return asStandby(err, stream)
	}
	if err != nil {
		return fmt.Errorf("sending hello: %w", err)
	}
	defer func() {
		a.mu.Lock()
		a.send = nil
		a.mu.Unlock()
	}()
	first, err := stream.Recv()
	if err != nil {
		return asStandby(err, stream)
	}
	welcome := first.GetWelcome()
	if welcome == nil {
		return errors.New("control plane did not answer the hello with a welcome")
	}
	if err := a.checkFencing(stream, addr); err != nil {
		return err
	}
	interval := time.Duration(welcome.GetHeartbeatIntervalMs()) * time.Millisecond
	if interval <= 0 {
		interval = 5 * time.Second
	}
	a.log.Info("connected to control plane", "heartbeat", interval.String())
	if pd := welcome.GetDeclaration(); pd != nil {
		if err := a.redeclare(ctx, pd, send); err != nil {
			return err
		}
	}
	go a.heartbeats(ctx, send, interval)
	for {
		msg, err := stream.Recv()
		if err != nil {
			return err
		}
		switch m := msg.GetMsg().(type) {
		case *agentv1.ControlMessage_StartShard:
			a.startShard(m.StartShard)
		case *agentv1.ControlMessage_StopShard:
			a.stopShard(m.StopShard.GetShardId(), m.StopShard.GetReason())
		case *agentv1.ControlMessage_Declaration:
			if err := a.redeclare(ctx, m.Declaration, send); err != nil {
				return err
			}
		case *agentv1.ControlMessage_CheckEngines:
			a.log.Info("engine check asked for by the control plane")
			a.requestChecks()
		case *agentv1.ControlMessage_FetchWeights:
			a.prefetch(a.runCtx, m.FetchWeights)
		case *agentv1.ControlMessage_Restamp:
			a.restamp(m.Restamp.GetShardId(), m.Restamp.GetReplicaGeneration())
		case *agentv1.ControlMessage_CollectWeights:
			go func() {
				ans := a.collect(m.CollectWeights)
				if err := send(&agentv1.AgentMessage{Msg: &agentv1.AgentMessage_WeightsCollected{WeightsCollected: ans}}); err != nil {
					a.log.Debug("weights collection not reported", "err", err)
				}
			}()
		}
	}
}

// redeclare adopts a declaration the control plane sent, runs discovery
// again under it, and reports the new inventory.
func (a *Agent) redeclare(ctx context.Context, pd *agentv1.Declaration, send func(*agentv1.AgentMessage) error) error {
	d := specpb.DeclarationFromProto(pd)
	if err := d.Validate(); err != nil {
		a.log.Error("control plane's declaration refused, keeping the one in use", "err", err)
		return nil
	}
	a.mu.Lock()
	a.decl = d
	engineChange := !maps.Equal(a.checkTargets(d), a.checkedFor)
	a.mu.Unlock()
	a.log.Info("declaration replaced by the control plane's", "fabrics", len(d.Fabrics), "engines", len(d.Engines))
	if engineChange {
		a.requestChecks()
	}
	inv := a.discover(ctx, d)
	return send(&agentv1.AgentMessage{Msg: &agentv1.AgentMessage_Heartbeat{Heartbeat: &agentv1.Heartbeat{UnixMs: time.Now().UnixMilli(), Inventory: inv}}})
}

// heartbeats sends a heartbeat every interval until ctx ends. Each carries
// the GPU readings refreshed since the one before, if any: nvidia-smi runs
// beside the heartbeats, so a slow driver never delays one.
func (a *Agent) heartbeats(ctx context.Context, send func(*agentv1.AgentMessage) error, interval time.Duration) {
	readings := make(chan []*agentv1.GPU, 1)
	go a.refreshGPUs(ctx, interval, readings)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			hb := &agentv1.Heartbeat{UnixMs: time.Now().UnixMilli(), WeightsCache: a.cacheChanged()}
			select {
			case hb.Gpus = <-readings:
			default:
			}
			if err := send(&agentv1.AgentMessage{Msg: &agentv1.AgentMessage_Heartbeat{Heartbeat: hb}}); err != nil {
				return
			}
		}
	}
}

// refreshGPUs reads the GPUs every interval until ctx ends and leaves the
// latest readings in out (capacity 1) for the next heartbeat, replacing
// readings no heartbeat took yet.
func (a *Agent) refreshGPUs(ctx context.Context, interval time.Duration, out chan []*agentv1.GPU) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			gpus := a.gpuReadings(ctx, interval)
			if gpus == nil {
				continue
			}
			select {
			case <-out:
			default:
			}
			out <- gpus // never blocks: this is the only sender, and out was just emptied
		}
	}
}

// gpuReadings runs nvidia-smi again and returns the GPUs the last discovery
// listed with fresh readings (utilization, temperature, ECC, memory used).
// It returns nil, so the control plane keeps the readings it has, when that
// discovery listed no GPUs, when nvidia-smi fails or outlasts timeout, or
// when it lists other cards: a change of cards is for the next discovery to
// report.
func (a *Agent) gpuReadings(ctx context.Context, timeout time.Duration) []*agentv1.GPU {
	a.mu.Lock()
	known, path := a.gpus, a.decl.Discovery.NvidiaSMIPath()
	a.mu.Unlock()
	if len(known) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	found, err := discovery.ProbeGPUs(ctx, path)
	if err != nil {
		a.log.Debug("gpu readings not refreshed", "nvidia_smi", path, "error", err)
		return nil
	}
	fresh := InventoryToProto(discovery.Inventory{GPUs: found}).GetGpus()
	if len(fresh) != len(known) {
		a.log.Debug("gpu readings not refreshed: cards changed since discovery", "nvidia_smi", path, "discovered", len(known), "listed", len(fresh))
		return nil
	}
	for i, g := range fresh {
		k := known[i]
		if g.GetIndex() != k.GetIndex() || g.GetUuid() != k.GetUuid() {
			a.log.Debug("gpu readings not refreshed: cards changed since discovery", "nvidia_smi", path, "gpu", k.GetIndex(), "uuid", k.GetUuid())
			return nil
		}
		g.NvlinkPeers, g.NvlinkKnown = k.GetNvlinkPeers(), k.NvlinkKnown // topology is discovery's to report
	}
	return fresh
}

// discover runs every probe and converts the result for the protocol.
func (a *Agent) discover(ctx context.Context, decl spec.Declaration) *agentv1.Inventory {
	opts := a.opts.Discovery
	opts.Logger = a.log
	if opts.DiskPath == "" {
		opts.DiskPath = a.cfg.StateDir
	}
	inv := discovery.Discover(ctx, decl, opts)
	out := InventoryToProto(inv)
	out.Engines = a.engineStatuses(decl)
	wc, gen := a.cacheReport()
	out.WeightsCache = wc
	a.mu.Lock()
	a.gpus = out.GetGpus()
	a.cacheSent = gen
	a.mu.Unlock()
	return out
}

// engineStatuses says, for each engine, whether its executable exists. The
// sim engine is this binary and is always available.
func (a *Agent) engineStatuses(decl spec.Declaration) []*agentv1.EngineStatus {
	out := []*agentv1.EngineStatus{{Engine: "sim", Path: a.opts.SelfBinary, Available: true}}
	names := make([]string, 0, len(decl.Engines))
	for e := range decl.Engines {
		if e != "sim" {
			names = append(names, e)
		}
	}
	sort.Strings(names)
	for _, e := range names {
		path := decl.Engines[e]
		es := &agentv1.EngineStatus{Engine: e, Path: path}
		if _, err := exec.LookPath(path); err != nil {
			es.Error = err.Error()
		} else {
			es.Available = true
		}
		out = append(out, es)
	}
	return out
}

// report sends a shard's status if a session is up; otherwise the next
// hello carries it.
func (a *Agent) report(st *agentv1.ShardStatus) {
	a.mu.Lock()
	send := a.send
	a.mu.Unlock()
	if send == nil {
		return
	}
	if err := send(&agentv1.AgentMessage{Msg: &agentv1.AgentMessage_ShardStatus{ShardStatus: st}}); err != nil {
		a.log.Debug("shard status not delivered", "shard", st.GetShardId(), "err", err)
	}
}

// checkTargets returns the engines decl makes this node run, name to
// executable: the declared ones, and the sim engine, which is this binary.
func (a *Agent) checkTargets(decl spec.Declaration) map[string]string {
	out := map[string]string{"sim": a.opts.SelfBinary}
	for e, path := range decl.Engines {
		if e != "sim" {
			out[e] = path
		}
	}
	return out
}

// requestChecks asks checkLoop to run the engine checks again; requests made
// while a run is under way are coalesced into one more run.
func (a *Agent) requestChecks() {
	select {
	case a.recheck <- struct{}{}:
	default:
	}
}

// checkLoop runs the engine checks whenever they are requested, one run at a
// time, until ctx ends.
func (a *Agent) checkLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.recheck:
			a.runChecks(ctx)
		}
	}
}

// runChecks checks every engine of the declaration in use, records the
// results for the next hello and reports them on the session, if one is up.
func (a *Agent) runChecks(ctx context.Context) {
	a.mu.Lock()
	targets := a.checkTargets(a.decl)
	a.mu.Unlock()
	results := enginecheck.All(ctx, targets, a.opts.EngineCheckTimeout)
	if ctx.Err() != nil {
		return // cut short by shutdown, not the engines' fault
	}
	checks := make([]*agentv1.EngineCheck, 0, len(results))
	for _, r := range results {
		if r.OK {
			a.log.Info("engine check passed", "engine", r.Engine, "path", r.Path, "version", r.Version, "took", r.Took.Round(time.Millisecond).String())
		} else {
			a.log.Error("engine cannot start", "engine", r.Engine, "path", r.Path, "error", r.Error)
		}
		checks = append(checks, r.ToProto())
	}
	a.mu.Lock()
	a.checks, a.checkedFor = checks, targets
	send := a.send
	a.mu.Unlock()
	if send == nil {
		return // the next hello carries them
	}
	if err := send(&agentv1.AgentMessage{Msg: &agentv1.AgentMessage_EngineChecks{EngineChecks: &agentv1.EngineChecks{Checks: checks}}}); err != nil {
		a.log.Debug("engine checks not delivered", "err", err)
	}
}
