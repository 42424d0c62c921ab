//go:build nvml

package discovery

import (
	"fmt"
	"sort"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlDevice is one GPU as NVML listed it.
type nvmlDevice struct {
	dev   nvml.Device
	uuid  string
	index int
}

// readNVML reads through lib (an initialised NVML, or a stand-in following
// go-nvml's Interface) each device's UUID and index, its memory and
// utilisation, and for every pair of devices whether they reach each other
// over NVLink (nvmlDeviceGetP2PStatus with the NVLink capability). It
// fills gpus, matched by UUID: a GPU whose every pair was answered gets its
// peers and NVLinkKnown; a pair NVML could not answer leaves both GPUs'
// topology unknown. The note says what stayed unknown, "" when nothing did.
func readNVML(lib nvml.Interface, gpus []GPU) string {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return "NVLink topology unknown: NVML device count: " + ret.Error()
	}
	var devs []nvmlDevice
	for i := range n {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return fmt.Sprintf("NVLink topology unknown: NVML device %d: %s", i, ret.Error())
		}
		uuid, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			return fmt.Sprintf("NVLink topology unknown: NVML device %d UUID: %s", i, ret.Error())
		}
		idx, ret := d.GetIndex()
		if ret != nvml.SUCCESS {
			idx = i
		}
		devs = append(devs, nvmlDevice{dev: d, uuid: uuid, index: idx})
	}
	byUUID := map[string]int{}
	for i := range gpus {
		byUUID[gpus[i].UUID] = i
	}
	for _, d := range devs {
		i, ok := byUUID[d.uuid]
		if !ok {
			continue
		}
		g := &gpus[i]
		if mem, ret := d.dev.GetMemoryInfo(); ret == nvml.SUCCESS {
			if g.MemoryMiB == 0 {
				g.MemoryMiB = mem.Total >> 20
			}
			if g.MemoryUsedMiB == nil {
				used := mem.Used >> 20
				g.MemoryUsedMiB = &used
			}
		}
		if g.UtilizationPct == nil {
			if u, ret := d.dev.GetUtilizationRates(); ret == nvml.SUCCESS {
				pct := float64(u.Gpu)
				g.UtilizationPct = &pct
			}
		}
	}
	peers := map[string][]int{}
	unknown := map[string]string{}
	for a := range devs {
		for b := a + 1; b < len(devs); b++ {
			st, ret := devs[a].dev.GetP2PStatus(devs[b].dev, nvml.P2P_CAPS_INDEX_NVLINK)
			if ret != nvml.SUCCESS {
				why := ret.Error()
				unknown[devs[a].uuid], unknown[devs[b].uuid] = why, why
				continue
			}
			if st == nvml.P2P_STATUS_OK {
				peers[devs[a].uuid] = append(peers[devs[a].uuid], devs[b].index)
				peers[devs[b].uuid] = append(peers[devs[b].uuid], devs[a].index)
			}
		}
	}
	known := map[string][]int{}
	for _, d := range devs {
		if _, bad := unknown[d.uuid]; bad {
			continue
		}
		p := peers[d.uuid]
		sort.Ints(p)
		known[d.uuid] = append([]int{}, p...) // empty, not nil: known to have none
	}
	applyTopology(gpus, known)
	var missing []string
	for _, g := range gpus {
		if !g.NVLinkKnown {
			why := unknown[g.UUID]
			if why == "" {
				why = "not listed by NVML"
			}
			missing = append(missing, fmt.Sprintf("GPU %d (%s)", g.Index, why))
		}
	}
	if len(missing) > 0 {
		return "NVLink topology unknown for " + strings.Join(missing, ", ")
	}
	return ""
}

// applyTopology sets on each GPU of gpus its NVLink peers from peers (by
// GPU UUID: peer indices), marking the GPUs present in peers as known.
func applyTopology(gpus []GPU, peers map[string][]int) {
	for i := range gpus {
		p, ok := peers[gpus[i].UUID]
		if !ok {
			continue
		}
		gpus[i].NVLinkKnown = true
		gpus[i].NVLinkPeers = append([]int(nil), p...)
	}
}
