package agent

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/sim/simhw"
	"github.com/llmgw/llmgw/spec"
)

// simGPUAgent returns an agent whose declaration points at a simulated
// nvidia-smi listing gpus, and whose last discovery listed discovered.
func simGPUAgent(t *testing.T, gpus, discovered []simhw.SimGPU) *Agent {
	t.Helper()
	a := &Agent{log: slog.New(slog.DiscardHandler)}
	if len(discovered) > 0 {
		path, err := simhw.WriteNvidiaSMI(t.TempDir(), discovered)
		if err != nil {
			t.Fatal(err)
		}
		a.decl = spec.Declaration{Discovery: spec.Discovery{NvidiaSMI: path}}
		a.gpus = a.discover(context.Background(), a.decl).GetGpus()
		if len(a.gpus) != len(discovered) {
			t.Fatalf("discovery listed %d GPUs, want %d", len(a.gpus), len(discovered))
		}
		a.gpus[0].NvlinkPeers = []int32{1}
	}
	path, err := simhw.WriteNvidiaSMI(t.TempDir(), gpus)
	if err != nil {
		t.Fatal(err)
	}
	a.decl = spec.Declaration{Discovery: spec.Discovery{NvidiaSMI: path}}
	return a
}

func usedMiB(g *agentv1.GPU) any {
	if g.MemoryUsedMib == nil {
		return "absent"
	}
	return g.GetMemoryUsedMib()
}

// Heartbeats refresh the readings of the cards discovery listed, memory
// used among them; anything else leaves the control plane's readings alone.
func TestGPUReadings(t *testing.T) {
	idle := simhw.H100s(2, "node01")
	busy := simhw.H100s(2, "node01")
	busy[0].MemoryUsedMiB = 78802
	busy[1].MemoryUsedUnknown = true
	tests := []struct {
		name            string
		discovered, now []simhw.SimGPU
		wantUsed        []any // nil: no readings
	}{
		{"memory used changed since discovery", idle, busy, []any{uint64(78802), "absent"}},
		{"memory used no longer reported", busy[1:], busy[1:], []any{"absent"}},
		{"discovery listed no GPUs", nil, busy, nil},
		{"other cards", idle, simhw.H100s(2, "node02"), nil},
		{"a card gone", idle, idle[:1], nil},
		{"nvidia-smi lists none", idle, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := simGPUAgent(t, tt.now, tt.discovered)
			got := a.gpuReadings(context.Background(), 30*time.Second)
			if tt.wantUsed == nil {
				if got != nil {
					t.Fatalf("readings %v, want none", got)
				}
				return
			}
			if len(got) != len(tt.wantUsed) {
				t.Fatalf("got %d readings, want %d: %v", len(got), len(tt.wantUsed), got)
			}
			for i, g := range got {
				if used := usedMiB(g); used != tt.wantUsed[i] {
					t.Errorf("GPU %d memory used = %v, want %v", i, used, tt.wantUsed[i])
				}
				if g.GetUuid() != a.gpus[i].GetUuid() || g.GetClass() != "h100-80g" {
					t.Errorf("GPU %d = %v, want the discovered card %v", i, g, a.gpus[i])
				}
			}
			if peers := got[0].GetNvlinkPeers(); len(peers) != 1 || peers[0] != 1 {
				t.Errorf("NVLink peers of GPU 0 = %v, want discovery's [1]", peers)
			}
		})
	}
}

func TestHeartbeatsCarryGPUReadings(t *testing.T) {
	busy := simhw.H100s(1, "node01")
	busy[0].MemoryUsedMiB = 40960
	a := simGPUAgent(t, busy, simhw.H100s(1, "node01"))

	var mu sync.Mutex
	var beats []*agentv1.Heartbeat
	send := func(m *agentv1.AgentMessage) error {
		mu.Lock()
		defer mu.Unlock()
		beats = append(beats, m.GetHeartbeat())
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.heartbeats(ctx, send, 50*time.Millisecond) }()
	defer func() { cancel(); <-done }()

	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		var with *agentv1.Heartbeat
		for _, hb := range beats {
			if len(hb.GetGpus()) > 0 {
				with = hb
				break
			}
		}
		n := len(beats)
		mu.Unlock()
		if with != nil {
			if used := usedMiB(with.GetGpus()[0]); used != uint64(40960) {
				t.Fatalf("heartbeat GPU memory used = %v, want 40960", used)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no heartbeat with GPU readings among %d", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
