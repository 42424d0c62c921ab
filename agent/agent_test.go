package agent

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	agentconfig "github.com/llmgw/llmgw/agent/config"
	"github.com/llmgw/llmgw/agent/discovery"
	"github.com/llmgw/llmgw/agent/driver"
	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/api/specpb"
	"github.com/llmgw/llmgw/spec"
)

func TestBackoffGrowsWithJitterAndIsCapped(t *testing.T) {
	for n := 1; n <= 12; n++ {
		base := min(500*time.Millisecond<<min(n-1, 6), 30*time.Second)
		for i := 0; i < 50; i++ {
			d := backoff(n)
			if d < base/2 || d > base {
				t.Fatalf("backoff(%d) = %s, want within [%s, %s]", n, d, base/2, base)
			}
		}
	}
}

func TestEngineStatuses(t *testing.T) {
	a := &Agent{opts: Options{SelfBinary: "/usr/local/bin/llmgw"}}
	got := a.engineStatuses(spec.Declaration{Engines: map[string]string{
		"llamacpp": "/nonexistent/llama-server",
		"vllm":     "/bin/sh", // exists and is executable
	}})
	if len(got) != 3 {
		t.Fatalf("got %d statuses, want sim, llamacpp, vllm", len(got))
	}
	if got[0].GetEngine() != "sim" || !got[0].GetAvailable() {
		t.Fatalf("sim = %v; the sim engine is this binary and always available", got[0])
	}
	if got[1].GetEngine() != "llamacpp" || got[1].GetAvailable() || got[1].GetError() == "" {
		t.Fatalf("llamacpp = %v; want unavailable with the reason", got[1])
	}
	if got[2].GetEngine() != "vllm" || !got[2].GetAvailable() {
		t.Fatalf("vllm = %v; want available", got[2])
	}
}

// A shard's status is built from its one record, the ShardSpec the
// supervisor keeps: it carries what a restarted control plane needs to
// rebuild the replica, the profile itself included.
func TestStatusFromRecord(t *testing.T) {
	p := spec.Profile{Name: "p", Engine: "sim", Nodes: 2, Weight: 3, StartupTimeout: spec.Duration(time.Minute), Env: map[string]string{"A": "1"}}
	ss := driver.ShardSpec{Profile: p, ShardID: "r-1-1", ReplicaID: "r-1", Model: "m", ModelGeneration: "g1", ReplicaGeneration: "rg1", Rank: 1,
		Fabric: "ib-a", GPUIndices: []int{2, 3}, Port: 9000}
	st := statusFor(ss)
	want := &agentv1.ShardStatus{ShardId: "r-1-1", ReplicaId: "r-1", Model: "m", Rank: 1, State: agentv1.ShardState_SHARD_STATE_STARTING,
		ModelGeneration: "g1", ReplicaGeneration: "rg1", Fabric: "ib-a", GpuIndices: []int32{2, 3}, Profile: specpb.ProfileToProto(p)}
	if !proto.Equal(st, want) {
		t.Fatalf("status from the record = %v\nwant %v", st, want)
	}
}

func TestInventoryAVX2(t *testing.T) {
	tests := []struct {
		name string
		cpu  discovery.CPU
		err  string
		want *bool
	}{
		{"x86 with avx2", discovery.CPU{X86: true, AVX2: true, Flags: []string{"avx", "avx2"}}, "", proto.Bool(true)},
		{"x86 without avx2 (kvm64)", discovery.CPU{X86: true, Flags: []string{"sse2"}}, "", proto.Bool(false)},
		{"arm64: unknown", discovery.CPU{Flags: []string{"asimd"}}, "", nil},
		{"probe failed: unknown", discovery.CPU{}, "reading CPU description: no such file", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := InventoryToProto(discovery.Inventory{CPU: tt.cpu, CPUError: tt.err})
			if (got.HasAvx2 == nil) != (tt.want == nil) || (tt.want != nil && *got.HasAvx2 != *tt.want) {
				t.Fatalf("HasAvx2 = %v, want %v", got.HasAvx2, tt.want)
			}
			if !slices.Equal(got.GetCpuFlags(), tt.cpu.Flags) {
				t.Fatalf("CpuFlags = %q, want %q", got.GetCpuFlags(), tt.cpu.Flags)
			}
		})
	}
}

