package proxmox

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	pveapi "github.com/luthermonson/go-proxmox"
)

// ISODevice is the drive the seed ISO is attached to.
const ISODevice = "ide2"

// ISOName is the file name of VM vmid's seed ISO.
func ISOName(vmid int) string { return fmt.Sprintf("llmgw-cidata-%d.iso", vmid) }

// BootDisk is the VM's boot disk (the first disk of boot order, else the
// first of scsi0, virtio0, sata0, ide0) and its size in GiB.
func BootDisk(cfg *pveapi.VirtualMachineConfig) (string, int) {
	disks := map[string]string{}
	for _, m := range []map[string]string{cfg.SCSIs, cfg.VirtIOs, cfg.SATAs, cfg.IDEs} {
		for k, v := range m {
			// An empty entry is no disk, a CD-ROM or cloud-init drive no
			// boot disk.
			if v != "" && !strings.Contains(v, "media=cdrom") && !strings.Contains(v, "cloudinit") {
				disks[k] = v
			}
		}
	}
	var order []string
	if o, ok := strings.CutPrefix(cfg.Boot, "order="); ok {
		order = strings.Split(o, ";")
	}
	order = append(order, "scsi0", "virtio0", "sata0", "ide0")
	for _, d := range order {
		if v, ok := disks[d]; ok {
			return d, diskSizeGiB(v)
		}
	}
	return "", 0
}

var diskSizeRE = regexp.MustCompile(`(?:^|,)size=(\d+(?:\.\d+)?)([KMGT]?)`)

// diskSizeGiB reads size= of a disk's configuration, in whole GiB.
func diskSizeGiB(v string) int {
	m := diskSizeRE.FindStringSubmatch(v)
	if m == nil {
		return 0
	}
	f, _ := strconv.ParseFloat(m[1], 64)
	switch m[2] {
	case "T":
		f *= 1024
	case "M":
		f /= 1024
	case "K":
		f /= 1024 * 1024
	case "":
		f /= 1024 * 1024 * 1024
	}
	if f > math.MaxInt32 {
		return 0 // no disk is this large: a size that cannot be read
	}
	return int(f)
}

// CloudInitDrives are the VM's Proxmox cloud-init drives (a value naming a
// …-cloudinit volume) other than on ISODevice, where the seed replaces one,
// sorted.
func CloudInitDrives(cfg *pveapi.VirtualMachineConfig) []string {
	var out []string
	for k, v := range cfg.MergeDisks() {
		if k != ISODevice && strings.Contains(v, "cloudinit") {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// SeedISOOf is the volume of an llmgw seed ISO (llmgw-cidata-*.iso)
// attached to the VM, or "".
func SeedISOOf(cfg *pveapi.VirtualMachineConfig) string {
	for _, m := range []map[string]string{cfg.IDEs, cfg.SATAs, cfg.SCSIs} {
		for _, v := range m {
			vol, _, _ := strings.Cut(v, ",")
			if _, file, ok := strings.Cut(vol, ":iso/"); ok && strings.HasPrefix(file, "llmgw-cidata-") && strings.HasSuffix(file, ".iso") {
				return vol
			}
		}
	}
	return ""
}

// WithBridge is a net0 value with its bridge replaced (model and MAC kept).
func WithBridge(net0, bridge string) string {
	parts := strings.Split(net0, ",")
	found := false
	for i, p := range parts {
		if strings.HasPrefix(p, "bridge=") {
			parts[i], found = "bridge="+bridge, true
		}
	}
	if !found {
		parts = append(parts, "bridge="+bridge)
	}
	return strings.Join(parts, ",")
}

// BridgeOf is the bridge of a net0 value.
func BridgeOf(net0 string) string {
	for _, p := range strings.Split(net0, ",") {
		if b, ok := strings.CutPrefix(p, "bridge="); ok {
			return b
		}
	}
	return ""
}
