package provider

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
	"google.golang.org/grpc"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/api/specpb"
	"github.com/llmgw/llmgw/spec"
)

// planManage answers the two calls planRollout makes: the model's replicas
// and a dry run placing on node02 a replacement for each replica it holds
// stale (Replica.stale) or the requested definition makes stale (by
// spec.Stale, the control plane's rule).
type planManage struct {
	managev1.ManageServiceClient
	reps []*managev1.Replica
}

func (f *planManage) ListReplicas(context.Context, *managev1.ListReplicasRequest, ...grpc.CallOption) (*managev1.ListReplicasResponse, error) {
	return &managev1.ListReplicasResponse{Replicas: f.reps}, nil
}

func (f *planManage) PlanPlacement(_ context.Context, req *managev1.PlanPlacementRequest, _ ...grpc.CallOption) (*managev1.Explanation, error) {
	m, err := specpb.ModelFromProto(req.GetModel())
	if err != nil {
		return nil, err
	}
	ex := &managev1.Explanation{Placed: true, Profile: "a"}
	for _, rep := range f.reps {
		if rep.GetStale() || spec.Stale(m, rep.GetProfile(), rep.GetReplicaGeneration()) {
			ex.Rollout = append(ex.Rollout, &managev1.PlannedReplica{Replaces: rep.GetId(), Placed: true, Profile: "a", Summary: "placed on node02 (gpu 0)"})
		}
	}
	return ex, nil
}

// planFor runs planRollout of changing old into m against reps and returns
// rollout_plan and the warnings' summaries.
func planFor(t *testing.T, f *planManage, old, m spec.Model) (string, []string) {
	t.Helper()
	ctx := context.Background()
	r := &modelResource{client: &Client{manage: f}}
	var sr resource.SchemaResponse
	r.Schema(ctx, resource.SchemaRequest{}, &sr)
	resp := &resource.ModifyPlanResponse{Plan: tfsdk.Plan{Schema: sr.Schema, Raw: tftypes.NewValue(sr.Schema.Type().TerraformType(ctx), nil)}}
	if _, err := r.planRollout(ctx, resp, m, old, true, true); err != nil {
		t.Fatal(err)
	}
	var text string
	resp.Diagnostics.Append(resp.Plan.GetAttribute(ctx, path.Root("rollout_plan"), &text)...)
	if resp.Diagnostics.HasError() {
		t.Fatal(resp.Diagnostics)
	}
	var warnings []string
	for _, d := range resp.Diagnostics.Warnings() {
		warnings = append(warnings, d.Summary()+": "+d.Detail())
	}
	return text, warnings
}

