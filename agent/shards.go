package agent

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/llmgw/llmgw/agent/driver"
	"github.com/llmgw/llmgw/agent/fetch"
	"github.com/llmgw/llmgw/agent/supervisor"
	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/api/specpb"
	"github.com/llmgw/llmgw/spec"
)

// shardState is what the agent knows about one shard it was asked to run.
type shardState struct {
	status  *agentv1.ShardStatus
	shard   *supervisor.Shard
	cancel  context.CancelFunc
	stopped bool
	// ports are the ports handed to this shard's engine; no other shard
	// gets them while this one exists, even before its engine binds them.
	ports []int
	// source is the model's source as the StartShard wrote it (the
	// engine is given the cache's path for a fetched one).
	source string
	// unpin releases the shard's pin of its cache entry (fetch.Cache.Pin)
	// once it stops or fails.
	unpin func()
}

// release lets go of the shard's cache pin, if it holds one.
func (s *shardState) release() {
	if s.unpin != nil {
		s.unpin()
	}
}

// shardStatusesLocked returns the current status of every shard, for a
// hello; a.mu must be held.
func (a *Agent) shardStatusesLocked() []*agentv1.ShardStatus {
	out := make([]*agentv1.ShardStatus, 0, len(a.shards))
	for _, s := range a.shards {
		out = append(out, proto.Clone(s.status).(*agentv1.ShardStatus))
	}
	slices.SortFunc(out, func(x, y *agentv1.ShardStatus) int {
		if x.GetShardId() < y.GetShardId() {
			return -1
		}
		return 1
	})
	return out
}

// setStatus updates a shard's status and reports it.
func (a *Agent) setStatus(id string, fn func(st *agentv1.ShardStatus)) {
	a.mu.Lock()
	s, ok := a.shards[id]
	if !ok {
		a.mu.Unlock()
		return
	}
	fn(s.status)
	st := proto.Clone(s.status).(*agentv1.ShardStatus)
	a.mu.Unlock()
	a.report(st)
}

func (a *Agent) fail(id string, err error, lastOutput []string) {
	a.log.Warn("shard failed", "shard", id, "err", err)
	a.mu.Lock()
	if s, ok := a.shards[id]; ok {
		s.release()
	}
	a.mu.Unlock()
	a.setStatus(id, func(st *agentv1.ShardStatus) {
		st.State = agentv1.ShardState_SHARD_STATE_FAILED
		st.Error = err.Error()
		st.LastOutput = lastOutput
	})
}

// startShard launches a shard in the background and reports its progress.
// The ShardSpec built here is the shard's one record on this node: the
// supervisor keeps it in the shard's state file.
func (a *Agent) startShard(m *agentv1.StartShard) {
	id := m.GetShardId()
	profile, perr := specpb.ProfileFromProto(m.GetProfile())
	ss := driver.ShardSpec{
		Profile: profile,
		ShardID: id, ReplicaID: m.GetReplicaId(), Model: m.GetModel(), ModelGeneration: m.GetModelGeneration(), ReplicaGeneration: m.GetReplicaGeneration(),
		Source: m.GetSource(), Host: a.cfg.Address, Rank: int(m.GetRank()),
		Fabric: m.GetFabric(), ContextLength: int(m.GetContextLength()),
	}
	for _, g := range m.GetGpuIndices() {
		ss.GPUIndices = append(ss.GPUIndices, int(g))
	}
	a.mu.Lock()
	if _, exists := a.shards[id]; exists {
		a.mu.Unlock()
		return // a repeated command: already running or done
	}
	ctx, cancel := context.WithCancel(context.Background())
	// Pinned before anything resolves it: a weights collection running
	// meanwhile keeps the entry this shard is about to run from.
	a.shards[id] = &shardState{cancel: cancel, status: statusFor(ss), source: ss.Source, unpin: a.weights.Pin(ss.Source)}
	decl := a.decl
	a.mu.Unlock()

	a.log.Info("starting shard", "shard", id, "model", ss.Model, "engine", ss.Engine, "rank", ss.Rank, "nodes", ss.Shards())
	if perr != nil {
		a.fail(id, fmt.Errorf("profile %s: %w", profile.Name, perr), nil)
		return
	}
	drv, err := driver.ForEngine(ss.Engine)
	if err != nil {
		a.fail(id, err, nil)
		return
	}
	binary := decl.Engines[ss.Engine]
	if ss.Engine == driver.EngineSim {
		binary = a.opts.SelfBinary
	}
	if binary == "" {
		a.fail(id, fmt.Errorf("engine %s has no path in this node's declaration (engines.%s)", ss.Engine, ss.Engine), nil)
		return
	}
	ss.Binary = binary
	src, err := spec.ParseSource(ss.Source)
	if err != nil {
		a.fail(id, fmt.Errorf("source %q: %w", ss.Source, err), nil)
		return
	}
	if !src.Fetched() {
		// A local path is checked here, a repository id or another scheme
		// is the engine's: neither waits for anything.
		path, err := a.weights.Resolve(ctx, ss.Source, nil)
		if err != nil {
			a.fail(id, err, nil)
			return
		}
		ss.Source = path
		a.launch(ctx, id, ss, drv, decl, m)
		return
	}
	// A fetch may take hours: it runs beside the session, and the engine
	// is launched with the cache's local path once it is done.
	go func() {
		path, err := a.weights.ResolveFrom(ctx, ss.Source, peersFromProto(m.GetWeightsPeers()), func(p fetch.Progress) {
			a.setStatus(id, func(st *agentv1.ShardStatus) { st.Fetch = fetchToProto(p) })
		})
		if err != nil {
			if a.isStopped(id) {
				return
			}
			a.fail(id, fmt.Errorf("fetching weights: %w", err), nil)
			return
		}
		a.log.Info("weights in place", "shard", id, "source", ss.Source, "path", path)
		a.sendCacheIfChanged()
		a.setStatus(id, func(st *agentv1.ShardStatus) { st.Fetch = nil })
		ss.Source = path
		a.launch(ctx, id, ss, drv, decl, m)
	}()
}

