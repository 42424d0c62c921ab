package specpb

import (
	"strings"
	"testing"
	"time"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	specv1 "github.com/llmgw/llmgw/api/specv1"
	"github.com/llmgw/llmgw/spec"
)

func TestRoundTrip(t *testing.T) {
	m := spec.Model{
		Name: "m", Aliases: []string{"a"}, Source: "/w/m.gguf", RoutingProfile: "chat", ContextLength: 4096, MaxOutput: 512,
		Scaling: spec.Scaling{Min: 1, Max: 2, IdleTimeout: spec.Duration(15 * time.Minute)},
		Profiles: []spec.Profile{{Name: "tp2", Engine: "vllm", GPUClass: "h100-80g", TP: 2, Nodes: 1, Weight: 3, Priority: 100,
			StartupTimeout: spec.Duration(5 * time.Minute), MinMemoryGB: 8, MinDiskGB: 40, Labels: map[string]string{"z": "eu"}, Args: []string{"--x"},
			Env: map[string]string{"NCCL_DEBUG": "INFO"}, LaunchMode: "ray"}},
	}
	pm := ModelToProto(m)
	if pm.GetProfiles()[0].GetStartupTimeout() != "5m" || pm.GetScaling().GetIdleTimeout() != "15m" {
		t.Fatalf("durations sent as %q and %q", pm.GetProfiles()[0].GetStartupTimeout(), pm.GetScaling().GetIdleTimeout())
	}
	back, err := ModelFromProto(pm)
	if err != nil {
		t.Fatal(err)
	}
	if !back.Equal(m) {
		t.Fatalf("round trip changed the model:\n got %+v\nwant %+v", back, m)
	}
}

func TestFromProtoErrors(t *testing.T) {
	tests := []struct {
		name string
		in   *managev1.Model
		want string
	}{
		{"nil", nil, "model: is required"},
		{"bad startup timeout", &managev1.Model{Name: "m", Profiles: []*specv1.Profile{{Name: "p", StartupTimeout: "soon"}}}, `profiles[0].startup_timeout: cannot parse "soon"`},
		{"bad idle timeout", &managev1.Model{Name: "m", Scaling: &managev1.Scaling{IdleTimeout: "5 minutes"}}, "scaling.idle_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ModelFromProto(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestPricingRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		in   *spec.Pricing
	}{
		{"no price of its own (the default applies)", nil},
		{"explicitly free", &spec.Pricing{}},
		{"priced", &spec.Pricing{PromptPer1K: 0.5, CompletionPer1K: 1.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := spec.Model{Name: "m", Pricing: tt.in}
			pm := ModelToProto(m)
			if (pm.GetPricing() == nil) != (tt.in == nil) {
				t.Fatalf("pricing sent as %v, want presence %v", pm.GetPricing(), tt.in != nil)
			}
			if tt.in != nil && (pm.GetPricing().GetPromptPer_1K() != tt.in.PromptPer1K || pm.GetPricing().GetCompletionPer_1K() != tt.in.CompletionPer1K) {
				t.Fatalf("pricing sent as %v, want %+v", pm.GetPricing(), *tt.in)
			}
			back, err := ModelFromProto(pm)
			if err != nil {
				t.Fatal(err)
			}
			if !back.Equal(m) {
				t.Fatalf("round trip changed the pricing: got %+v, want %+v", back.Pricing, tt.in)
			}
		})
	}
}
