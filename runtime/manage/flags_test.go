package manage

import (
	"context"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	managev1 "github.com/llmgw/llmgw/api/managev1"
	specv1 "github.com/llmgw/llmgw/api/specv1"
)

// llamaHelpFlags are flags llama-server's help lists, sorted: those the
// driver writes, plus --jinja.
var llamaHelpFlags = []string{"--alias", "--ctx-size", "--host", "--jinja", "--metrics", "--model", "--n-gpu-layers", "--parallel", "--port", "-c", "-np"}

// TestFlagCheck: create, update and plan refuse a profile whose args use a
// flag that the engine's own help on the nodes does not list, naming the
// flag, the engine with its version, the help and the node; a flag only
// some nodes take is a warning naming where the profile will go; a node
// whose help was cut short is named in a warning instead of refusing.
func TestFlagCheck(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	f := s.opts.Fleet
	check := func(version string, flags []string, warning string) []*agentv1.EngineCheck {
		return []*agentv1.EngineCheck{{Engine: "llamacpp", Path: "/opt/llama.cpp/llama-server", Ok: true, Version: version,
			Flags: flags, HelpCommand: "llama-server --help", HelpWarning: warning}}
	}
	inv := &agentv1.Inventory{Engines: []*agentv1.EngineStatus{{Engine: "llamacpp", Available: true}}, MemoryAvailableBytes: 64 << 30}
	f.Connect(&agentv1.Hello{Inventory: inv, EngineChecks: check("version: 100 (old)", llamaHelpFlags, "")}, "cpu01", nil, false, nopConn{})
	model := func(name string, args ...string) *managev1.Model {
		return &managev1.Model{Name: name, Source: "/models/tiny.gguf", Scaling: &managev1.Scaling{Min: 0, Max: 1},
			Profiles: []*specv1.Profile{{Name: "cpu", Engine: "llamacpp", StartupTimeout: "2m", Args: args}}}
	}

	want := `profile "cpu" uses a flag its engine does not take: on node cpu01 llama-server (version: 100 (old)) does not take --flash-attn: ` +
		"`llama-server --help` does not list it"
	if _, err := s.CreateModel(ctx, &managev1.CreateModelRequest{Model: model("bad", "--flash-attn", "on")}); code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), want) {
		t.Fatalf("create with a flag the engine lacks: %v\nwant InvalidArgument with %q", err, want)
	}
	if _, ok := s.opts.Catalog.Get("bad"); ok {
		t.Fatal("the refused model is in the catalog")
	}
	if _, err := s.PlanPlacement(ctx, &managev1.PlanPlacementRequest{Model: model("bad", "--flash-attn=on")}); code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), want) {
		t.Fatalf("plan with a flag the engine lacks: %v", err)
	}
	got, err := s.CreateModel(ctx, &managev1.CreateModelRequest{Model: model("ok", "--jinja", "-c", "8192")})
	if err != nil || len(got.GetWarnings()) != 0 {
		t.Fatalf("create with flags the engine takes: warnings %q, err %v", got.GetWarnings(), err)
	}
	if _, err := s.UpdateModel(ctx, &managev1.UpdateModelRequest{Model: model("ok", "--jinja", "--ctx-size-typo", "8192")}); code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), "--ctx-size-typo") {
		t.Fatalf("update to a misspelt flag: %v", err)
	}

	// A newer llama.cpp on cpu02 takes --flash-attn: the profile is
	// accepted, with a warning that cpu01 will not host it.
	newer := append([]string{"--flash-attn"}, llamaHelpFlags...)
	f.Connect(&agentv1.Hello{Inventory: inv, EngineChecks: check("version: 200 (new)", slices.Sorted(slices.Values(newer)), "")}, "cpu02", nil, false, nopConn{})
	ex, err := s.PlanPlacement(ctx, &managev1.PlanPlacementRequest{Model: model("fa", "--flash-attn", "on")})
	if err != nil || len(ex.GetWarnings()) != 1 || !strings.HasPrefix(ex.GetWarnings()[0], FlagWarningPrefix+`profile "cpu" will be placed only on cpu02: on node cpu01 llama-server (version: 100 (old)) does not take --flash-attn`) {
		t.Fatalf("plan with a flag one node lacks: warnings %q, err %v", ex.GetWarnings(), err)
	}
	if !ex.GetPlaced() || !strings.Contains(ex.GetText(), "cpu02") {
		t.Errorf("plan placed %v:\n%s", ex.GetPlaced(), ex.GetText())
	}

	// cpu01's help is cut short now: not checked there, said so, not refused.
	f.ApplyEngineChecks("cpu01", check("version: 100 (old)", llamaHelpFlags[:3], "the output of `llama-server --help` was cut short; a flag it does not list is not called missing"))
	f.ApplyEngineChecks("cpu02", check("version: 100 (old)", llamaHelpFlags, ""))
	_, err = s.PlanPlacement(ctx, &managev1.PlanPlacementRequest{Model: model("fa", "--flash-attn", "on")})
	if code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "on node cpu02") || strings.Contains(err.Error(), "cpu01") {
		t.Fatalf("plan with only cpu02 checked and lacking the flag: %v", err)
	}
	ex, err = s.PlanPlacement(ctx, &managev1.PlanPlacementRequest{Model: model("j", "--jinja")})
	if err != nil || len(ex.GetWarnings()) != 1 || !strings.Contains(ex.GetWarnings()[0], `profile "cpu" not checked on node cpu01: the output of `+"`llama-server --help`"+` was cut short`) {
		t.Fatalf("plan with cpu01's help cut short: warnings %q, err %v", ex.GetWarnings(), err)
	}
}
