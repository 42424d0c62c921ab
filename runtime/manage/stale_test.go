package manage

import (
	"context"
	"strings"
	"testing"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/models"
	"github.com/llmgw/llmgw/runtime/reconcile"
	"github.com/llmgw/llmgw/spec"
)

// TestStaleIsPerProfile: ListReplicas marks a replica stale, and the
// model's status counts it, only when its own profile's build fields
// changed: adding a profile and pricing leave it current; an edit of its
// own profile's args makes it stale, with the rollout message. A client of
// an earlier release, comparing model_generation with the model's
// generation, reads the same.
func TestStaleIsPerProfile(t *testing.T) {
	ctx := context.Background()
	reg, err := models.New(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := spec.Model{Name: "m1", Source: "sim://x", Rollout: spec.RolloutManual, Scaling: spec.Scaling{Min: 1, Max: 1},
		Profiles: []spec.Profile{{Name: "cpu", Engine: "sim"}}}
	if _, err := reg.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	f := fleet.New()
	connectSimNode(f, "node01")
	rec := reconcile.New(reconcile.Options{Fleet: f, Catalog: reg})
	s := New(Options{Version: "test", Fleet: f, Catalog: reg, Reconciler: rec})
	rec.Pass()
	check := func(when string, wantStale bool) {
		t.Helper()
		reps, _ := s.ListReplicas(ctx, &managev1.ListReplicasRequest{Model: "m1"})
		if len(reps.GetReplicas()) != 1 || reps.GetReplicas()[0].GetStale() != wantStale {
			t.Fatalf("%s: replicas = %v, want one with stale %v", when, reps.GetReplicas(), wantStale)
		}
		pm, _ := s.GetModel(ctx, &managev1.GetModelRequest{Name: "m1"})
		// A client of an earlier release tells a stale replica by its
		// model_generation differing from the model's generation.
		rep := reps.GetReplicas()[0]
		if oldStale := rep.GetModelGeneration() != pm.GetGeneration(); oldStale != wantStale || rep.GetReplicaGeneration() == "" {
			t.Fatalf("%s: model_generation %q against the model's %q (replica_generation %q): stale by the earlier contract %v, want %v",
				when, rep.GetModelGeneration(), pm.GetGeneration(), rep.GetReplicaGeneration(), oldStale, wantStale)
		}
		st := pm.GetStatus()
		if got := st.GetReplicasStale() == 1; got != wantStale || strings.Contains(st.GetMessage(), "stale profile") != wantStale {
			t.Fatalf("%s: status = %v, want stale %v", when, st, wantStale)
		}
	}
	check("placed", false)
	m.Profiles = append(m.Profiles, spec.Profile{Name: "big", Engine: "sim", Args: []string{"--x"}})
	m.Pricing = &spec.Pricing{PromptPer1K: 2}
	if _, err := reg.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	check("a profile and pricing added", false)
	m.Profiles[0].Args = []string{"--decode-tps", "9"}
	if _, err := reg.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	check("its own profile's args edited", true)
	resp, err := s.RolloutModel(ctx, &managev1.RolloutModelRequest{Name: "m1"})
	if err != nil || len(resp.GetReplicas()) != 1 {
		t.Fatalf("RolloutModel = %v, %v; want the one stale replica named", resp, err)
	}
}
