package metrics

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/spec"
)

type nopConn struct{}

func (nopConn) Send(*agentv1.ControlMessage) error { return nil }

// testFleet has node a (two GPUs: one reporting everything, one reporting
// only its memory), node b (no inventory yet), and a ready replica of
// "qwen" on a's GPU 0.
func testFleet(t *testing.T) *fleet.Fleet {
	t.Helper()
	f := fleet.New()
	f.Connect(&agentv1.Hello{Inventory: &agentv1.Inventory{Gpus: []*agentv1.GPU{
		{Index: 0, Class: "h100-80g", Name: "NVIDIA H100", MemoryMib: 81559,
			UtilizationPct: proto.Float64(37), TemperatureC: proto.Float64(61), EccErrors: proto.Uint64(2), NvlinkPeers: []int32{1},
			MemoryUsedMib: proto.Uint64(61440)},
		{Index: 1, Class: "h100-80g", Name: "NVIDIA H100", MemoryMib: 81559},
	}}}, "a", nil, true, nopConn{})
	f.Connect(&agentv1.Hello{}, "b", nil, true, nopConn{})
	f.AddReplica(&fleet.Replica{ID: "r1", Model: "qwen", Profile: spec.Profile{Nodes: 1}, Shards: []*fleet.Shard{{ID: "r1-0", Node: "a", GPUs: []int{0}, Sent: true}}})
	f.ApplyShardStatus("a", &agentv1.ShardStatus{ShardId: "r1-0", ReplicaId: "r1", Model: "qwen", State: agentv1.ShardState_SHARD_STATE_READY, GpuIndices: []int32{0}})
	return f
}

func TestFleetCollector(t *testing.T) {
	f := testFleet(t)
	a, _ := f.Node("a")
	c := NewFleetCollector(FleetOptions{
		Fleet: f,
		Models: func() []CatalogModel {
			return []CatalogModel{{Name: "qwen", MinReplicas: 1}, {Name: "idle", MinReplicas: 2}}
		},
		Now: func() time.Time { return a.LastSeen.Add(7 * time.Second) },
	})
	out := exposition(t, collectorRegistry(t, c))
	for _, line := range []string{
		`llmgw_nodes{state="ready"} 1`,
		`llmgw_nodes{state="pending"} 1`,
		`llmgw_nodes{state="lost"} 0`,
		`llmgw_node_state{node="a",state="ready"} 1`,
		`llmgw_node_state{node="a",state="lost"} 0`,
		`llmgw_node_state{node="b",state="pending"} 1`,
		`llmgw_node_connected{node="a"} 1`,
		`llmgw_node_draining{node="a"} 0`,
		`llmgw_node_heartbeat_age_seconds{node="a"} 7`,
		`llmgw_node_replicas{node="a"} 1`,
		`llmgw_node_replicas{node="b"} 0`,
		`llmgw_node_gpus{node="a"} 2`,
		`llmgw_gpu_info{class="h100-80g",gpu="0",name="NVIDIA H100",node="a"} 1`,
		`llmgw_gpu_memory_total_bytes{gpu="0",node="a"} 8.5520809984e+10`,
		`llmgw_gpu_memory_total_bytes{gpu="1",node="a"} 8.5520809984e+10`,
		`llmgw_gpu_memory_used_bytes{gpu="0",node="a"} 6.442450944e+10`,
		`llmgw_gpu_temperature_celsius{gpu="0",node="a"} 61`,
		`llmgw_gpu_utilization_ratio{gpu="0",node="a"} 0.37`,
		`llmgw_gpu_ecc_uncorrected_errors{gpu="0",node="a"} 2`,
		`llmgw_gpu_nvlink_peers{gpu="0",node="a"} 1`,
		`llmgw_gpu_nvlink_peers{gpu="1",node="a"} 0`,
		`llmgw_gpu_allocated{gpu="0",node="a"} 1`,
		`llmgw_gpu_allocated{gpu="1",node="a"} 0`,
		`llmgw_replicas{model="qwen",state="ready"} 1`,
		`llmgw_model_ready_replicas{model="qwen"} 1`,
		`llmgw_model_ready_replicas{model="idle"} 0`,
		`llmgw_model_min_replicas{model="idle"} 2`,
		`llmgw_replica_failures_total{model="qwen"} 0`,
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("missing %s", line)
		}
	}
	if t.Failed() {
		t.Logf("exposition:\n%s", out)
	}
}

// TestFleetCollectorDraining: a ready replica being drained counts as
// draining, not as ready.
func TestFleetCollectorDraining(t *testing.T) {
	c := NewFleetCollector(FleetOptions{Fleet: testFleet(t), Draining: func() map[string]bool { return map[string]bool{"r1": true} }})
	out := exposition(t, collectorRegistry(t, c))
	for _, line := range []string{`llmgw_replicas{model="qwen",state="draining"} 1`, `llmgw_model_ready_replicas{model="qwen"} 0`} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("missing %s in:\n%s", line, out)
		}
	}
	if strings.Contains(out, `llmgw_replicas{model="qwen",state="ready"}`) {
		t.Errorf("the draining replica counted as ready:\n%s", out)
	}
}

