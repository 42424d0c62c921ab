package manage

import (
	"context"
	"testing"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/models"
	"github.com/llmgw/llmgw/runtime/reconcile"
	"github.com/llmgw/llmgw/spec"
)

// TestReplicaEngineLoad: ListReplicas gives each replica what its engine
// last said of its load (Options.EngineLoads), and none where it said
// nothing.
func TestReplicaEngineLoad(t *testing.T) {
	ctx := context.Background()
	reg, err := models.New(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Create(ctx, spec.Model{Name: "m1", Source: "sim://x", Scaling: spec.Scaling{Min: 2, Max: 2},
		Profiles: []spec.Profile{{Name: "cpu", Engine: "sim"}}}); err != nil {
		t.Fatal(err)
	}
	f := fleet.New()
	for _, n := range []string{"node01", "node02"} {
		connectSimNode(f, n)
	}
	rec := reconcile.New(reconcile.Options{Fleet: f, Catalog: reg})
	rec.Pass()
	reps := f.Replicas()
	if len(reps) != 2 {
		t.Fatalf("placed %d replicas, want 2", len(reps))
	}
	loaded := reps[0].ID
	s := New(Options{Version: "test", Fleet: f, Catalog: reg, Reconciler: rec, EngineLoads: func() map[string]*managev1.EngineLoad {
		return map[string]*managev1.EngineLoad{loaded: {Running: 3, Waiting: 2, KvCacheUsage: 0.7}}
	}})
	out, err := s.ListReplicas(ctx, &managev1.ListReplicasRequest{Model: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range out.GetReplicas() {
		l := r.GetEngineLoad()
		switch {
		case r.GetId() == loaded && (l.GetRunning() != 3 || l.GetWaiting() != 2 || l.GetKvCacheUsage() != 0.7):
			t.Errorf("%s: engine_load %v, want running 3, waiting 2, KV 0.7", r.GetId(), l)
		case r.GetId() != loaded && l != nil:
			t.Errorf("%s: engine_load %v, want none (its engine said nothing)", r.GetId(), l)
		}
	}
}
