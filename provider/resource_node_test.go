package provider

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	managev1 "github.com/llmgw/llmgw/api/managev1"
)

func TestNodeReadiness(t *testing.T) {
	decl := &agentv1.Declaration{
		Fabrics: []*agentv1.FabricDecl{{Name: "ib-a", Adapters: []string{"mlx5_0", "mlx5_1"}}},
		Engines: map[string]string{"vllm": "/opt/vllm/bin/vllm"},
	}
	inService := &agentv1.FabricVerdict{Name: "ib-a", Adapters: []string{"mlx5_1", "mlx5_0"}, InService: true}
	cpuDecl := &agentv1.Declaration{Engines: map[string]string{"llamacpp": "/opt/llama.cpp/llama-server"}}
	libgomp := "llama-server cannot start: libgomp.so.1: cannot open shared object file: No such file or directory"
	llamaFailed := &agentv1.EngineCheck{Engine: "llamacpp", Path: "/opt/llama.cpp/llama-server", Error: libgomp}
	llamaOK := &agentv1.EngineCheck{Engine: "llamacpp", Path: "/opt/llama.cpp/llama-server", Ok: true, Version: "version: 4567 (abcdef0)"}
	simOK := &agentv1.EngineCheck{Engine: "sim", Path: "/usr/local/bin/llmgw", Ok: true}
	tests := []struct {
		name       string
		node       *managev1.Node
		decl       *agentv1.Declaration
		done       bool
		failedWith string
	}{
		{"unknown node", nil, decl, false, ""},
		{"old machine's entry, disconnected, ready", &managev1.Node{State: "ready", Fabrics: []*agentv1.FabricVerdict{inService}}, decl, false, ""},
		{"old machine's entry, disconnected, engine failed", &managev1.Node{State: "ready", EngineChecks: []*agentv1.EngineCheck{llamaFailed}}, cpuDecl, false, ""},
		{"ready, no fabric declared", &managev1.Node{Connected: true, State: "ready"}, &agentv1.Declaration{}, true, ""},
		{"ready, fabric in service", &managev1.Node{Connected: true, State: "ready", Fabrics: []*agentv1.FabricVerdict{inService}}, decl, true, ""},
		{"pending, fabric in service", &managev1.Node{Connected: true, State: "pending", Fabrics: []*agentv1.FabricVerdict{inService}}, decl, false, ""},
		{"ready, verdict of an older declaration", &managev1.Node{Connected: true, State: "ready", Fabrics: []*agentv1.FabricVerdict{{Name: "ib-a", Adapters: []string{"mlx5_0"}, InService: false, Problems: []string{"old"}}}}, decl, false, ""},
		{"fabric out of service", &managev1.Node{Connected: true, State: "ready", Fabrics: []*agentv1.FabricVerdict{{Name: "ib-a", Adapters: []string{"mlx5_0", "mlx5_1"}, Problems: []string{"adapter mlx5_1 not found"}}}}, decl, false, "fabric ib-a out of service: adapter mlx5_1 not found"},
		{"engine unavailable", &managev1.Node{Connected: true, State: "ready", Engines: []*agentv1.EngineStatus{{Engine: "vllm", Path: "/opt/vllm/bin/vllm", Error: "not found"}}}, decl, false, "engine vllm unavailable: not found"},
		{"engine status of another path", &managev1.Node{Connected: true, State: "ready", Fabrics: []*agentv1.FabricVerdict{inService}, Engines: []*agentv1.EngineStatus{{Engine: "vllm", Path: "/old/vllm", Error: "not found"}}}, decl, true, ""},

		{"engine cannot start", &managev1.Node{Connected: true, State: "ready", Fabrics: []*agentv1.FabricVerdict{inService}, EngineChecks: []*agentv1.EngineCheck{llamaFailed, simOK}}, cpuDecl, false, libgomp},
		{"engine check before the fabric", &managev1.Node{Connected: true, State: "ready", EngineChecks: []*agentv1.EngineCheck{llamaFailed}, Engines: []*agentv1.EngineStatus{{Engine: "llamacpp", Path: "/opt/llama.cpp/llama-server", Error: "not found"}}}, cpuDecl, false, libgomp},
		{"engine checked", &managev1.Node{Connected: true, State: "ready", EngineChecks: []*agentv1.EngineCheck{llamaOK, simOK}}, cpuDecl, true, ""},
		{"declared engine not checked yet", &managev1.Node{Connected: true, State: "ready", EngineChecks: []*agentv1.EngineCheck{simOK}}, cpuDecl, false, ""},
		{"failed check of an older path", &managev1.Node{Connected: true, State: "ready", EngineChecks: []*agentv1.EngineCheck{{Engine: "llamacpp", Path: "/old/llama-server", Error: "old"}, simOK}}, cpuDecl, false, ""},
		{"agent reports no checks", &managev1.Node{Connected: true, State: "ready"}, cpuDecl, true, ""},
		{"sim checked whatever its declared path", &managev1.Node{Connected: true, State: "ready", EngineChecks: []*agentv1.EngineCheck{{Engine: "sim", Path: "/usr/local/bin/llmgw", Error: "llmgw sim-engine cannot start: exit status 2"}}},
			&agentv1.Declaration{Engines: map[string]string{"sim": ""}}, false, "llmgw sim-engine cannot start: exit status 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done, failed := nodeReadiness(tt.node, tt.decl)
			if done != tt.done || failed != tt.failedWith {
				t.Errorf("nodeReadiness = %v, %q; want %v, %q", done, failed, tt.done, tt.failedWith)
			}
		})
	}
}