// GPU readings cross to the protocol as they are; an unknown reading stays
// absent rather than becoming zero.
func TestInventoryGPUs(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	f := func(v float64) *float64 { return &v }
	tests := []struct {
		name string
		gpu  discovery.GPU
		want *agentv1.GPU
	}{
		{"every reading known",
			discovery.GPU{Index: 3, UUID: "GPU-3", Name: "NVIDIA H100 80GB HBM3", Class: "h100-80g", MemoryMiB: 81559,
				UtilizationPct: f(97), TemperatureC: f(61), ECCErrors: u(0), MemoryUsedMiB: u(78802)},
			&agentv1.GPU{Index: 3, Uuid: "GPU-3", Name: "NVIDIA H100 80GB HBM3", Class: "h100-80g", MemoryMib: 81559,
				UtilizationPct: proto.Float64(97), TemperatureC: proto.Float64(61), EccErrors: proto.Uint64(0), MemoryUsedMib: proto.Uint64(78802)}},
		{"idle card: zero is a reading",
			discovery.GPU{Index: 0, UUID: "GPU-0", Name: "NVIDIA L40S", Class: "l40s-48g", MemoryMiB: 46068, MemoryUsedMiB: u(0)},
			&agentv1.GPU{Index: 0, Uuid: "GPU-0", Name: "NVIDIA L40S", Class: "l40s-48g", MemoryMib: 46068, MemoryUsedMib: proto.Uint64(0)}},
		{"nothing reported",
			discovery.GPU{Index: 1, UUID: "GPU-1", Name: "Tesla T4", Class: "t4-16g", MemoryMiB: 15360},
			&agentv1.GPU{Index: 1, Uuid: "GPU-1", Name: "Tesla T4", Class: "t4-16g", MemoryMib: 15360}},
		{"nvlink read: peers and known",
			discovery.GPU{Index: 2, UUID: "GPU-2", Class: "a100-80g", NVLinkKnown: true, NVLinkPeers: []int{3}},
			&agentv1.GPU{Index: 2, Uuid: "GPU-2", Class: "a100-80g", NvlinkKnown: proto.Bool(true), NvlinkPeers: []int32{3}}},
		{"nvlink read, none: known, no peers",
			discovery.GPU{Index: 2, UUID: "GPU-2", Class: "l40s-48g", NVLinkKnown: true, NVLinkPeers: []int{}},
			&agentv1.GPU{Index: 2, Uuid: "GPU-2", Class: "l40s-48g", NvlinkKnown: proto.Bool(true)}},
		{"nvlink not read: unknown, absent",
			discovery.GPU{Index: 2, UUID: "GPU-2", Class: "a100-80g"},
			&agentv1.GPU{Index: 2, Uuid: "GPU-2", Class: "a100-80g"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := InventoryToProto(discovery.Inventory{GPUs: []discovery.GPU{tt.gpu}}).GetGpus()
			if len(got) != 1 || !proto.Equal(got[0], tt.want) {
				t.Fatalf("GPUs = %v, want [%v]", got, tt.want)
			}
		})
	}
}

