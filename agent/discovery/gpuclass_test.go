package discovery

import "testing"

func TestGPUClass(t *testing.T) {
	tests := []struct {
		name string
		mib  uint64
		want string
	}{
		{"NVIDIA H100 80GB HBM3", 81559, "h100-80g"},
		{"NVIDIA A100-SXM4-40GB", 40960, "a100-40g"},
		{"NVIDIA A100-SXM4-80GB", 81920, "a100-80g"},
		{"NVIDIA A100 80GB PCIe", 81920, "a100-80g"},
		{"NVIDIA A100-PCIE-40GB", 40960, "a100-40g"},
		{"NVIDIA L40S", 46068, "l40s-48g"},
		{"NVIDIA GeForce RTX 4090", 24564, "rtx4090-24g"},
		{"Tesla T4", 15360, "t4-16g"},
		{"Tesla V100-SXM2-32GB", 32768, "v100-32g"},
		{"NVIDIA A10", 23028, "a10-24g"},
		{"NVIDIA H100 NVL", 95830, "h100-94g"},
		{"NVIDIA H200", 143771, "h200-141g"},
		{"NVIDIA RTX 6000 Ada Generation", 49140, "rtx6000ada-48g"},
		{"NVIDIA L4", 23034, "l4-24g"},
		// The name wins over the reported memory.
		{"NVIDIA H100 80GB HBM3", 0, "h100-80g"},
		// Memory unknown and not in the name: the model alone.
		{"NVIDIA L40S", 0, "l40s"},
		// Larger than every marketed size: whole GB, rounded up.
		{"NVIDIA Future", 400 * 1024, "future-400g"},
		{"", 0, "unknown"},
		{"NVIDIA", 16384, "unknown-16g"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := GPUClass(tt.name, tt.mib); got != tt.want {
				t.Errorf("GPUClass(%q, %d) = %q, want %q", tt.name, tt.mib, got, tt.want)
			}
		})
	}
}
