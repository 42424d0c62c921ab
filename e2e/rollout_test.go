package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	// readyOf is a ready replica built from the current definition (not
	// stale).
	readyOf := func() (string, string) {
		rs, err := mc.ListReplicas(ctx, &managev1.ListReplicasRequest{Model: m.Name})
		if err != nil {
			return "", err.Error()
		}
		var states []string
		for _, r := range rs.GetReplicas() {
			states = append(states, r.GetId()+"="+r.GetState()+"@"+r.GetModelGeneration())
			if r.GetState() == "ready" && !r.GetStale() {
				return r.GetId(), ""
			}
		}
		return "", strings.Join(states, "; ")
	}
	var replica string
	testcluster.WaitFor(t, "the replica ready", 60*time.Second, func() (bool, string) {
		id, why := readyOf()
		replica = id
		return id != "", why
	})
	engines := testcluster.EngineChildren(t, agent.Cmd.Process.Pid, m.Name)
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
	// The reconcile pass that gives the running replica its new weight is
	// the one that would have rolled it.
	weighted := fmt.Sprintf("llmgw_router_replica_weight{model=%q,replica=%q} 5\n", m.Name, replica)
	testcluster.WaitFor(t, "the running replica routed with weight 5", 30*time.Second, func() (bool, string) {
		text, err := scrape(c.MetricsURL())
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(text, weighted), "no " + strings.TrimSpace(weighted)
	})
	if id, why := readyOf(); id != replica {
		t.Fatalf("after the weight edit the ready replica is %q (%s), want %s kept", id, why, replica)
	}
	if now := testcluster.EngineChildren(t, agent.Cmd.Process.Pid, m.Name); !slices.Equal(now, engines) {
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
		id, why := readyOf()
		replacement = id
		return id != "", why
	})
	if replacement == replica {
		t.Fatalf("the tp edit kept replica %s", replica)
	}
	testcluster.WaitFor(t, "the old engine stopped", 30*time.Second, func() (bool, string) {
		now := testcluster.EngineChildren(t, agent.Cmd.Process.Pid, m.Name)
		return len(now) == 1 && !slices.Contains(now, engines[0]), fmt.Sprintf("engines %v (old %d)", now, engines[0])
	})
}

