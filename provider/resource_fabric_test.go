package provider

import (
	"context"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/resource"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/spec"
)

func TestFabricFromAPI(t *testing.T) {
	tests := []struct {
		name  string
		in    *managev1.Fabric
		nodes []string
	}{
		{"no nodes", &managev1.Fabric{Name: "ib-a", Description: "rack A"}, []string{}},
		{"two nodes", &managev1.Fabric{Name: "ib-a", Nodes: []string{"n1", "n2"}}, []string{"n1", "n2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := fabricFromAPI(tt.in)
			if m.Name.ValueString() != tt.in.GetName() || m.Description.ValueString() != tt.in.GetDescription() {
				t.Errorf("name/description = %q/%q, want %q/%q", m.Name.ValueString(), m.Description.ValueString(), tt.in.GetName(), tt.in.GetDescription())
			}
			var got []string
			if d := m.Nodes.ElementsAs(context.Background(), &got, false); d.HasError() {
				t.Fatalf("nodes: %v", d)
			}
			if len(got) != len(tt.nodes) {
				t.Fatalf("nodes = %v, want %v", got, tt.nodes)
			}
			for i := range got {
				if got[i] != tt.nodes[i] {
					t.Errorf("nodes[%d] = %q, want %q", i, got[i], tt.nodes[i])
				}
			}
			back := m.toAPI()
			if back.GetName() != tt.in.GetName() || back.GetDescription() != tt.in.GetDescription() || len(back.GetNodes()) != 0 {
				t.Errorf("toAPI = %v, want name and description only", back)
			}
		})
	}
}

func TestFabricNameRule(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"ib-a", true}, {"ib_hdr.1", true}, {"ib a", false}, {"ib/a", false}, {"", false},
	}
	for _, tt := range tests {
		if got := spec.FabricNameRE.MatchString(tt.name); got != tt.ok {
			t.Errorf("spec.FabricNameRE(%q) = %v, want %v", tt.name, got, tt.ok)
		}
	}
	var s resource.SchemaResponse
	newFabricResource().Schema(context.Background(), resource.SchemaRequest{}, &s)
	if s.Diagnostics.HasError() {
		t.Fatal(s.Diagnostics)
	}
	if !s.Schema.Attributes["nodes"].IsComputed() || s.Schema.Attributes["name"].IsComputed() {
		t.Error("nodes must be computed and name not")
	}
}