// A reading the driver does not report is absent, not zero: a flat zero
// would look like an idle, cool, healthy GPU.
func TestFleetCollectorUnknownReadingsAreAbsent(t *testing.T) {
	f := testFleet(t)
	out := exposition(t, collectorRegistry(t, NewFleetCollector(FleetOptions{Fleet: f})))
	for _, name := range []string{"llmgw_gpu_temperature_celsius", "llmgw_gpu_utilization_ratio", "llmgw_gpu_ecc_uncorrected_errors", "llmgw_gpu_memory_used_bytes"} {
		if !strings.Contains(out, name+`{gpu="0",node="a"}`) {
			t.Errorf("%s of the GPU that reports it is missing", name)
		}
		if strings.Contains(out, name+`{gpu="1",node="a"}`) {
			t.Errorf("%s of the GPU that does not report it is exported", name)
		}
	}
	// Node b has sent no inventory: no GPU count, not zero GPUs.
	if strings.Contains(out, `llmgw_node_gpus{node="b"}`) {
		t.Errorf("GPU count of a node without inventory is exported")
	}
	// A heartbeat that reports the readings gone takes them away again.
	f.Heartbeat("a", &agentv1.Heartbeat{Gpus: []*agentv1.GPU{{Index: 0, Class: "h100-80g", MemoryMib: 81559}}})
	out = exposition(t, collectorRegistry(t, NewFleetCollector(FleetOptions{Fleet: f})))
	for _, name := range []string{"llmgw_gpu_temperature_celsius", "llmgw_gpu_memory_used_bytes"} {
		if strings.Contains(out, name+"{") {
			t.Errorf("%s still exported after the driver stopped reporting it:\n%s", name, out)
		}
	}
	// An idle card's zero is a reading, exported as such.
	f.Heartbeat("a", &agentv1.Heartbeat{Gpus: []*agentv1.GPU{{Index: 0, Class: "h100-80g", MemoryMib: 81559, MemoryUsedMib: proto.Uint64(0)}}})
	out = exposition(t, collectorRegistry(t, NewFleetCollector(FleetOptions{Fleet: f})))
	if !strings.Contains(out, `llmgw_gpu_memory_used_bytes{gpu="0",node="a"} 0`+"\n") {
		t.Errorf("memory used of an idle card is not exported as 0:\n%s", out)
	}
}

func TestFleetCollectorCountsEachFailureOnce(t *testing.T) {
	f := testFleet(t)
	c := NewFleetCollector(FleetOptions{Fleet: f})
	reg := collectorRegistry(t, c)
	failures := func() float64 {
		t.Helper()
		mf := families(t, reg)["llmgw_replica_failures_total"]
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == "qwen" {
				return m.GetCounter().GetValue()
			}
		}
		t.Fatalf("no llmgw_replica_failures_total{model=qwen}")
		return 0
	}
	if got := failures(); got != 0 {
		t.Fatalf("failures before any = %v", got)
	}
	f.ApplyShardStatus("a", &agentv1.ShardStatus{ShardId: "r1-0", ReplicaId: "r1", Model: "qwen", State: agentv1.ShardState_SHARD_STATE_FAILED, Error: "CUDA out of memory"})
	steps := []struct {
		name string
		do   func()
		want float64
	}{
		{"failed in place", func() {}, 1},
		{"scraped again", func() {}, 1},
		{"stopping", func() {
			f.Update(func(tx *fleet.Tx) {
				for _, r := range tx.Replicas() {
					tx.Stopping(r, time.Now())
				}
			})
		}, 1},
		{"moved to the recent failures", func() {
			f.Update(func(tx *fleet.Tx) {
				for _, r := range tx.Replicas() {
					tx.Remove(r)
				}
			})
		}, 1},
		{"a second replica fails", func() {
			f.AddReplica(&fleet.Replica{ID: "r2", Model: "qwen", Profile: spec.Profile{Nodes: 1}, Shards: []*fleet.Shard{{ID: "r2-0", Node: "a", Sent: true}}})
			f.ApplyShardStatus("a", &agentv1.ShardStatus{ShardId: "r2-0", ReplicaId: "r2", Model: "qwen", State: agentv1.ShardState_SHARD_STATE_FAILED})
		}, 2},
	}
	for _, s := range steps {
		s.do()
		if got := failures(); got != s.want {
			t.Fatalf("%s: failures = %v, want %v", s.name, got, s.want)
		}
	}
	if !strings.Contains(exposition(t, reg), `llmgw_replicas{model="qwen",state="failed"} 2`) {
		t.Errorf("failed replicas not reported by state")
	}
}
