package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/api/specpb"
	"github.com/llmgw/llmgw/spec"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

// TestRoutingEditRestartsNothing runs real processes: editing a profile's
// weight and priority through the management API keeps the model's
// generation, its replica and the engine process (same pid); editing its tp
// then rolls it, the replacement placed while the old replica still serves.
func TestRoutingEditRestartsNothing(t *testing.T) {
	c := testcluster.New(t, binary, "10s", "")
	agent := c.StartAgent(testcluster.NodeSpec{ID: "node01"})
	mc := c.ManageClient()
	ctx := context.Background()
	m := spec.Model{Name: "sim-weighted", Source: "sim://weighted", Scaling: spec.Scaling{Min: 1, Max: 1},
		Profiles: []spec.Profile{{Name: "h100", Engine: "sim", GPUClass: "h100-80g", TP: 1, StartupTimeout: spec.Duration(time.Minute)}}}
	created, err := mc.CreateModel(ctx, &managev1.CreateModelRequest{Model: specpb.ModelToProto(m)})
	if err != nil {
		t.Fatal(err)
	}
	gen := created.GetGeneration()
	readyOf := func(generation string) (string, string) {
		rs, err := mc.ListReplicas(ctx, &managev1.ListReplicasRequest{Model: m.Name})
		if err != nil {
			return "", err.Error()
		}
		var states []string
		for _, r := range rs.GetReplicas() {
			states = append(states, r.GetId()+"="+r.GetState()+"@"+r.GetModelGeneration())
			if r.GetState() == "ready" && r.GetModelGeneration() == generation {
				return r.GetId(), ""
			}
		}
		return "", strings.Join(states, "; ")
	}
	var replica string
	testcluster.WaitFor(t, "the replica ready", 60*time.Second, func() (bool, string) {
		id, why := readyOf(gen)
		replica = id
		return id != "", why
	})
	engines := childEngines(t, agent.Cmd.Process.Pid, m.Name)
	if len(engines) != 1 {
		t.Fatalf("engines of %s: %v, want one", m.Name, engines)
	}

	m.Profiles[0].Weight, m.Profiles[0].Priority = 5, 10
	updated, err := mc.UpdateModel(ctx, &managev1.UpdateModelRequest{Model: specpb.ModelToProto(m)})
	if err != nil {
		t.Fatal(err)
	}
	if got := updated.GetGeneration(); got != gen {
		t.Fatalf("a weight and priority edit changed the generation %s → %s: the replica would roll", gen, got)
	}
	// Several reconcile passes (one a second at least) see the edit.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if id, why := readyOf(gen); id != replica {
			t.Fatalf("after the weight edit the ready replica is %q (%s), want %s kept", id, why, replica)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if now := childEngines(t, agent.Cmd.Process.Pid, m.Name); !slices.Equal(now, engines) {
		t.Fatalf("engine pids %v after the weight edit, want %v: the engine was restarted", now, engines)
	}
	if n := strings.Count(c.Server.Output(), "replica placed"); n != 1 {
		t.Fatalf("%d placements after a weight edit, want 1:\n%s", n, testcluster.Tail(c.Server.Output(), 20))
	}

	m.Profiles[0].TP = 2
	updated, err = mc.UpdateModel(ctx, &managev1.UpdateModelRequest{Model: specpb.ModelToProto(m)})
	if err != nil {
		t.Fatal(err)
	}
	next := updated.GetGeneration()
	if next == gen {
		t.Fatal("a tp edit kept the generation: the replica would not roll")
	}
	var replacement string
	testcluster.WaitFor(t, "the replacement ready", 60*time.Second, func() (bool, string) {
		id, why := readyOf(next)
		replacement = id
		return id != "", why
	})
	if replacement == replica {
		t.Fatalf("the tp edit kept replica %s", replica)
	}
	testcluster.WaitFor(t, "the old engine stopped", 30*time.Second, func() (bool, string) {
		now := childEngines(t, agent.Cmd.Process.Pid, m.Name)
		return len(now) == 1 && !slices.Contains(now, engines[0]), fmt.Sprintf("engines %v (old %d)", now, engines[0])
	})
}