func TestNodeDeclarationRoundTrip(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		address string
		decl    *agentv1.Declaration
	}{
		{"empty", "", &agentv1.Declaration{Discovery: &agentv1.Discovery{}}},
		{"full", "10.0.0.7", &agentv1.Declaration{
			Fabrics:   []*agentv1.FabricDecl{{Name: "ib-a", Adapters: []string{"mlx5_0"}}},
			Engines:   map[string]string{"vllm": "/opt/vllm"},
			Labels:    map[string]string{"rack": "a"},
			ModelDirs: []string{"/models"},
			Discovery: &agentv1.Discovery{NvidiaSmi: "/usr/bin/nvidia-smi", IbRoot: "/sys/class/infiniband"},
		}},
		{"cpuinfo only", "", &agentv1.Declaration{Discovery: &agentv1.Discovery{Cpuinfo: "/srv/sim/cpuinfo-kvm64"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := nodeResourceModel{Name: types.StringValue("gpu-01"), Address: types.StringNull(),
				Engines: types.MapNull(types.StringType), Labels: types.MapNull(types.StringType), ModelDirs: types.ListNull(types.StringType)}
			if d := m.setDeclaration(ctx, tt.address, tt.decl); d.HasError() {
				t.Fatal(d)
			}
			if tt.name == "empty" && (!m.Labels.IsNull() || !m.Fabric.IsNull() || !m.Discovery.IsNull() || !m.Address.IsNull()) {
				t.Errorf("an empty declaration must read as nulls: %+v", m)
			}
			nd, d := m.toDeclaration(ctx)
			if d.HasError() {
				t.Fatal(d)
			}
			if nd.GetName() != "gpu-01" || nd.GetAddress() != tt.address || !proto.Equal(nd.GetDeclaration(), tt.decl) {
				t.Errorf("round trip = %v, want address %q and %v", nd, tt.address, tt.decl)
			}
		})
	}
}

func TestNodeStatusNotConnected(t *testing.T) {
	var m nodeResourceModel
	if d := m.setStatus(context.Background(), nil); d.HasError() {
		t.Fatal(d)
	}
	if m.State.ValueString() != "pending" || !strings.Contains(m.Reason.ValueString(), "has not connected") {
		t.Errorf("state, reason = %q, %q", m.State.ValueString(), m.Reason.ValueString())
	}
}

