//go:build nvml

package discovery

import (
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// withP2P has the mock server's devices answer nvmlDeviceGetP2PStatus for
// the NVLink capability by linked (index pairs), or fail with ret for the
// pairs fail names.
func withP2P(s *server.Server, linked func(a, b int) bool, fail func(a, b int) bool) {
	for _, d := range s.Devices {
		dev := d.(*server.Device)
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: uint32(10 * dev.Index)}, nvml.SUCCESS
		}
		dev.GetP2PStatusFunc = func(other nvml.Device, caps nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
			o := other.(*server.Device)
			if caps != nvml.P2P_CAPS_INDEX_NVLINK {
				return nvml.P2P_STATUS_UNKNOWN, nvml.ERROR_INVALID_ARGUMENT
			}
			if fail != nil && fail(dev.Index, o.Index) {
				return nvml.P2P_STATUS_UNKNOWN, nvml.ERROR_NOT_SUPPORTED
			}
			if linked(dev.Index, o.Index) {
				return nvml.P2P_STATUS_OK, nvml.SUCCESS
			}
			return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
		}
	}
}

// smiGPUs is what nvidia-smi listed for the mock's devices.
func smiGPUs(s *server.Server) []GPU {
	var out []GPU
	for _, d := range s.Devices {
		dev := d.(*server.Device)
		out = append(out, GPU{Index: dev.Index, UUID: dev.UUID, Name: "NVIDIA H100 80GB HBM3"})
	}
	return out
}

// TestReadNVML runs the NVML reading against go-nvml's own mock of a DGX
// H100 (8 H100 SXM5, its mock device answers) with the NVLink answers of
// three machines: an NVSwitch board where every pair is linked, a PCIe box
// whose bridges pair 0-1, 2-3, 4-5, 6-7, and a driver that cannot answer
// for GPU 7.
func TestReadNVML(t *testing.T) {
	t.Run("nvswitch", func(t *testing.T) {
		s := dgxh100.New()
		withP2P(s, func(a, b int) bool { return true }, nil)
		gpus := smiGPUs(s)
		if note := readNVML(s, gpus); note != "" {
			t.Fatalf("note %q, want none", note)
		}
		for _, g := range gpus {
			if !g.NVLinkKnown || len(g.NVLinkPeers) != 7 || slices.Contains(g.NVLinkPeers, g.Index) {
				t.Errorf("GPU %d: known %v peers %v, want the 7 others", g.Index, g.NVLinkKnown, g.NVLinkPeers)
			}
			if g.MemoryMiB != 81920 || g.MemoryUsedMiB == nil || g.UtilizationPct == nil || *g.UtilizationPct != float64(10*g.Index) {
				t.Errorf("GPU %d: memory %d used %v utilisation %v from NVML", g.Index, g.MemoryMiB, g.MemoryUsedMiB, g.UtilizationPct)
			}
		}
	})
	t.Run("pcie pairs", func(t *testing.T) {
		s := dgxh100.New()
		withP2P(s, func(a, b int) bool { return a^1 == b }, nil)
		gpus := smiGPUs(s)
		if note := readNVML(s, gpus); note != "" {
			t.Fatalf("note %q", note)
		}
		for _, g := range gpus {
			if !g.NVLinkKnown || !slices.Equal(g.NVLinkPeers, []int{g.Index ^ 1}) {
				t.Errorf("GPU %d: known %v peers %v, want [%d]", g.Index, g.NVLinkKnown, g.NVLinkPeers, g.Index^1)
			}
		}
	})
	t.Run("no nvlink is known, not unknown", func(t *testing.T) {
		s := dgxh100.New()
		withP2P(s, func(a, b int) bool { return false }, nil)
		gpus := smiGPUs(s)
		readNVML(s, gpus)
		if !gpus[0].NVLinkKnown || len(gpus[0].NVLinkPeers) != 0 {
			t.Errorf("GPU 0: known %v peers %v, want known with none", gpus[0].NVLinkKnown, gpus[0].NVLinkPeers)
		}
	})
	t.Run("a pair NVML cannot answer stays unknown", func(t *testing.T) {
		s := dgxh100.New()
		withP2P(s, func(a, b int) bool { return true }, func(a, b int) bool { return a == 7 || b == 7 })
		gpus := smiGPUs(s)
		note := readNVML(s, gpus)
		if gpus[7].NVLinkKnown || gpus[0].NVLinkKnown {
			t.Errorf("GPU 7 and its partners: known %v %v, want unknown", gpus[7].NVLinkKnown, gpus[0].NVLinkKnown)
		}
		if !strings.Contains(note, "GPU 7 (") || !strings.HasPrefix(note, "NVLink topology unknown for ") {
			t.Errorf("note %q", note)
		}
	})
}
