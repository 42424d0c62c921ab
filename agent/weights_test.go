package agent

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	agentconfig "github.com/llmgw/llmgw/agent/config"
	"github.com/llmgw/llmgw/agent/fetch"
	agentv1 "github.com/llmgw/llmgw/api/agentv1"
)

func seed(t *testing.T, dir, source string) {
	t.Helper()
	e := filepath.Join(dir, fetch.Key(source))
	if err := os.MkdirAll(e, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e, "w.gguf"), []byte(source), 0o640); err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(map[string]any{"source": source, "files": []map[string]any{{"path": "w.gguf", "size": len(source)}}})
	if err := os.WriteFile(filepath.Join(e, fetch.CompleteFile), rec, 0o640); err != nil {
		t.Fatal(err)
	}
}

// TestCollectSparesLiveShards: whatever the control plane says to keep,
// the node never deletes the weights of a shard it runs or starts; a
// stopped or failed shard protects nothing; a partial download no fetch
// writes goes by the same rules, reported as a partial; a dry run deletes
// nothing; the answer carries the cache as it is afterwards.
func TestCollectSparesLiveShards(t *testing.T) {
	state := t.TempDir()
	cfg := agentconfig.Agent{StateDir: state}
	cache, err := fetch.New(fetch.Options{Dir: cfg.WeightsPath(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	src := map[string]string{}
	for _, n := range []string{"kept", "starting", "ready", "stopped", "failed", "unused"} {
		src[n] = "http://mirror:8081/" + n + "/v1/w.gguf"
		seed(t, cfg.WeightsPath(), src[n])
	}
	a := &Agent{cfg: cfg, weights: cache, log: slog.New(slog.DiscardHandler), shards: map[string]*shardState{
		"s1": {source: src["starting"], status: &agentv1.ShardStatus{State: agentv1.ShardState_SHARD_STATE_STARTING}},
		"s2": {source: src["ready"], status: &agentv1.ShardStatus{State: agentv1.ShardState_SHARD_STATE_READY}},
		"s3": {source: src["stopped"], status: &agentv1.ShardStatus{State: agentv1.ShardState_SHARD_STATE_STOPPED}},
		"s4": {source: src["failed"], status: &agentv1.ShardStatus{State: agentv1.ShardState_SHARD_STATE_FAILED}},
	}}
	// Partial downloads no fetch writes: one of a running shard's source
	// (kept), one of a source nothing wants any more (collected).
	src["orphan"] = "http://mirror:8081/orphan/v1/w.gguf"
	partialOf := func(source string) string {
		return filepath.Join(cfg.WeightsPath(), "."+fetch.Key(source)+".partial")
	}
	for _, s := range []string{src["ready"], src["orphan"]} {
		if err := os.MkdirAll(partialOf(s), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(partialOf(s), ".source"), []byte(s+"\n"), 0o640); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(partialOf(s), ".w.gguf.partial"), []byte("half"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	keep := []string{fetch.Key(src["kept"])}
	removedKeys := func(ans *agentv1.WeightsCollected) []string {
		var out []string
		for _, e := range ans.GetRemoved() {
			out = append(out, e.GetSource())
		}
		slices.Sort(out)
		return out
	}
	want := []string{src["failed"], src["stopped"], src["unused"], src["orphan"]}
	slices.Sort(want)
	dry := a.collect(&agentv1.CollectWeights{RequestId: "r1", KeepKeys: keep, DryRun: true})
	if got := removedKeys(dry); !slices.Equal(got, want) || len(dry.GetCache().GetEntries()) != 6 || dry.GetRequestId() != "r1" {
		t.Fatalf("dry run: removed %v, cache %d entries; want %v and all 6 left", got, len(dry.GetCache().GetEntries()), want)
	}
	ans := a.collect(&agentv1.CollectWeights{RequestId: "r2", KeepKeys: keep})
	if got := removedKeys(ans); !slices.Equal(got, want) || len(ans.GetErrors()) != 0 {
		t.Fatalf("removed %v (errors %v), want %v", got, ans.GetErrors(), want)
	}
	for _, e := range ans.GetRemoved() {
		if e.GetPartial() != (e.GetSource() == src["orphan"]) || (e.GetPartial() && e.GetSizeBytes() != 4) {
			t.Errorf("removed %+v: only the orphaned partial (4 bytes) is a partial", e)
		}
	}
	if _, err := os.Stat(partialOf(src["ready"])); err != nil {
		t.Errorf("the partial of a running shard's source was collected: %v", err)
	}
	if _, err := os.Stat(partialOf(src["orphan"])); !os.IsNotExist(err) {
		t.Errorf("the orphaned partial is still there: %v", err)
	}
	var left []string
	for _, e := range ans.GetCache().GetEntries() {
		left = append(left, e.GetSource())
	}
	slices.Sort(left)
	wantLeft := []string{src["kept"], src["ready"], src["starting"]}
	slices.Sort(wantLeft)
	if !slices.Equal(left, wantLeft) {
		t.Errorf("cache after: %v, want %v", left, wantLeft)
	}
}
