package agent

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/llmgw/llmgw/agent/driver"
	"github.com/llmgw/llmgw/agent/supervisor"
	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/spec"
)

// sleepDriver runs one long sleep and serves nothing.
type sleepDriver struct{}

func (sleepDriver) Name() string { return "sleep" }
func (sleepDriver) Commands(driver.ShardSpec) ([]driver.Command, error) {
	return []driver.Command{{Path: "/bin/sh", Args: []string{"-c", "exec sleep 60"}}}, nil
}
func (sleepDriver) HealthPath() string                          { return "/health" }
func (sleepDriver) ServesHTTP(int) bool                         { return false }
func (sleepDriver) CheckCommand(string) (driver.Command, error) { return driver.Command{}, nil }
func (sleepDriver) HelpCommands(string) []driver.Command        { return nil }

// TestRecordStampWritesNewest: what launch or restamp writes to a shard's
// state file is the stamp the shard reports when it writes, not one it
// read before (a launch that read g1 while a Restamp brought g2 leaves
// g2); a shard stopped meanwhile is not written to.
func TestRecordStampWritesNewest(t *testing.T) {
	dir := t.TempDir()
	sup := supervisor.New(slog.New(slog.DiscardHandler), dir)
	t.Cleanup(func() {
		if err := sup.StopAll(2 * time.Second); err != nil {
			t.Errorf("StopAll: %v", err)
		}
	})
	ss := driver.ShardSpec{ShardID: "r-1-0", ReplicaID: "r-1", Model: "m", Source: "/m", Host: "127.0.0.1",
		ReplicaGeneration: "g1", Profile: spec.Profile{Engine: "sleep", StartupTimeout: spec.Duration(time.Minute)}}
	sh, err := sup.Start(context.Background(), ss, sleepDriver{})
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{log: slog.New(slog.DiscardHandler), shards: map[string]*shardState{
		"r-1-0": {shard: sh, status: &agentv1.ShardStatus{ShardId: "r-1-0", ReplicaGeneration: "g2"}},
	}}
	a.recordStamp("r-1-0", sh, "g1") // launch, which started it with g1
	if got := sh.Spec().ReplicaGeneration; got != "g2" {
		t.Fatalf("recorded stamp = %q, want g2 (the newest)", got)
	}
	a.mu.Lock()
	delete(a.shards, "r-1-0") // StopShard
	a.mu.Unlock()
	a.restamp("r-1-0", "g3")
	a.recordStamp("r-1-0", sh, "g2")
	if got := sh.Spec().ReplicaGeneration; got != "g2" {
		t.Fatalf("recorded stamp of a stopped shard = %q, want g2 left alone", got)
	}
}

// TestRecordStampRacingRestamps: a Restamp that lands while launch
// records the stamp it started the shard with, between launch's read of
// the stamp and its write (forced there by beforeStampWrite), is not
// undone by launch's write: the newest stamp is left in the shard's state
// file and in the supervisor's record. It fails when recordStamp does not
// read the stamp again after its write (review-session4c L2: the earlier
// version raced two goroutines and could only fail under -race).
func TestRecordStampRacingRestamps(t *testing.T) {
	dir := t.TempDir()
	sup := supervisor.New(slog.New(slog.DiscardHandler), dir)
	t.Cleanup(func() {
		if err := sup.StopAll(2 * time.Second); err != nil {
			t.Errorf("StopAll: %v", err)
		}
	})
	const id = "r-1-0"
	ss := driver.ShardSpec{ShardID: id, ReplicaID: "r-1", Model: "m", Source: "/m", Host: "127.0.0.1",
		ReplicaGeneration: "g0", Profile: spec.Profile{Engine: "sleep", StartupTimeout: spec.Duration(time.Minute)}}
	sh, err := sup.Start(context.Background(), ss, sleepDriver{})
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{log: slog.New(slog.DiscardHandler), shards: map[string]*shardState{
		id: {shard: sh, status: &agentv1.ShardStatus{ShardId: id, ReplicaGeneration: "g1"}},
	}}
	var seen []string
	a.beforeStampWrite = func(_, g string) {
		seen = append(seen, g)
		if len(seen) == 1 { // launch read g1 and is about to write it
			a.restamp(id, "g2")
		}
	}
	a.recordStamp(id, sh, "g0") // launch, which started the shard with g0
	if len(seen) < 2 || seen[0] != "g1" || seen[1] != "g2" {
		t.Fatalf("writes %q: want launch's g1 with the Restamp to g2 landing before it", seen)
	}
	b, err := os.ReadFile(filepath.Join(dir, id+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Spec driver.ShardSpec `json:"spec"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	if st.Spec.ReplicaGeneration != "g2" || sh.Spec().ReplicaGeneration != "g2" {
		t.Fatalf("the state file says %q, the supervisor %q, after a Restamp to g2 landed inside launch's write of g1: want g2", st.Spec.ReplicaGeneration, sh.Spec().ReplicaGeneration)
	}
}
