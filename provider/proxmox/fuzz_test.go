package proxmox

import (
	"encoding/json"
	"strings"
	"testing"

	pveapi "github.com/luthermonson/go-proxmox"
)

// FuzzVMConfigAnswer decodes what Proxmox might answer to GET
// /nodes/N/qemu/VMID/config (the {"data":{...}} envelope) and reads it as
// the provider does: the boot disk and its size, the bridge, the seed ISO,
// the cloud-init drives. Never a panic; a size is never negative (Proxmox
// sizes like size=99999999999T overflowed an int); the seed ISO is one of
// ours; replacing the bridge and reading it back gives the new bridge.
func FuzzVMConfigAnswer(f *testing.F) {
	for _, seed := range []string{
		`{"data":{"name":"gpu-142","cpu":"host","cores":4,"memory":"8192","boot":"order=scsi0;ide2","scsi0":"local-lvm:vm-142-disk-0,size=40G","ide2":"local:iso/llmgw-cidata-142.iso,media=cdrom","net0":"virtio=BC:24:11:00:00:01,bridge=vmbr0","ipconfig0":"ip=10.0.0.142/24,gw=10.0.0.1"}}`,
		`{"data":{"virtio0":"ceph:vm-9-disk-0,size=1T","ide0":"local-lvm:vm-9-cloudinit,media=cdrom","net0":"e1000=AA:BB:CC:DD:EE:FF"}}`,
		`{"data":{"scsi0":"x,size=99999999999999999999T","boot":"order="}}`,
		`{"data":{"sata0":"x:iso/llmgw-cidata-.iso","scsi1":"size=0.5","scsihw":"virtio-scsi-single","numa":1}}`,
		`{"data":{"scsi0":"local:100/base-100-disk-0.raw,size=2252M"}}`,
		`{"data":null}`,
		`{"data":{"memory":8192,"cores":"4"}}`,
	} {
		f.Add([]byte(seed), "vmbr1")
	}
	f.Fuzz(func(t *testing.T, answer []byte, bridge string) {
		var env struct {
			Data *pveapi.VirtualMachineConfig `json:"data"`
		}
		if json.Unmarshal(answer, &env) != nil || env.Data == nil {
			return // the client reports an undecodable answer as an error
		}
		cfg := env.Data
		disk, size := BootDisk(cfg)
		if size < 0 {
			t.Fatalf("boot disk %s has size %d GiB", disk, size)
		}
		if disk != "" && cfg.MergeDisks()[disk] == "" {
			t.Fatalf("boot disk %s is not a disk of the VM", disk)
		}
		if iso := SeedISOOf(cfg); iso != "" && (!strings.Contains(iso, ":iso/llmgw-cidata-") || !strings.HasSuffix(iso, ".iso")) {
			t.Fatalf("seed ISO %q is not one of ours", iso)
		}
		_ = CloudInitDrives(cfg)
		if strings.ContainsAny(bridge, ",=") || bridge == "" {
			return // not a bridge name Proxmox accepts
		}
		net0 := cfg.Nets["net0"]
		if got := BridgeOf(WithBridge(net0, bridge)); got != bridge {
			t.Fatalf("WithBridge(%q, %q) reads back bridge %q", net0, bridge, got)
		}
	})
}
