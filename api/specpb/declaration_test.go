package specpb

import (
	"testing"

	"github.com/llmgw/llmgw/spec"
)

func TestProtoRoundTrip(t *testing.T) {
	d := spec.Declaration{
		Fabrics:   []spec.Fabric{{Name: "ib-a", Adapters: []string{"mlx5_0", "mlx5_1"}}},
		Engines:   map[string]string{"vllm": "/opt/vllm/bin/vllm"},
		Labels:    map[string]string{"zone": "eu"},
		ModelDirs: []string{"/models"},
		Discovery: spec.Discovery{NvidiaSMI: "/x/nvidia-smi", IBRoot: "/x/ib", CPUInfo: "/x/cpuinfo"},
	}
	got := DeclarationFromProto(DeclarationToProto(d))
	if got.Fabrics[0].Name != "ib-a" || len(got.Fabrics[0].Adapters) != 2 || got.Engines["vllm"] != d.Engines["vllm"] ||
		got.Labels["zone"] != "eu" || got.ModelDirs[0] != "/models" || got.Discovery != d.Discovery {
		t.Fatalf("round trip changed the declaration: %+v", got)
	}
}