// TestManualRollout runs real processes: a model whose rollout is manual
// keeps its two replicas (and their engines) serving after an args edit,
// shown stale by `ctl models` and `ctl model get`; `ctl rollout` then
// replaces them one at a time, never with fewer than two serving.
func TestManualRollout(t *testing.T) {
	c := testcluster.New(t, binary, "10s", "")
	agent := c.StartAgent(testcluster.NodeSpec{ID: "node01"})
	mc := c.ManageClient()
	ctx := context.Background()
	m := spec.Model{Name: "sim-manual", Source: "sim://manual", Scaling: spec.Scaling{Min: 2, Max: 2}, Rollout: spec.RolloutManual,
		Profiles: []spec.Profile{{Name: "h100", Engine: "sim", GPUClass: "h100-80g", TP: 1, StartupTimeout: spec.Duration(time.Minute)}}}
	created, err := mc.CreateModel(ctx, &managev1.CreateModelRequest{Model: specpb.ModelToProto(m)})
	if err != nil {
		t.Fatal(err)
	}
	// ready counts the ready replicas, current and stale.
	ready := func() (map[string]int, string) {
		rs, err := mc.ListReplicas(ctx, &managev1.ListReplicasRequest{Model: m.Name})
		if err != nil {
			return nil, err.Error()
		}
		out := map[string]int{}
		var states []string
		for _, r := range rs.GetReplicas() {
			states = append(states, r.GetId()+"="+r.GetState()+"@"+r.GetModelGeneration())
			if r.GetState() == "ready" {
				out[staleKey(r)]++
			}
		}
		return out, strings.Join(states, "; ")
	}
	testcluster.WaitFor(t, "two replicas ready", 60*time.Second, func() (bool, string) {
		n, why := ready()
		return n["current"] == 2, why
	})
	engines := testcluster.EngineChildren(t, agent.Cmd.Process.Pid, m.Name)
	// placed lists the replicas not in original, in any state: a
	// replacement counts from the pass that placed it (starting), not from
	// when its engine is up, and one stopped or failed since was placed
	// all the same.
	original := map[string]bool{}
	rs, err := mc.ListReplicas(ctx, &managev1.ListReplicasRequest{Model: m.Name})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs.GetReplicas() {
		original[r.GetId()] = true
	}
	placed := func() []string {
		rs, err := mc.ListReplicas(ctx, &managev1.ListReplicasRequest{Model: m.Name})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range rs.GetReplicas() {
			if !original[r.GetId()] {
				ids = append(ids, r.GetId()+"="+r.GetState())
			}
		}
		return ids
	}

	m.Profiles[0].Args = []string{"--decode-tps", "500"}
	updated, err := mc.UpdateModel(ctx, &managev1.UpdateModelRequest{Model: specpb.ModelToProto(m)})
	if err != nil {
		t.Fatal(err)
	}
	if updated.GetGeneration() == created.GetGeneration() {
		t.Fatal("an args edit kept the generation")
	}
	// Of the two passes completed after the edit was stored, the second
	// began after it: a replacement it would place is listed by then.
	c.AwaitPasses(t, 2, 30*time.Second)
	if n, why := ready(); n["stale"] != 2 || n["current"] != 0 {
		t.Fatalf("rollout manual: after the edit %s, want the two old replicas only", why)
	}
	if ids := placed(); len(ids) != 0 {
		t.Fatalf("rollout manual: after the edit replicas %v were placed, want none before ctl rollout", ids)
	}
	if now := testcluster.EngineChildren(t, agent.Cmd.Process.Pid, m.Name); !slices.Equal(now, engines) {
		t.Fatalf("engines %v after the edit, want %v untouched", now, engines)
	}
	if out := runCtlE2E(t, c, "models"); !strings.Contains(out, "serving (2 stale)") || !strings.Contains(out, "ctl rollout sim-manual") {
		t.Errorf("ctl models does not show the stale replicas:\n%s", out)
	}
	if out := runCtlE2E(t, c, "model", "get", m.Name); !strings.Contains(out, "2 stale), rollout manual") {
		t.Errorf("ctl model get does not show the stale replicas:\n%s", out)
	}

	if out := runCtlE2E(t, c, "rollout", m.Name); !strings.Contains(out, "replacing 2 stale replicas one at a time") {
		t.Fatalf("ctl rollout:\n%s", out)
	}
	testcluster.WaitFor(t, "both replicas replaced", 90*time.Second, func() (bool, string) {
		n, why := ready()
		if n["stale"]+n["current"] < 2 {
			t.Fatalf("fewer than two replicas ready during the rollout: %s", why)
		}
		return n["current"] == 2 && n["stale"] == 0, why
	})
	if n := strings.Count(c.Server.Output(), "replica placed"); n != 4 {
		t.Errorf("%d placements, want 4 (two, then one replacement each)", n)
	}
}

// staleKey is "stale" for a replica the control plane calls stale,
// "current" otherwise.
func staleKey(r *managev1.Replica) string {
	if r.GetStale() {
		return "stale"
	}
	return "current"
}

// runCtlE2E runs `llmgw ctl` against the cluster and returns its output.
func runCtlE2E(t *testing.T, c *testcluster.Cluster, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"ctl"}, args...)...)
	cmd.Env = append(os.Environ(), "LLMGW_ENDPOINT="+c.Manage, "LLMGW_TOKEN="+c.Token, "LLMGW_CA_CERT="+filepath.Join(c.PKIDir, "ca.pem"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("llmgw ctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