// The agent checks every engine of the declaration in use (the sim engine
// being this binary), keeps the results for the next hello and reports them
// on the session; a new declaration with other engines asks for a new run.
func TestEngineChecks(t *testing.T) {
	dir := t.TempDir()
	llama := filepath.Join(dir, "llama-server")
	self := filepath.Join(dir, "llmgw")
	for path, body := range map[string]string{
		llama: "echo \"$0: error while loading shared libraries: libgomp.so.1: cannot open shared object file: No such file or directory\" >&2\nexit 127\n",
		self:  "echo \"llmgw sim-engine version test\"\n",
	} {
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	a := &Agent{
		opts:    Options{SelfBinary: self},
		log:     slog.New(slog.DiscardHandler),
		decl:    spec.Declaration{Engines: map[string]string{"llamacpp": llama}},
		recheck: make(chan struct{}, 1),
	}
	var sent []*agentv1.AgentMessage
	a.send = func(m *agentv1.AgentMessage) error { sent = append(sent, m); return nil }
	a.runChecks(context.Background())

	if len(sent) != 1 || len(sent[0].GetEngineChecks().GetChecks()) != 2 {
		t.Fatalf("sent %v, want one EngineChecks message with two checks", sent)
	}
	checks := sent[0].GetEngineChecks().GetChecks()
	if c := checks[0]; c.GetEngine() != "llamacpp" || c.GetOk() || c.GetPath() != llama ||
		c.GetError() != "llama-server cannot start: libgomp.so.1: cannot open shared object file: No such file or directory" || len(c.GetLastOutput()) != 1 {
		t.Errorf("llamacpp check = %v", c)
	}
	if c := checks[1]; c.GetEngine() != "sim" || !c.GetOk() || c.GetVersion() != "llmgw sim-engine version test" {
		t.Errorf("sim check = %v", c)
	}
	if len(a.checks) != 2 || !maps.Equal(a.checkedFor, map[string]string{"llamacpp": llama, "sim": self}) {
		t.Errorf("kept %v for %v", a.checks, a.checkedFor)
	}

	noop := func(*agentv1.AgentMessage) error { return nil }
	same := specpb.DeclarationToProto(spec.Declaration{Engines: map[string]string{"llamacpp": llama}, Labels: map[string]string{"zone": "eu"}})
	if err := a.redeclare(context.Background(), same, noop); err != nil {
		t.Fatal(err)
	}
	if len(a.recheck) != 0 {
		t.Error("a declaration with the same engines asked for a new check")
	}
	other := specpb.DeclarationToProto(spec.Declaration{Engines: map[string]string{"llamacpp": "/opt/llama.cpp/llama-server"}})
	if err := a.redeclare(context.Background(), other, noop); err != nil {
		t.Fatal(err)
	}
	if len(a.recheck) != 1 {
		t.Error("a declaration with another llama-server asked for no check")
	}
}

// TestEnginePortsNotShared: shards starting together never get the same
// port, although none has bound its port yet; a full range says so.
func TestEnginePortsNotShared(t *testing.T) {
	base := fourFreePorts(t)
	a := &Agent{cfg: agentconfig.Agent{EnginePorts: agentconfig.PortRange{From: base, To: base + 3}},
		shards: map[string]*shardState{}, log: slog.New(slog.DiscardHandler)}
	seen := map[int]string{}
	for i := range 4 {
		id := fmt.Sprintf("s%d", i)
		a.shards[id] = &shardState{}
		port, err := a.enginePort(id, "127.0.0.1")
		if err != nil {
			t.Fatalf("shard %s: %v", id, err)
		}
		if other, dup := seen[port]; dup {
			t.Fatalf("port %d handed to %s and %s", port, other, id)
		}
		seen[port] = id
	}
	a.shards["s4"] = &shardState{}
	if _, err := a.enginePort("s4", "127.0.0.1"); err == nil {
		t.Error("a fifth shard got a port from a range of four held ports")
	}
	// A stopped shard's ports are free again.
	delete(a.shards, "s0")
	if _, err := a.enginePort("s4", "127.0.0.1"); err != nil {
		t.Errorf("after s0 went: %v", err)
	}
}

// fourFreePorts finds four consecutive loopback ports nothing listens on
// (other tests on the machine take ephemeral ports all the time, so a
// free first port says nothing of the next three).
func fourFreePorts(t *testing.T) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		base := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if base > 65000 {
			continue
		}
		free := true
		for off := 0; off < 4 && free; off++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+off))
			if err != nil {
				free = false
				continue
			}
			l.Close()
		}
		if free {
			return base
		}
	}
	t.Fatal("no four consecutive free loopback ports")
	return 0
}

// A Restamp gives a shard the replica generation it reports from then on,
// its model generation unchanged; one for a shard the agent does not run is
// ignored.
func TestRestampShard(t *testing.T) {
	a := &Agent{log: slog.New(slog.DiscardHandler), shards: map[string]*shardState{
		"r-1-0": {status: &agentv1.ShardStatus{ShardId: "r-1-0", ModelGeneration: "legacy"}},
	}}
	a.restamp("r-1-0", "g2")
	a.restamp("r-9-0", "g2")
	a.mu.Lock()
	defer a.mu.Unlock()
	if st := a.shardStatusesLocked(); len(st) != 1 || st[0].GetReplicaGeneration() != "g2" || st[0].GetModelGeneration() != "legacy" {
		t.Fatalf("statuses after a restamp = %v, want r-1-0 reporting replica generation g2 and its model generation as it was", st)
	}
}
