package agent

import (
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	agentconfig "github.com/llmgw/llmgw/agent/config"
	"github.com/llmgw/llmgw/agent/declaration"
	agentv1 "github.com/llmgw/llmgw/runtime/api/agentv1"
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
	got := a.engineStatuses(declaration.Declaration{Engines: map[string]string{
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

func TestCommandRecords(t *testing.T) {
	a := &Agent{cfg: agentconfig.Agent{StateDir: t.TempDir()}, shards: map[string]*shardState{}, log: slog.New(slog.DiscardHandler)}
	m := &agentv1.StartShard{ShardId: "r-1-0", ReplicaId: "r-1", Model: "m", Profile: "p", ModelGeneration: "g1", WorldSize: 2, Fabric: "ib-a"}
	if err := a.saveCommand(m); err != nil {
		t.Fatal(err)
	}
	got, err := a.loadCommand("r-1-0")
	if err != nil || !proto.Equal(got, m) {
		t.Fatalf("loaded %v, %v; want %v", got, err, m)
	}
	st := statusFor(got)
	if st.GetProfile() != "p" || st.GetModelGeneration() != "g1" || st.GetWorldSize() != 2 || st.GetFabric() != "ib-a" {
		t.Fatalf("status from the record lacks what the control plane needs to rebuild the replica: %v", st)
	}
	// A record with no running shard is pruned.
	a.pruneCommands()
	if _, err := a.loadCommand("r-1-0"); err == nil {
		t.Fatal("the record of a shard that is not running survived pruning")
	}
}