func TestNodeWarnings(t *testing.T) {
	tests := []struct {
		name    string
		node    *managev1.Node
		summary []string
		detail  string
	}{
		{"none", &managev1.Node{Id: "cpu01", HasAvx2: proto.Bool(true)}, nil, ""},
		{"no avx2", &managev1.Node{Id: "cpu01", HasAvx2: proto.Bool(false), Warnings: []string{"CPU has no AVX2: slow"}},
			[]string{"CPU has no AVX2"}, "set the VM's CPU type to host"},
		{"another warning as is", &managev1.Node{Id: "cpu01", Warnings: []string{"something else"}}, []string{"something else"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := nodeWarnings(tt.node)
			if len(got) != len(tt.summary) {
				t.Fatalf("nodeWarnings = %+v, want %d", got, len(tt.summary))
			}
			for i, w := range got {
				if w.summary != tt.summary[i] || !strings.Contains(w.detail, tt.detail) {
					t.Errorf("warning %d = %+v, want summary %q and detail containing %q", i, w, tt.summary[i], tt.detail)
				}
			}
		})
	}
}

// TestDeclarationProblems: llmgw_node's declaration is checked with
// spec.Declaration.Validate, each problem at its attribute.
func TestDeclarationProblems(t *testing.T) {
	fabric := func(name string, adapters ...attr.Value) types.Object {
		return types.ObjectValueMust(nodeFabricTypes, map[string]attr.Value{
			"name": types.StringValue(name), "adapters": types.ListValueMust(types.StringType, adapters)})
	}
	base := func() nodeResourceModel {
		return nodeResourceModel{Name: types.StringValue("gpu-01"), Fabric: types.ObjectNull(nodeFabricTypes),
			Engines: types.MapNull(types.StringType), Labels: types.MapNull(types.StringType), ModelDirs: types.ListNull(types.StringType),
			Discovery: types.ObjectNull(nodeDiscoveryTypes)}
	}
	tests := []struct {
		name     string
		edit     func(m *nodeResourceModel)
		wantPath path.Path
		want     string
	}{
		{"valid", func(m *nodeResourceModel) { m.Fabric = fabric("ib-a", types.StringValue("mlx5_0")) }, path.Empty(), ""},
		{"adapter twice", func(m *nodeResourceModel) {
			m.Fabric = fabric("ib-a", types.StringValue("mlx5_0"), types.StringValue("mlx5_0"))
		}, path.Root("fabric").AtName("adapters"), "mlx5_0 is listed twice"},
		{"no adapter", func(m *nodeResourceModel) { m.Fabric = fabric("ib-a") }, path.Root("fabric").AtName("adapters"), "at least one adapter"},
		{"unknown engine", func(m *nodeResourceModel) {
			m.Engines = types.MapValueMust(types.StringType, map[string]attr.Value{"tgi": types.StringValue("/opt/tgi")})
		}, path.Root("engines").AtMapKey("tgi"), "unknown engine"},
		{"empty model dir", func(m *nodeResourceModel) {
			m.ModelDirs = types.ListValueMust(types.StringType, []attr.Value{types.StringValue("/models"), types.StringValue(" ")})
		}, path.Root("model_dirs").AtListIndex(1), "empty path"},
		{"unknown adapters wait", func(m *nodeResourceModel) {
			m.Fabric = types.ObjectValueMust(nodeFabricTypes, map[string]attr.Value{
				"name": types.StringValue("ib-a"), "adapters": types.ListUnknown(types.StringType)})
		}, path.Empty(), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := base()
			tt.edit(&m)
			diags := declarationProblems(m)
			if tt.want == "" {
				if diags.HasError() {
					t.Fatalf("declarationProblems = %v, want none", diags)
				}
				return
			}
			if len(diags) != 1 {
				t.Fatalf("declarationProblems = %v, want one at %s", diags, tt.wantPath)
			}
			wp, ok := diags[0].(diag.DiagnosticWithPath)
			if !ok || !wp.Path().Equal(tt.wantPath) || !strings.Contains(diags[0].Detail(), tt.want) {
				t.Fatalf("diagnostic = %v at %v, want %q at %s", diags[0], wp, tt.want, tt.wantPath)
			}
		})
	}
}
