package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/llmgw/llmgw/agent/driver"
	agentv1 "github.com/llmgw/llmgw/api/agentv1"
)

// The agent keeps, beside the supervisor's own state, the command that
// started each shard, so that after an agent restart it can report the
// engines it adopts exactly as the control plane placed them.
const commandsDir = "commands"

func (a *Agent) commandPath(shardID string) string {
	return filepath.Join(a.cfg.StateDir, commandsDir, shardID+".json")
}

func (a *Agent) saveCommand(m *agentv1.StartShard) error {
	b, err := protojson.Marshal(m)
	if err != nil {
		return fmt.Errorf("encoding the command of shard %s: %w", m.GetShardId(), err)
	}
	path := a.commandPath(m.GetShardId())
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return fmt.Errorf("recording the command of shard %s: %w", m.GetShardId(), err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("recording the command of shard %s: %w", m.GetShardId(), err)
	}
	return os.Rename(tmp, path)
}

func (a *Agent) forgetCommand(shardID string) {
	if err := os.Remove(a.commandPath(shardID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		a.log.Warn("removing the command record of a shard", "shard", shardID, "err", err)
	}
}

func (a *Agent) loadCommand(shardID string) (*agentv1.StartShard, error) {
	b, err := os.ReadFile(a.commandPath(shardID))
	if err != nil {
		return nil, err
	}
	var m agentv1.StartShard
	if err := protojson.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", a.commandPath(shardID), err)
	}
	return &m, nil
}

// adopt takes back the engines a previous run of the agent left running.
// Each is reported as starting until its health check passes again; an
// engine whose command record is missing cannot be described to the control
// plane and is stopped.
func (a *Agent) adopt() {
	shards, err := a.sup.Recover()
	if err != nil {
		a.log.Warn("some shard state could not be recovered", "err", err)
	}
	for _, sh := range shards {
		spec := sh.Spec()
		m, err := a.loadCommand(spec.ShardID)
		if err != nil {
			a.log.Warn("stopping an engine with no command record", "shard", spec.ShardID, "pid", sh.PID(), "err", err)
			_ = sh.Stop(10 * time.Second)
			continue
		}
		drv, err := driver.ForEngine(spec.Engine)
		if err != nil {
			_ = sh.Stop(10 * time.Second)
			continue
		}
		sctx, cancel := context.WithCancel(context.Background())
		st := statusFor(m)
		st.Pid = int32(sh.PID())
		if spec.Rank == 0 && spec.Shards() > 1 {
			st.RendezvousAddr = spec.DistInitAddr
		}
		// A healthy engine is reported ready in the first hello, so the
		// control plane never sees its replica dip to starting.
		hctx, hcancel := context.WithTimeout(sctx, 5*time.Second)
		if err := sh.WaitReady(hctx); err == nil {
			st.State = agentv1.ShardState_SHARD_STATE_READY
			if drv.ServesHTTP(spec.Rank) {
				st.Endpoint = net.JoinHostPort(spec.Host, strconv.Itoa(spec.Port))
			}
		}
		hcancel()
		a.mu.Lock()
		a.shards[spec.ShardID] = &shardState{status: st, shard: sh, cancel: cancel}
		a.mu.Unlock()
		a.log.Info("engine adopted", "shard", spec.ShardID, "model", spec.Model, "pid", sh.PID())
		go a.watch(sctx, spec.ShardID, sh, spec, drv)
	}
	a.pruneCommands()
}

// pruneCommands removes command records of shards that are not running.
func (a *Agent) pruneCommands() {
	paths, _ := filepath.Glob(filepath.Join(a.cfg.StateDir, commandsDir, "*.json"))
	for _, p := range paths {
		id := strings.TrimSuffix(filepath.Base(p), ".json")
		a.mu.Lock()
		_, running := a.shards[id]
		a.mu.Unlock()
		if !running {
			a.forgetCommand(id)
		}
	}
}

// statusFor is a shard's first status, echoing what the control plane sent.
func statusFor(m *agentv1.StartShard) *agentv1.ShardStatus {
	return &agentv1.ShardStatus{
		ShardId: m.GetShardId(), ReplicaId: m.GetReplicaId(), Model: m.GetModel(), Rank: m.GetRank(),
		State: agentv1.ShardState_SHARD_STATE_STARTING, Profile: m.GetProfile(),
		ModelGeneration: m.GetModelGeneration(), GpuIndices: m.GetGpuIndices(), Fabric: m.GetFabric(),
	}
}
