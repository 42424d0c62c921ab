package provider

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	managev1 "github.com/llmgw/llmgw/api/managev1"
)

func TestBudgetFromAPI(t *testing.T) {
	tests := []struct {
		name string
		in   *managev1.Budget
	}{
		{"refuse", &managev1.Budget{Project: "p", Period: "day", Amount: 5, OnExhausted: "refuse"}},
		{"fallback", &managev1.Budget{Project: "p", Period: "month", Amount: 0.5, OnExhausted: "fallback", FallbackModel: "small", FallbackAllowance: 0.25}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := budgetFromAPI(tt.in)
			if m.ID.ValueString() != tt.in.GetProject()+"/"+tt.in.GetPeriod() {
				t.Errorf("id = %s", m.ID)
			}
			if (tt.in.GetFallbackModel() == "") != m.FallbackModel.IsNull() {
				t.Errorf("fallback_model = %s: null when the API has none", m.FallbackModel)
			}
			back := m.toAPI()
			if back.GetAmount() != tt.in.GetAmount() || back.GetOnExhausted() != tt.in.GetOnExhausted() || back.GetFallbackModel() != tt.in.GetFallbackModel() ||
				back.GetFallbackAllowance() != tt.in.GetFallbackAllowance() {
				t.Errorf("round trip = %v, want %v", back, tt.in)
			}
		})
	}
}

// budgetConfig is a configuration of llmgw_budget with the given
// on_exhausted, fallback_model and fallback_allowance (nil: not set).
func budgetConfig(t *testing.T, onExhausted, fallback *string, allowance *float64) tfsdk.Config {
	t.Helper()
	var s resource.SchemaResponse
	newBudgetResource().Schema(context.Background(), resource.SchemaRequest{}, &s)
	typ := s.Schema.Type().TerraformType(context.Background())
	str := func(p *string) tftypes.Value {
		if p == nil {
			return tftypes.NewValue(tftypes.String, nil)
		}
		return tftypes.NewValue(tftypes.String, *p)
	}
	raw := tftypes.NewValue(typ, map[string]tftypes.Value{
		"id":             tftypes.NewValue(tftypes.String, nil),
		"project":        tftypes.NewValue(tftypes.String, "p"),
		"period":         tftypes.NewValue(tftypes.String, "day"),
		"amount":         tftypes.NewValue(tftypes.Number, 1),
		"on_exhausted":   str(onExhausted),
		"fallback_model": str(fallback),
		"fallback_allowance": func() tftypes.Value {
			if allowance == nil {
				return tftypes.NewValue(tftypes.Number, nil)
			}
			return tftypes.NewValue(tftypes.Number, *allowance)
		}(),
	})
	return tfsdk.Config{Schema: s.Schema, Raw: raw}
}

func TestBudgetValidateConfig(t *testing.T) {
	ptr := func(s string) *string { return &s }
	fptr := func(f float64) *float64 { return &f }
	tests := []struct {
		name        string
		onExhausted *string
		fallback    *string
		allowance   *float64
		want        string
	}{
		{name: "refuse by default"},
		{name: "refuse", onExhausted: ptr("refuse")},
		{name: "fallback with a model", onExhausted: ptr("fallback"), fallback: ptr("small")},
		{name: "fallback without a model", onExhausted: ptr("fallback"), want: "fallback_model is required"},
		{name: "a model without fallback", fallback: ptr("small"), want: `fallback_model needs on_exhausted = "fallback"`},
		{name: "a model with refuse", onExhausted: ptr("refuse"), fallback: ptr("small"), want: `fallback_model needs on_exhausted = "fallback"`},
		{name: "fallback with an allowance", onExhausted: ptr("fallback"), fallback: ptr("small"), allowance: fptr(2.5)},
		{name: "a zero allowance with refuse", onExhausted: ptr("refuse"), allowance: fptr(0)},
		{name: "an allowance with refuse", onExhausted: ptr("refuse"), allowance: fptr(1), want: `fallback_allowance needs on_exhausted = "fallback"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var resp resource.ValidateConfigResponse
			(&budgetResource{}).ValidateConfig(context.Background(), resource.ValidateConfigRequest{Config: budgetConfig(t, tt.onExhausted, tt.fallback, tt.allowance)}, &resp)
			if tt.want == "" {
				if resp.Diagnostics.HasError() {
					t.Fatalf("unexpected: %v", resp.Diagnostics)
				}
				return
			}
			if !resp.Diagnostics.HasError() || !strings.Contains(resp.Diagnostics.Errors()[0].Summary(), tt.want) {
				t.Fatalf("diagnostics = %v, want %q", resp.Diagnostics, tt.want)
			}
		})
	}
}

func TestBudgetImportID(t *testing.T) {
	tests := []struct {
		id string
		ok bool
	}{{"team-a/month", true}, {"team-a", false}, {"/day", false}, {"team-a/", false}}
	var s resource.SchemaResponse
	newBudgetResource().Schema(context.Background(), resource.SchemaRequest{}, &s)
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			resp := resource.ImportStateResponse{State: tfsdk.State{Schema: s.Schema, Raw: tftypes.NewValue(s.Schema.Type().TerraformType(context.Background()), nil)}}
			(&budgetResource{}).ImportState(context.Background(), resource.ImportStateRequest{ID: tt.id}, &resp)
			if resp.Diagnostics.HasError() == tt.ok {
				t.Fatalf("import %q: %v", tt.id, resp.Diagnostics)
			}
			if !tt.ok && !strings.Contains(resp.Diagnostics.Errors()[0].Summary(), "PROJECT/PERIOD") {
				t.Fatalf("error does not say the shape: %v", resp.Diagnostics)
			}
		})
	}
}
