//go:build nvml

package discovery

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ProbeTopology reads the NVLink topology of gpus (as nvidia-smi listed
// them) from the NVIDIA driver's NVML library, loaded at run time: each GPU
// NVML answered for gets its peers and NVLinkKnown, and memory and
// utilisation where nvidia-smi left them unknown. When NVML cannot be
// loaded or answers nothing, the topology stays unknown and note says why.
func ProbeTopology(gpus []GPU) (note string) {
	if len(gpus) == 0 {
		return ""
	}
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return "NVLink topology unknown: NVML did not start: " + ret.Error()
	}
	defer lib.Shutdown()
	return readNVML(lib, gpus)
}