// fetchToProto converts a fetch's progress for the protocol.
func fetchToProto(p fetch.Progress) *agentv1.FetchProgress {
	return &agentv1.FetchProgress{
		Source: p.Source, BytesDone: p.Done, BytesTotal: p.Total, BytesPerSecond: p.BytesPerSecond,
		Stalled: p.Stalled, LastError: p.LastError,
	}
}

// launch starts a shard's engine once its weights are local: ports, the
// supervisor, then the watch.
func (a *Agent) launch(ctx context.Context, id string, ss driver.ShardSpec, drv driver.Driver, decl spec.Declaration, m *agentv1.StartShard) {
	if a.isStopped(id) {
		return
	}
	host := ss.Host
	for _, f := range decl.Fabrics {
		if f.Name == m.GetFabric() {
			ss.FabricAdapters = slices.Clone(f.Adapters)
		}
	}
	if drv.ServesHTTP(ss.Rank) {
		port, err := a.enginePort(id, host)
		if err != nil {
			a.fail(id, err, nil)
			return
		}
		ss.Port = port
	}
	if ss.Shards() > 1 {
		if ss.Rank == 0 {
			port, err := a.enginePort(id, host)
			if err != nil {
				a.fail(id, err, nil)
				return
			}
			ss.DistInitAddr = net.JoinHostPort(host, strconv.Itoa(port))
		} else {
			ss.DistInitAddr = m.GetRendezvousAddr()
		}
	}
	a.mu.Lock()
	if st, ok := a.shards[id]; ok {
		ss.ReplicaGeneration = st.status.GetReplicaGeneration() // restamped while it fetched
	}
	a.mu.Unlock()
	sh, err := a.sup.Start(ctx, ss, drv)
	if err != nil {
		a.fail(id, fmt.Errorf("launching %s: %w", ss.Engine, err), nil)
		return
	}
	a.mu.Lock()
	st, ok := a.shards[id]
	if ok {
		st.shard = sh
	}
	a.mu.Unlock()
	if ok {
		a.recordStamp(id, sh, ss.ReplicaGeneration) // restamped while it launched
	}
	if !ok {
		// Stopped (StopShard or StopAll) while it was launching: it must
		// not outlive the command.
		a.log.Info("shard stopped while starting", "shard", id)
		if err := sh.Stop(10 * time.Second); err != nil {
			a.log.Warn("stopping shard", "shard", id, "err", err)
		}
		return
	}
	a.setStatus(id, func(st *agentv1.ShardStatus) {
		st.Pid = int32(sh.PID())
		if ss.Rank == 0 && ss.Shards() > 1 {
			st.RendezvousAddr = ss.DistInitAddr
		}
	})
	go a.watch(ctx, id, sh, ss, drv)
}

// restamp records a shard's new replica generation (a Restamp from the
// control plane): its reports carry it from now on, and its state file, so
// that after an agent restart the adopted shard reports it too.
func (a *Agent) restamp(id, generation string) {
	a.mu.Lock()
	s, ok := a.shards[id]
	if !ok || generation == "" || s.status.GetReplicaGeneration() == generation {
		a.mu.Unlock()
		return
	}
	s.status.ReplicaGeneration = generation
	sh := s.shard
	a.mu.Unlock()
	a.log.Info("shard restamped", "shard", id, "generation", generation)
	if sh != nil {
		a.recordStamp(id, sh, "")
	}
}