// TestPlanRolloutPolicyChange: setting rollout from manual to auto
// releases the replica the manual rollout held stale, which the control
// plane then replaces (TestRolloutOneAtATime/manual_then_auto in
// runtime/reconcile): the plan names it as replaced and warns, alone or
// with one the same change makes stale. Setting it from auto to manual
// replaces nothing and names the stale replica it holds, and the
// replicas not ready yet (a replacement, one scaling.min adds) that the
// control plane then stops as surplus (TestRolloutOneAtATime/auto_then_manual). A change that makes replicas
// stale names those already stale before it too, whatever the policy; a
// change that keeps the policy and the build lists no replica.
func TestPlanRolloutPolicyChange(t *testing.T) {
	manual, auto, autoEdited := rolloutModels("--z") // manual: edited since r-held was placed; the rollout is held
	placed := manual.Clone()
	placed.Profiles[0].Args = []string{"--y"}
	placed.Normalize()
	manualEdited := autoEdited.Clone()
	manualEdited.Rollout = spec.RolloutManual
	manualOutput := manual.Clone()
	manualOutput.MaxOutput = 512
	reps := []*managev1.Replica{
		{Id: "r-held", Profile: "a", State: "ready", Stale: true, ReplicaGeneration: spec.ReplicaGeneration(placed, "a"), Shards: shardOn("node01")},
		{Id: "r-current", Profile: "a", State: "ready", ReplicaGeneration: spec.ReplicaGeneration(manual, "a"), Shards: shardOn("node03")},
	}
	// An auto rollout under way: r-next replaces r-held, not ready yet.
	rolling := append(slices.Clone(reps), &managev1.Replica{Id: "r-next", Profile: "a", State: "starting", ReplicaGeneration: spec.ReplicaGeneration(manual, "a"), Shards: shardOn("node02")})
	// And a replica scaling.min adds, not ready yet either.
	scaling := append(slices.Clone(rolling), &managev1.Replica{Id: "r-up", Profile: "a", State: "starting", ReplicaGeneration: spec.ReplicaGeneration(manual, "a"), Shards: shardOn("node04")})
	for _, tt := range []struct {
		name     string
		old, m   spec.Model
		reps     []*managev1.Replica
		want     string
		warnings []string
	}{
		{"manual to auto", manual, auto, reps,
			"rollout manual → auto: replaces 1 running replica the manual rollout held stale (r-held on node01 (gpu 0)), each replacement ready before the replica it replaces stops; " +
				"expected: r-held's replacement with profile a, placed on node02 (gpu 0)",
			[]string{"Model m: 1 running replica will be replaced: The planned change (rollout manual → auto) releases the replicas the manual rollout held stale, so the control plane rolls them: rollout manual → auto: replaces 1"}},
		{"manual to auto with an args edit", manual, autoEdited, reps,
			"new generation, rollout manual → auto: replaces 2 running replicas, 1 this change makes stale (r-current on node03 (gpu 0)) and 1 the manual rollout held stale (r-held on node01 (gpu 0)), each replacement ready before the replica it replaces stops; expected: ",
			[]string{"Model m: 2 running replicas will be replaced: The planned change (profile a, rollout manual → auto) changes what some of these replicas' engines are built from and releases the others"}},
		{"auto to manual", auto, manual, reps,
			"no running replica restarts: rollout auto → manual holds 1 running replica already stale before this change (r-held on node01 (gpu 0)), serving the earlier definition until `llmgw ctl rollout m` replaces them",
			nil},
		{"auto to manual mid-rollout", auto, manual, rolling,
			"no running replica restarts: rollout auto → manual holds 1 running replica already stale before this change (r-held on node01 (gpu 0)), serving the earlier definition until `llmgw ctl rollout m` replaces them; " +
				"1 replica not ready yet (r-next on node02 (gpu 0)) is stopped when the model's replicas are enough without it",
			nil},
		{"auto to manual mid-rollout and scale-up", auto, manual, scaling,
			"no running replica restarts: rollout auto → manual holds 1 running replica already stale before this change (r-held on node01 (gpu 0)), serving the earlier definition until `llmgw ctl rollout m` replaces them; " +
				"2 replicas not ready yet (r-next on node02 (gpu 0); r-up on node04 (gpu 0)) are stopped when the model's replicas are enough without them",
			nil},
		{"manual edited again", manual, manualEdited, reps,
			"new generation: 1 running replica (r-current on node03 (gpu 0)) keeps serving the earlier definition, stale, until `llmgw ctl rollout m` replaces them one at a time, each replacement ready first (rollout = manual); " +
				"1 running replica already stale before this change (r-held on node01 (gpu 0)) stays stale, held by the manual rollout; expected: ",
			[]string{"Model m: 1 running replica will be stale: "}},
		{"auto to manual with an args edit", auto, manualEdited, reps,
			"new generation: 1 running replica (r-current on node03 (gpu 0)) keeps serving the earlier definition, stale, until `llmgw ctl rollout m` replaces them one at a time, each replacement ready first (rollout = manual); " +
				"1 running replica already stale before this change (r-held on node01 (gpu 0)) stays stale, held by the manual rollout; expected: ",
			[]string{"Model m: 1 running replica will be stale: "}},
		{"auto edited during a rollout", auto, autoEdited, reps,
			"new generation: replaces 1 running replica (r-current on node03 (gpu 0)), each replacement ready before the replica it replaces stops; " +
				"1 running replica already stale before this change (r-held on node01 (gpu 0)) is replaced by the rollout under way too; expected: ",
			[]string{"Model m: 1 running replica will be replaced: "}},
		{"manual kept", manual, manualOutput, reps, "no running replica restarts (the change keeps what they are built from)", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			text, warnings := planFor(t, &planManage{reps: tt.reps}, tt.old, tt.m)
			if !strings.HasPrefix(text, tt.want) {
				t.Errorf("rollout_plan =\n%s\nwant it to start with\n%s", text, tt.want)
			}
			wantWarnings(t, warnings, tt.warnings)
		})
	}
}

