package agent

import (
	"context"
	"net"
	"strconv"
	"time"

	"github.com/llmgw/llmgw/agent/driver"
	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/api/specpb"
)

// adopt takes back the engines a previous run of the agent left running.
// The supervisor's state file is the node's one record of a shard: its
// ShardSpec holds what the control plane placed (replica, rank, GPUs,
// fabric, generation, the profile itself), so each engine is reported as
// the control plane placed it, starting until its health check passes
// again. An engine whose record names no replica cannot be described to
// the control plane and is stopped.
func (a *Agent) adopt() {
	shards, err := a.sup.Recover()
	if err != nil {
		a.log.Warn("some shard state could not be recovered", "err", err)
	}
	for _, sh := range shards {
		ss := sh.Spec()
		if ss.ReplicaID == "" {
			a.log.Warn("stopping an engine whose record names no replica", "shard", ss.ShardID, "pid", sh.PID())
			_ = sh.Stop(10 * time.Second)
			continue
		}
		drv, err := driver.ForEngine(ss.Engine)
		if err != nil {
			_ = sh.Stop(10 * time.Second)
			continue
		}
		sctx, cancel := context.WithCancel(context.Background())
		st := statusFor(ss)
		st.Pid = int32(sh.PID())
		if ss.Rank == 0 && ss.Shards() > 1 {
			st.RendezvousAddr = ss.DistInitAddr
		}
		// A healthy engine is reported ready in the first hello, so the
		// control plane never sees its replica dip to starting.
		hctx, hcancel := context.WithTimeout(sctx, 5*time.Second)
		if err := sh.WaitReady(hctx); err == nil {
			st.State = agentv1.ShardState_SHARD_STATE_READY
			if drv.ServesHTTP(ss.Rank) {
				st.Endpoint = net.JoinHostPort(ss.Host, strconv.Itoa(ss.Port))
			}
		}
		hcancel()
		a.mu.Lock()
		a.shards[ss.ShardID] = &shardState{status: st, shard: sh, cancel: cancel}
		a.mu.Unlock()
		a.log.Info("engine adopted", "shard", ss.ShardID, "model", ss.Model, "pid", sh.PID())
		go a.watch(sctx, ss.ShardID, sh, ss, drv)
	}
}

// statusFor is a shard's first status, from its record: what the control
// plane needs to rebuild the replica after its own restart.
func statusFor(ss driver.ShardSpec) *agentv1.ShardStatus {
	st := &agentv1.ShardStatus{
		ShardId: ss.ShardID, ReplicaId: ss.ReplicaID, Model: ss.Model, Rank: int32(ss.Rank),
		State: agentv1.ShardState_SHARD_STATE_STARTING, ModelGeneration: ss.ModelGeneration, ReplicaGeneration: ss.ReplicaGeneration,
		Fabric: ss.Fabric, Profile: specpb.ProfileToProto(ss.Profile),
	}
	for _, g := range ss.GPUIndices {
		st.GpuIndices = append(st.GpuIndices, int32(g))
	}
	return st
}
