package provider

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

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
	tests := []spec.Model{
		{Name: "minimal", Profiles: []spec.Profile{{Name: "cpu", Engine: "sim"}}},
		{
			Name: "full", Aliases: []string{"a", "b"}, Source: "hf:org/model", ContextLength: 8192, MaxOutput: 1024,
			Scaling: spec.Scaling{Min: 1, Max: 3, IdleTimeout: spec.Duration(5 * time.Minute)},
			Pricing: &spec.Pricing{PromptPer1K: 0.5, CompletionPer1K: 1.5},
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
			st, diags := fromAPI(pm, modelResourceModel{})
			if diags.HasError() {
				t.Fatal(diags)
			}
			got, known := st.toSpec()
			if !known {
				t.Fatal("toSpec reports unknown values in a state built from the API")
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

func TestToSpecUnknown(t *testing.T) {
	pm := specpb.ModelToProto(spec.Model{Name: "m", Profiles: []spec.Profile{{Name: "p", Engine: "sim"}}})
	st, _ := fromAPI(pm, modelResourceModel{})
	st.Source = types.StringUnknown()
	if _, known := st.toSpec(); known {
		t.Fatal("an unknown source was reported known")
	}
}

func TestRolloutProgress(t *testing.T) {
	started := time.UnixMilli(100_000)
	reps := []*managev1.Replica{
		{Id: "old-ready", Stale: true, ModelGeneration: "g1", State: "ready", CreatedUnixMs: 10_000},
		// From a control plane older than Replica.stale: stale only by
		// its generation.
		{Id: "old-server-stale", ModelGeneration: "g1", State: "ready", CreatedUnixMs: 10_000},
		{Id: "new-ready", ModelGeneration: "g2", State: "ready", CreatedUnixMs: 101_000},
		{Id: "new-starting", ModelGeneration: "g2", State: "starting", CreatedUnixMs: 101_000},
		{Id: "old-failure", ModelGeneration: "g2", State: "failed", CreatedUnixMs: 50_000},
		{Id: "stale-failure", Stale: true, ModelGeneration: "g1", State: "failed", CreatedUnixMs: 103_000},
		{Id: "new-failure", ModelGeneration: "g2", State: "failed", CreatedUnixMs: 102_000},
	}
	tests := []struct {
		manual     bool
		wantReady  int
		wantFailed string
	}{
		{wantReady: 1, wantFailed: "new-failure"},
		// A manual rollout keeps the stale replicas serving and places no
		// replacement: they count, or apply would wait until it timed out.
		{manual: true, wantReady: 3, wantFailed: "new-failure"},
	}
	for _, tt := range tests {
		ready, failed := rolloutProgress(reps, "g2", started, tt.manual)
		if ready != tt.wantReady || failed.GetId() != tt.wantFailed {
			t.Errorf("manual %v: ready %d failed %q, want %d %q", tt.manual, ready, failed.GetId(), tt.wantReady, tt.wantFailed)
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

// TestNestedSchemasFollowSpec: the nested objects of llmgw_model are spec's
// flat structs attribute for field (json tag), with the Terraform type of
// each field's Go type, so a new field of spec.Profile cannot be
// forgotten in profileSchema nor cross with another type.
func TestNestedSchemasFollowSpec(t *testing.T) {
	tfType := func(t reflect.Type) attr.Type {
		switch {
		case t == durationType:
			return types.StringType
		case t.Kind() == reflect.String:
			return types.StringType
		case t.Kind() == reflect.Int:
			return types.Int64Type
		case t.Kind() == reflect.Bool:
			return types.BoolType
		case t.Kind() == reflect.Float64:
			return types.Float64Type
		case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
			return types.ListType{ElemType: types.StringType}
		case t.Kind() == reflect.Map && t.Elem().Kind() == reflect.String:
			return types.MapType{ElemType: types.StringType}
		}
		return nil
	}
	for _, tt := range []struct {
		name  string
		typ   reflect.Type
		attrs map[string]attr.Type
	}{
		{"profiles", reflect.TypeFor[spec.Profile](), profileTypes},
		{"scaling", reflect.TypeFor[spec.Scaling](), scalingTypes},
		{"pricing", reflect.TypeFor[spec.Pricing](), pricingTypes},
	} {
		fields := map[string]bool{}
		for i := range tt.typ.NumField() {
			f := tt.typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			fields[name] = true
			got, ok := tt.attrs[name]
			if !ok {
				t.Errorf("spec.%s.%s has no attribute %s.%s in the schema", tt.typ.Name(), f.Name, tt.name, name)
				continue
			}
			if want := tfType(f.Type); want == nil || !got.Equal(want) {
				t.Errorf("%s.%s is %v in the schema; spec.%s.%s (%s) wants %v", tt.name, name, got, tt.typ.Name(), f.Name, f.Type, want)
			}
		}
		for name := range tt.attrs {
			if !fields[name] {
				t.Errorf("schema attribute %s.%s is no field of spec.%s", tt.name, name, tt.typ.Name())
			}
		}
	}
}

func TestProblemPath(t *testing.T) {
	tests := map[string]path.Path{
		"name":                  path.Root("name"),
		"aliases[2]":            path.Root("aliases").AtListIndex(2),
		"scaling.max":           path.Root("scaling").AtName("max"),
		"pricing.prompt_per_1k": path.Root("pricing").AtName("prompt_per_1k"),
		"profiles[1].tp":        path.Root("profiles").AtListIndex(1).AtName("tp"),
	}
	for key, want := range tests {
		if got := problemPath(key); !got.Equal(want) {
			t.Errorf("problemPath(%q) = %s, want %s", key, got, want)
		}
	}
}

// TestModelProblems: a configuration is checked with spec's rules, each
// problem at its attribute, and a problem that may come from a value not
// known yet waits for apply.
func TestModelProblems(t *testing.T) {
	// config is the configuration of model m with its profiles; unset
	// values are null, as Terraform passes them before defaults apply.
	config := func(edit func(m *modelResourceModel, p []map[string]attr.Value), profiles ...map[string]attr.Value) modelResourceModel {
		m := modelResourceModel{
			Name: types.StringValue("m"), Aliases: types.ListNull(types.StringType), Source: types.StringNull(),
			RoutingProfile: types.StringNull(), ContextLength: types.Int64Null(), MaxOutput: types.Int64Null(),
			Scaling: types.ObjectNull(scalingTypes), Pricing: types.ObjectNull(pricingTypes),
		}
		for _, p := range profiles {
			for name, typ := range profileTypes {
				if _, ok := p[name]; !ok {
					v, _ := typ.ValueFromTerraform(context.Background(), tftypes.NewValue(typ.TerraformType(context.Background()), nil))
					p[name] = v
				}
			}
		}
		if edit != nil {
			edit(&m, profiles)
		}
		var elems []attr.Value
		for _, p := range profiles {
			elems = append(elems, types.ObjectValueMust(profileTypes, p))
		}
		m.Profiles = types.ListValueMust(types.ObjectType{AttrTypes: profileTypes}, elems)
		return m
	}
	sim := func() map[string]attr.Value {
		return map[string]attr.Value{"name": types.StringValue("p"), "engine": types.StringValue("sim")}
	}
	scaling := func(min, max types.Int64) types.Object {
		return types.ObjectValueMust(scalingTypes, map[string]attr.Value{"min": min, "max": max, "idle_timeout": types.StringNull()})
	}
	tests := []struct {
		name string
		cfg  modelResourceModel
		want map[string]string // attribute path → part of the detail; empty: valid
	}{
		{"valid, defaults unset", config(nil, sim()), nil},
		{"bad name", config(func(m *modelResourceModel, _ []map[string]attr.Value) { m.Name = types.StringValue("Bad Name") }, sim()),
			map[string]string{"name": "may contain only"}},
		{"tp with a gpu_class", config(func(_ *modelResourceModel, p []map[string]attr.Value) {
			p[1]["gpu_class"], p[1]["tp"] = types.StringValue("h100-80g"), types.Int64Value(0)
		}, sim(), map[string]attr.Value{"name": types.StringValue("gpu"), "engine": types.StringValue("vllm")}),
			map[string]string{"profiles[1].tp": "must be at least 1 when gpu_class is set"}},
		{"duplicate profile", config(nil, sim(), sim()), map[string]string{"profiles[1].name": "already defined at profiles[0]"}},
		{"unknown engine", config(func(_ *modelResourceModel, p []map[string]attr.Value) { p[0]["engine"] = types.StringValue("tgi") }, sim()),
			map[string]string{"profiles[0].engine": `unknown engine "tgi"`}},
		{"launch_mode without vllm", config(func(_ *modelResourceModel, p []map[string]attr.Value) { p[0]["launch_mode"] = types.StringValue("ray") }, sim()),
			map[string]string{"profiles[0].launch_mode": "only vllm"}},
		{"max below min, as written", config(func(m *modelResourceModel, _ []map[string]attr.Value) {
			m.Scaling = scaling(types.Int64Value(3), types.Int64Value(1))
		}, sim()), map[string]string{"scaling.max": "1 is less than scaling.min 3"}},
		{"min above the hard bound (and int32)", config(func(m *modelResourceModel, _ []map[string]attr.Value) {
			m.Scaling = scaling(types.Int64Value(1<<32+1), types.Int64Null())
		}, sim()), map[string]string{"scaling.min": "4294967297 is more than 10000"}},
		{"max unset takes min", config(func(m *modelResourceModel, _ []map[string]attr.Value) {
			m.Scaling = scaling(types.Int64Value(3), types.Int64Null())
		}, sim()), nil},
		{"explicit nodes 0", config(func(_ *modelResourceModel, p []map[string]attr.Value) { p[0]["nodes"] = types.Int64Value(0) }, sim()),
			map[string]string{"profiles[0].nodes": "must be at least 1"}},
		{"explicit startup_timeout 0s", config(func(_ *modelResourceModel, p []map[string]attr.Value) {
			p[0]["startup_timeout"] = types.StringValue("0s")
		}, sim()),
			map[string]string{"profiles[0].startup_timeout": "must be positive"}},
		{"unparsable startup_timeout is its validator's alone", config(func(_ *modelResourceModel, p []map[string]attr.Value) {
			p[0]["startup_timeout"] = types.StringValue("soon")
		}, sim()), nil},
		{"no profile", config(nil), map[string]string{"profiles": "at least one profile"}},
		{"max_output above context_length", config(func(m *modelResourceModel, _ []map[string]attr.Value) {
			m.ContextLength, m.MaxOutput = types.Int64Value(100), types.Int64Value(200)
		}, sim()), map[string]string{"max_output": "more than context_length"}},
		{"llama.cpp context split below context_length", config(func(m *modelResourceModel, p []map[string]attr.Value) {
			m.ContextLength = types.Int64Value(65536)
			p[0]["engine"] = types.StringValue("llamacpp")
			p[0]["args"] = types.ListValueMust(types.StringType, []attr.Value{types.StringValue("--ctx-size"), types.StringValue("65536"), types.StringValue("--parallel"), types.StringValue("2")})
		}, sim()), map[string]string{"profiles[0].args": "--ctx-size 65536 over --parallel 2 gives each slot 32768 tokens, less than context_length 65536"}},
		{"unknown gpu_class waits", config(func(_ *modelResourceModel, p []map[string]attr.Value) {
			p[0]["gpu_class"], p[0]["tp"] = types.StringUnknown(), types.Int64Value(0)
		}, sim()), nil},
		{"unknown engine waits", config(func(_ *modelResourceModel, p []map[string]attr.Value) {
			p[0]["engine"], p[0]["launch_mode"] = types.StringUnknown(), types.StringValue("mp")
		}, sim()), nil},
		{"unknown source does not hide a bad name", config(func(m *modelResourceModel, _ []map[string]attr.Value) {
			m.Source, m.Name = types.StringUnknown(), types.StringValue("Bad")
		}, sim()), map[string]string{"name": "may contain only"}},
		{"unknown profiles wait", config(func(m *modelResourceModel, _ []map[string]attr.Value) {}), nil},
	}
	// The last case: profiles unknown altogether.
	tests[len(tests)-1].cfg.Profiles = types.ListUnknown(types.ObjectType{AttrTypes: profileTypes})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			diags := modelProblems(tt.cfg)
			got := map[string]string{}
			for _, d := range diags {
				wp, ok := d.(diag.DiagnosticWithPath)
				if !ok {
					t.Fatalf("diagnostic without a path: %v", d)
				}
				got[wp.Path().String()] = d.Summary() + " / " + d.Detail()
			}
			if len(got) != len(tt.want) {
				t.Fatalf("problems = %v, want %v", got, tt.want)
			}
			for key, part := range tt.want {
				p := problemPath(key).String()
				if !strings.Contains(got[p], part) || !strings.Contains(got[p], key) {
					t.Errorf("at %s: %q, want it to name %s and contain %q", p, got[p], key, part)
				}
			}
		})
	}
}
