package ctl

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/llmgw/llmgw/runtime/api/managev1"
	"github.com/llmgw/llmgw/runtime/catalog"
)

func TestModelConversion(t *testing.T) {
	tests := []struct {
		name  string
		model catalog.Model
		want  *managev1.Model
	}{
		{
			name: "every field",
			model: catalog.Model{
				Name: "m", Aliases: []string{"a"}, Source: "hf:org/m", RoutingProfile: "chat",
				ContextLength: 8192, MaxOutput: 1024,
				Scaling: catalog.Scaling{Min: 0, Max: 3, IdleTimeout: catalog.Duration(90 * time.Minute)},
				Profiles: []catalog.Profile{{
					Name: "tp8x2", Engine: "vllm", GPUClass: "h100-80g", TP: 8, Nodes: 2, Weight: 3, Priority: 10,
					StartupTimeout: catalog.Duration(20 * time.Minute), MinMemoryGB: 256, MinDiskGB: 400,
					Labels: map[string]string{"zone": "a"}, Args: []string{"--enforce-eager"},
				}},
			},
			want: &managev1.Model{
				Name: "m", Aliases: []string{"a"}, Source: "hf:org/m", RoutingProfile: "chat",
				ContextLength: 8192, MaxOutput: 1024,
				Scaling: &managev1.Scaling{Min: 0, Max: 3, IdleTimeout: "1h30m"},
				Profiles: []*managev1.Profile{{
					Name: "tp8x2", Engine: "vllm", GpuClass: "h100-80g", Tp: 8, Nodes: 2, Weight: 3, Priority: 10,
					StartupTimeout: "20m", MinMemoryGb: 256, MinDiskGb: 400,
					Labels: map[string]string{"zone": "a"}, Args: []string{"--enforce-eager"},
				}},
			},
		},
		{
			name:  "zero durations are absent",
			model: catalog.Model{Name: "z", Profiles: []catalog.Profile{{Name: "cpu", Engine: "llamacpp"}}},
			want: &managev1.Model{Name: "z", Scaling: &managev1.Scaling{},
				Profiles: []*managev1.Profile{{Name: "cpu", Engine: "llamacpp"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ModelToProto(tt.model)
			if !proto.Equal(got, tt.want) {
				t.Fatalf("ModelToProto:\n%v\nwant:\n%v", got, tt.want)
			}
			back, err := ModelFromProto(got)
			if err != nil {
				t.Fatal(err)
			}
			if !back.Equal(tt.model) {
				t.Errorf("ModelFromProto:\n%+v\nwant:\n%+v", back, tt.model)
			}
		})
	}
}

func TestModelFromProtoBadDuration(t *testing.T) {
	_, err := ModelFromProto(&managev1.Model{Name: "m", Profiles: []*managev1.Profile{{Name: "p", StartupTimeout: "soon"}}})
	if err == nil || !strings.Contains(err.Error(), `profiles[0].startup_timeout: cannot parse "soon"`) {
		t.Errorf("error %v, want one naming profiles[0].startup_timeout", err)
	}
}
