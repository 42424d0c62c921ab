package manage

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	specv1 "github.com/llmgw/llmgw/api/specv1"
)

// TestStaleStatusAndRollout: a profile edit leaves the running replica
// stale: the model's status counts it and says what happens to it, by the
// model's rollout policy; RolloutModel names it.
func TestStaleStatusAndRollout(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	m := &managev1.Model{Name: "coder", Source: "sim://x", Scaling: &managev1.Scaling{Min: 1, Max: 1}, Rollout: "manual",
		Profiles: []*specv1.Profile{{Name: "a100", Engine: "sim", GpuClass: "a100-80g", Tp: 1, StartupTimeout: "2m"}}}
	if _, err := s.CreateModel(ctx, &managev1.CreateModelRequest{Model: m}); err != nil {
		t.Fatal(err)
	}
	s.opts.Reconciler.Pass()
	got, err := s.GetModel(ctx, &managev1.GetModelRequest{Name: "coder"})
	if err != nil || got.GetStatus().GetReplicasTotal() != 1 || got.GetStatus().GetReplicasStale() != 0 || got.GetStatus().GetRollout() != "manual" || got.GetRollout() != "manual" {
		t.Fatalf("after placement: %v, %v", got.GetStatus(), err)
	}
	m.Profiles[0].Args = []string{"--decode-tps", "99"}
	if _, err := s.UpdateModel(ctx, &managev1.UpdateModelRequest{Model: m}); err != nil {
		t.Fatal(err)
	}
	s.opts.Reconciler.Pass()
	got, _ = s.GetModel(ctx, &managev1.GetModelRequest{Name: "coder"})
	st := got.GetStatus()
	if st.GetReplicasStale() != 1 || st.GetReplicasTotal() != 1 || !strings.Contains(st.GetMessage(), "rollout is manual: run llmgw ctl rollout coder") {
		t.Fatalf("after a profile edit with rollout manual: %v", st)
	}
	list, _ := s.ListModels(ctx, &managev1.ListModelsRequest{})
	for _, lm := range list.GetModels() {
		if lm.GetName() == "coder" && lm.GetStatus().GetReplicasStale() != 1 {
			t.Errorf("ListModels: stale %d, want 1", lm.GetStatus().GetReplicasStale())
		}
	}
	res, err := s.RolloutModel(ctx, &managev1.RolloutModelRequest{Name: "coder"})
	if err != nil || len(res.GetReplicas()) != 1 {
		t.Fatalf("RolloutModel = %v, %v; want the stale replica", res, err)
	}
	if _, err := s.RolloutModel(ctx, &managev1.RolloutModelRequest{Name: "nope"}); code(err) != codes.NotFound {
		t.Fatalf("RolloutModel(nope) = %v", err)
	}
	m.Rollout = "sometimes"
	if _, err := s.UpdateModel(ctx, &managev1.UpdateModelRequest{Model: m}); code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `rollout: must be "auto" or "manual", got "sometimes"`) {
		t.Fatalf("a bad rollout policy: %v", err)
	}
}
