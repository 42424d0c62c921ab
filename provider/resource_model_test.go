package provider

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/types"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/api/specpb"
	"github.com/llmgw/llmgw/spec"
)

func TestDurationValidator(t *testing.T) {
	tests := []struct {
		in        string
		allowZero bool
		want      string // "" means valid
	}{
		{in: "90s"}, {in: "1h30m"}, {in: "10m"},
		{in: "0s", want: "must be positive"},
		{in: "0s", allowZero: true},
		{in: "-5m", want: "negative"},
		{in: "ten minutes", want: `cannot parse "ten minutes"`},
		{in: "10", want: "cannot parse"},
	}
	for _, tt := range tests {
		got := durationValidator{allowZero: tt.allowZero}.check(tt.in)
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("check(%q, allowZero=%v) = %q, want %q", tt.in, tt.allowZero, got, tt.want)
		}
	}
}

func TestFromValuesKeepPriorSpelling(t *testing.T) {
	tests := []struct {
		name  string
		got   types.String
		wantV types.String
	}{
		{"duration spelt otherwise keeps the config's", fromDuration("1m", types.StringValue("60s")), types.StringValue("60s")},
		{"changed duration takes the API's", fromDuration("2m", types.StringValue("60s")), types.StringValue("2m")},
		{"absent duration stays null", fromDuration("", types.StringNull()), types.StringNull()},
		{"zero duration keeps an explicit 0s", fromDuration("", types.StringValue("0s")), types.StringValue("0s")},
		{"empty string stays null", fromString("", types.StringNull()), types.StringNull()},
		{"explicit empty string kept", fromString("", types.StringValue("")), types.StringValue("")},
	}
	for _, tt := range tests {
		if !tt.got.Equal(tt.wantV) {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.wantV)
		}
	}
	if l := fromList(nil, types.ListNull(types.StringType)); !l.IsNull() {
		t.Errorf("empty list with null prior = %v, want null", l)
	}
	if l := fromList(nil, types.ListValueMust(types.StringType, nil)); l.IsNull() || len(l.Elements()) != 0 {
		t.Errorf("empty list with empty prior = %v, want []", l)
	}
	if m := fromMap(map[string]string{}, types.MapNull(types.StringType)); !m.IsNull() {
		t.Errorf("empty map with null prior = %v, want null", m)
	}
}

// TestModelRoundTrip: a model read from the API into state and back is the
// same definition, as Normalize leaves it.
func TestModelRoundTrip(t *testing.T) {
	ctx := context.Background()
	tests := []spec.Model{
		{Name: "minimal", Profiles: []spec.Profile{{Name: "cpu", Engine: "sim"}}},
		{
			Name: "full", Aliases: []string{"a", "b"}, Source: "hf:org/model", ContextLength: 8192, MaxOutput: 1024,
			Scaling: spec.Scaling{Min: 1, Max: 3, IdleTimeout: spec.Duration(5 * time.Minute)},
			Profiles: []spec.Profile{
				{Name: "tp2", Engine: "vllm", GPUClass: "h100-80g", TP: 2, Nodes: 2, Weight: 3, Priority: 10, StartupTimeout: spec.Duration(90 * time.Second),
					MinMemoryGB: 64, MinDiskGB: 100, Labels: map[string]string{"zone": "a"}, Args: []string{"--x", "1"}, Env: map[string]string{"K": "v"}, LaunchMode: "ray"},
				{Name: "cpu", Engine: "llamacpp"},
			},
		},
	}
	for _, want := range tests {
		t.Run(want.Name, func(t *testing.T) {
			want.Normalize()
			pm := specpb.ModelToProto(want)
			pm.Generation, pm.Origin = "abc", "api"
			pm.Status = &managev1.ModelStatus{State: "serving", ReplicasReady: 1}
			st, diags := fromAPI(ctx, pm, modelResourceModel{})
			if diags.HasError() {
				t.Fatal(diags)
			}
			got, known := st.toCatalog(ctx)
			if !known {
				t.Fatal("toCatalog reports unknown values in a state built from the API")
			}
			if !got.Equal(want) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
			}
			if st.Generation.ValueString() != "abc" || st.Origin.ValueString() != "api" {
				t.Fatalf("generation/origin = %v/%v", st.Generation, st.Origin)
			}
		})
	}
}

func TestToCatalogUnknown(t *testing.T) {
	ctx := context.Background()
	pm := specpb.ModelToProto(spec.Model{Name: "m", Profiles: []spec.Profile{{Name: "p", Engine: "sim"}}})
	st, _ := fromAPI(ctx, pm, modelResourceModel{})
	st.Source = types.StringUnknown()
	if _, known := st.toCatalog(ctx); known {
		t.Fatal("an unknown source was reported known")
	}
}

func TestRolloutProgress(t *testing.T) {
	started := time.UnixMilli(100_000)
	reps := []*managev1.Replica{
		{Id: "old-ready", ModelGeneration: "g1", State: "ready", CreatedUnixMs: 10_000},
		{Id: "new-ready", ModelGeneration: "g2", State: "ready", CreatedUnixMs: 101_000},
		{Id: "new-starting", ModelGeneration: "g2", State: "starting", CreatedUnixMs: 101_000},
		{Id: "old-failure", ModelGeneration: "g2", State: "failed", CreatedUnixMs: 50_000},
		{Id: "new-failure", ModelGeneration: "g2", State: "failed", CreatedUnixMs: 102_000},
	}
	tests := []struct {
		gen        string
		wantReady  int
		wantFailed string
	}{
		{gen: "g1", wantReady: 1},
		{gen: "g2", wantReady: 1, wantFailed: "new-failure"},
		{gen: "g3"},
	}
	for _, tt := range tests {
		ready, failed := rolloutProgress(reps, tt.gen, started)
		if ready != tt.wantReady || failed.GetId() != tt.wantFailed {
			t.Errorf("generation %s: ready %d failed %q, want %d %q", tt.gen, ready, failed.GetId(), tt.wantReady, tt.wantFailed)
		}
	}
}

func TestReplicaFailure(t *testing.T) {
	got := replicaFailure(&managev1.Replica{
		Id: "r-1", Profile: "tp1", Error: "shard 0 failed",
		Shards: []*managev1.Shard{
			{Rank: 0, Node: "node01", State: "failed", Error: "exit status 1", LastOutput: []string{"loading weights", "CUDA out of memory"}},
			{Rank: 1, Node: "node02", State: "stopped"},
		},
	})
	for _, want := range []string{"r-1", "tp1", "shard 0 failed", "node01", "exit status 1", "CUDA out of memory"} {
		if !strings.Contains(got, want) {
			t.Errorf("replicaFailure = %q, want it to contain %q", got, want)
		}
	}
	if strings.Contains(got, "node02") {
		t.Errorf("a shard with nothing to say is listed: %q", got)
	}
}