// TestPlanRolloutControlPlaneStale: a replica the control plane holds
// stale (Replica.stale) is stale before the change whatever the provider
// computes from its stamp (here old's own hash: the control plane's
// definition drifted from state, or has a build field newer than this
// provider). Setting rollout from manual to auto names it as replaced;
// from auto to manual, as held stale, a starting one too (not as a
// replica not ready yet stopped as surplus); an args edit under auto, as
// already stale and replaced by the rollout under way, not as this
// change's doing.
func TestPlanRolloutControlPlaneStale(t *testing.T) {
	manual, auto, autoEdited := rolloutModels("--y")
	gen := spec.ReplicaGeneration(manual, "a")
	drifted := &managev1.Replica{Id: "r-drifted", Profile: "a", State: "ready", Stale: true, ReplicaGeneration: gen, Shards: shardOn("node01")}
	current := &managev1.Replica{Id: "r-current", Profile: "a", State: "ready", ReplicaGeneration: gen, Shards: shardOn("node03")}
	starting := &managev1.Replica{Id: "r-starting", Profile: "a", State: "starting", Stale: true, ReplicaGeneration: gen, Shards: shardOn("node02")}
	for _, tt := range []struct {
		name     string
		old, m   spec.Model
		reps     []*managev1.Replica
		want     string
		warnings []string
	}{
		{"manual to auto", manual, auto, []*managev1.Replica{drifted, current},
			"rollout manual → auto: replaces 1 running replica the manual rollout held stale (r-drifted on node01 (gpu 0)), each replacement ready before the replica it replaces stops; expected: ",
			[]string{"Model m: 1 running replica will be replaced: The planned change (rollout manual → auto) releases the replicas the manual rollout held stale"}},
		{"auto to manual", auto, manual, []*managev1.Replica{drifted, current, starting},
			"no running replica restarts: rollout auto → manual holds 2 running replicas already stale before this change (r-drifted on node01 (gpu 0); r-starting on node02 (gpu 0)), serving the earlier definition until `llmgw ctl rollout m` replaces them",
			nil},
		{"auto edited during a rollout", auto, autoEdited, []*managev1.Replica{drifted, current},
			"new generation: replaces 1 running replica (r-current on node03 (gpu 0)), each replacement ready before the replica it replaces stops; " +
				"1 running replica already stale before this change (r-drifted on node01 (gpu 0)) is replaced by the rollout under way too; expected: ",
			[]string{"Model m: 1 running replica will be replaced: "}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			text, warnings := planFor(t, &planManage{reps: tt.reps}, tt.old, tt.m)
			// Without a warning the plan text is all of want; with one,
			// want is its start (the dry run's expectation follows).
			switch {
			case tt.warnings == nil && text != tt.want:
				t.Errorf("rollout_plan =\n%s\nwant exactly\n%s", text, tt.want)
			case tt.warnings != nil && !strings.HasPrefix(text, tt.want):
				t.Errorf("rollout_plan =\n%s\nwant it to start with\n%s", text, tt.want)
			}
			wantWarnings(t, warnings, tt.warnings)
		})
	}
}

// rolloutModels are model m (profile a, scaling.min 2) with rollout
// manual and its profile's args, the same with rollout auto, and that one
// with its args edited (to --w).
func rolloutModels(args string) (manual, auto, autoEdited spec.Model) {
	manual = spec.Model{Name: "m", Source: "sim://m", Rollout: spec.RolloutManual, Scaling: spec.Scaling{Min: 2, Max: 2},
		Profiles: []spec.Profile{{Name: "a", Engine: "sim", Args: []string{args}}}}
	manual.Normalize()
	auto = manual.Clone()
	auto.Rollout = spec.RolloutAuto
	autoEdited = auto.Clone()
	autoEdited.Profiles[0].Args = []string{"--w"}
	autoEdited.Normalize()
	return manual, auto, autoEdited
}

// shardOn is a replica's one shard, on node's GPU 0.
func shardOn(node string) []*managev1.Shard {
	return []*managev1.Shard{{Node: node, Gpus: []int32{0}}}
}

// wantWarnings fails t unless warnings are as many as want and each
// starts with its want.
func wantWarnings(t *testing.T, warnings, want []string) {
	t.Helper()
	if len(warnings) != len(want) {
		t.Fatalf("warnings %q, want %d", warnings, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(warnings[i], w) {
			t.Errorf("warning =\n%s\nwant it to start with\n%s", warnings[i], w)
		}
	}
}
