package manage

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/models"
	"github.com/llmgw/llmgw/runtime/reconcile"
	"github.com/llmgw/llmgw/spec"
)

// TestDrainRefusedWhenNothingCanMove: the only node's replica has nowhere
// to go, so DrainNode refuses at once naming it and why; forced, the node
// drains, GetNode says why it cannot finish and the model counts the
// replica as waiting, with the reason in its status.
func TestDrainRefusedWhenNothingCanMove(t *testing.T) {
	ctx := context.Background()
	m := spec.Model{Name: "m1", Source: "sim://x", Scaling: spec.Scaling{Min: 1, Max: 1},
		Profiles: []spec.Profile{{Name: "a100", Engine: "sim", GPUClass: "a100-80g", TP: 1}}}
	reg, err := models.New([]spec.Model{m}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := fleet.New()
	inv := &agentv1.Inventory{Engines: []*agentv1.EngineStatus{{Engine: "sim", Available: true}}, Avx2: true, MemoryAvailableBytes: 64 << 30,
		Gpus: []*agentv1.GPU{{Index: 0, Class: "a100-80g"}}}
	f.Connect(&agentv1.Hello{Inventory: inv}, "node01", nil, false, nopConn{})
	rec := reconcile.New(reconcile.Options{Fleet: f, Catalog: reg, StallAfter: time.Nanosecond})
	s := New(Options{Version: "test", Fleet: f, Catalog: reg, Reconciler: rec})
	rec.Pass()
	reps, _ := s.ListReplicas(ctx, &managev1.ListReplicasRequest{Model: "m1"})
	if len(reps.GetReplicas()) != 1 {
		t.Fatalf("replicas = %v, want one", reps)
	}
	id := reps.GetReplicas()[0].GetId()

	// Issue 18: explain-placement of a serving model says in its first line
	// that it answers for one more replica, not "not placed".
	ex, err := s.ExplainPlacement(ctx, &managev1.ExplainPlacementRequest{Model: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(ex.GetText(), "\n"); first != "model m1 (1 replica running): one more replica would not place (1 profile tried); this says nothing against those running" {
		t.Errorf("explain-placement's first line = %q", first)
	}

	_, err = s.DrainNode(ctx, &managev1.DrainNodeRequest{Name: "node01"})
	if code(err) != codes.FailedPrecondition {
		t.Fatalf("DrainNode = %v, want FailedPrecondition", err)
	}
	for _, want := range []string{"node node01 cannot be drained", "replica " + id + " of model m1 (on node01) cannot move", "node01: not ready: draining", "with force"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("DrainNode error %q lacks %q", err, want)
		}
	}
	if n, _ := s.GetNode(ctx, &managev1.GetNodeRequest{Id: "node01"}); n.GetDraining() {
		t.Fatal("a refused drain left the node draining")
	}

	resp, err := s.DrainNode(ctx, &managev1.DrainNodeRequest{Name: "node01", Force: true})
	if err != nil || resp.GetReplicas() != 1 || len(resp.GetBlocked()) != 1 || !strings.Contains(resp.GetBlocked()[0], id) {
		t.Fatalf("forced DrainNode = %v, %v; want 1 replica, blocked naming %s", resp, err, id)
	}
	rec.Pass()
	n, _ := s.GetNode(ctx, &managev1.GetNodeRequest{Id: "node01"})
	if !n.GetDraining() || !strings.Contains(n.GetDrainBlocked(), "replica "+id+" of model m1") {
		t.Errorf("node = draining %v, drain_blocked %q; want the replica named", n.GetDraining(), n.GetDrainBlocked())
	}
	pm, _ := s.GetModel(ctx, &managev1.GetModelRequest{Name: "m1"})
	if st := pm.GetStatus(); st.GetReplicasOutdated() != 1 || !strings.Contains(st.GetStalled(), "cannot be placed") || !strings.Contains(st.GetStalled(), id+" (on a draining node") {
		t.Errorf("status = %v; want 1 outdated replica and the stall naming it", st)
	}

	if _, err := s.DrainNode(ctx, &managev1.DrainNodeRequest{Name: "node01", Cancel: true}); err != nil {
		t.Fatal(err)
	}
	rec.Pass()
	if n, _ := s.GetNode(ctx, &managev1.GetNodeRequest{Id: "node01"}); n.GetDrainBlocked() != "" {
		t.Errorf("drain_blocked after cancel = %q", n.GetDrainBlocked())
	}
	if _, err := s.DrainNode(ctx, &managev1.DrainNodeRequest{Name: "node09"}); code(err) != codes.NotFound {
		t.Errorf("DrainNode(node09) = %v, want NotFound", err)
	}
}