// recordStamp writes the replica generation the shard reports into its
// state file (sh.SetReplicaGeneration), unless it is the one written
// already. It reads the stamp again after each write, outside a.mu (the
// write is file I/O), and writes again when a Restamp changed it
// meanwhile: of launch and restamp, racing, the last to finish leaves the
// newest stamp on disk, not the one it read first. A shard stopped
// meanwhile (gone from a.shards) is left alone.
func (a *Agent) recordStamp(id string, sh *supervisor.Shard, written string) {
	for {
		a.mu.Lock()
		g := ""
		if s, ok := a.shards[id]; ok && s.shard == sh {
			g = s.status.GetReplicaGeneration()
		}
		a.mu.Unlock()
		if g == "" || g == written {
			return
		}
		if a.beforeStampWrite != nil {
			a.beforeStampWrite(id, g)
		}
		if err := sh.SetReplicaGeneration(g); err != nil {
			a.log.Warn("shard generation not recorded", "shard", id, "err", err)
			return
		}
		written = g
	}
}

// watch waits for a shard to become ready, then for it to exit.
func (a *Agent) watch(ctx context.Context, id string, sh *supervisor.Shard, ss driver.ShardSpec, drv driver.Driver) {
	if err := sh.WaitReady(ctx); err != nil {
		if a.isStopped(id) {
			return
		}
		a.fail(id, err, sh.LastOutput())
		_ = sh.Stop(10 * time.Second) // removes the shard's record
		return
	}
	a.log.Info("shard ready", "shard", id, "pid", sh.PID())
	a.setStatus(id, func(st *agentv1.ShardStatus) {
		st.State = agentv1.ShardState_SHARD_STATE_READY
		if drv.ServesHTTP(ss.Rank) {
			st.Endpoint = net.JoinHostPort(ss.Host, strconv.Itoa(ss.Port))
		}
	})
	<-sh.Done()
	if a.isStopped(id) {
		return
	}
	err := sh.ExitErr()
	if err == nil {
		err = fmt.Errorf("engine exited")
	}
	a.fail(id, fmt.Errorf("shard %s (%s) exited: %w", id, ss.Engine, err), sh.LastOutput())
	_ = sh.Stop(10 * time.Second) // removes the shard's record
}

func (a *Agent) isStopped(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.shards[id]
	return !ok || s.stopped
}

// stopShard stops a shard and forgets it.
func (a *Agent) stopShard(id, reason string) {
	a.mu.Lock()
	s, ok := a.shards[id]
	if ok {
		s.stopped = true
		delete(a.shards, id)
	}
	a.mu.Unlock()
	if !ok {
		return
	}
	a.log.Info("stopping shard", "shard", id, "reason", reason)
	s.cancel()
	s.release()
	// Once the engine is gone, say so: the control plane keeps its GPUs
	// allocated until then.
	stopped := proto.Clone(s.status).(*agentv1.ShardStatus)
	stopped.State = agentv1.ShardState_SHARD_STATE_STOPPED
	stopped.Endpoint = ""
	if s.shard != nil {
		go func() {
			if err := s.shard.Stop(10 * time.Second); err != nil {
				a.log.Warn("stopping shard", "shard", id, "err", err)
			}
			a.report(stopped)
		}()
	} else {
		a.report(stopped)
	}
}

// StopAll stops every shard this agent started (used by `llmgw dev` and
// tests; a production agent leaves engines running across its restarts).
func (a *Agent) StopAll(timeout time.Duration) {
	a.mu.Lock()
	for _, s := range a.shards {
		s.stopped = true
		s.cancel()
		s.release()
	}
	a.shards = map[string]*shardState{}
	a.mu.Unlock()
	if err := a.sup.StopAll(timeout); err != nil {
		a.log.Warn("stopping engines", "err", err)
	}
}

// enginePort picks a free port on host for shard id (in engine_ports when
// configured) and holds it for the shard: a port is free to the OS from the
// moment it is picked until the engine binds it, which may be minutes, so
// two shards starting together must not be handed the same one.
func (a *Agent) enginePort(id, host string) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	held := map[int]bool{}
	for _, s := range a.shards {
		for _, p := range s.ports {
			held[p] = true
		}
	}
	take := func(port int) (int, error) {
		s, ok := a.shards[id]
		if !ok {
			return 0, fmt.Errorf("shard %s was stopped while starting", id)
		}
		s.ports = append(s.ports, port)
		return port, nil
	}
	from, to := a.cfg.EnginePorts.From, a.cfg.EnginePorts.To
	if from <= 0 || to < from {
		for range 20 {
			port, err := supervisor.FreePort(host)
			if err != nil {
				return 0, err
			}
			if !held[port] {
				return take(port)
			}
		}
		return 0, fmt.Errorf("no free port on %s that another engine of this node is not about to bind", host)
	}
	span := to - from + 1
	start := int(time.Now().UnixNano() % int64(span))
	for i := 0; i < span; i++ {
		port := from + (start+i)%span
		if held[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			continue
		}
		_ = l.Close()
		return take(port)
	}
	return 0, fmt.Errorf("no free port in engine_ports %d-%d on %s", from, to, host)
}
