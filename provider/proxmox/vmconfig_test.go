package proxmox

import (
	"slices"
	"testing"

	pveapi "github.com/luthermonson/go-proxmox"
)

func TestBootDisk(t *testing.T) {
	tests := []struct {
		name     string
		cfg      pveapi.VirtualMachineConfig
		wantDisk string
		wantSize int
	}{
		{"scsi0 in GiB", pveapi.VirtualMachineConfig{SCSIs: map[string]string{"scsi0": "local-lvm:vm-1-disk-0,size=32G"}}, "scsi0", 32},
		{"boot order wins", pveapi.VirtualMachineConfig{Boot: "order=virtio1;net0", VirtIOs: map[string]string{"virtio0": "a:x,size=8G", "virtio1": "a:y,size=2T"}}, "virtio1", 2048},
		{"cdrom and cloudinit drives skipped", pveapi.VirtualMachineConfig{IDEs: map[string]string{"ide2": "local:iso/x.iso,media=cdrom", "ide0": "local-lvm:vm-1-cloudinit,media=cdrom"}, SATAs: map[string]string{"sata0": "a:z,size=4096M"}}, "sata0", 4},
		{"no disk", pveapi.VirtualMachineConfig{}, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, s := BootDisk(&tt.cfg)
			if d != tt.wantDisk || s != tt.wantSize {
				t.Fatalf("BootDisk = %s, %d; want %s, %d", d, s, tt.wantDisk, tt.wantSize)
			}
		})
	}
}

func TestCloudInitDrives(t *testing.T) {
	tests := []struct {
		name string
		cfg  pveapi.VirtualMachineConfig
		want []string
	}{
		{"on ide2, replaced by the seed", pveapi.VirtualMachineConfig{IDEs: map[string]string{"ide2": "local-lvm:vm-142-cloudinit,media=cdrom"}}, nil},
		{"on scsi1 and ide0", pveapi.VirtualMachineConfig{
			IDEs:  map[string]string{"ide0": "local-lvm:vm-142-cloudinit,media=cdrom", "ide2": "local:iso/llmgw-cidata-142.iso,media=cdrom"},
			SCSIs: map[string]string{"scsi0": "local-lvm:vm-142-disk-0,size=4G", "scsi1": "local-lvm:vm-142-cloudinit,media=cdrom"},
		}, []string{"ide0", "scsi1"}},
		{"none", pveapi.VirtualMachineConfig{SCSIs: map[string]string{"scsi0": "local-lvm:vm-142-disk-0,size=4G"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CloudInitDrives(&tt.cfg); !slices.Equal(got, tt.want) {
				t.Fatalf("CloudInitDrives = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestWithBridge(t *testing.T) {
	tests := []struct{ net0, bridge, want string }{
		{"virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=1", "vmbr1", "virtio=BC:24:11:00:00:01,bridge=vmbr1,firewall=1"},
		{"virtio=BC:24:11:00:00:01", "vmbr2", "virtio=BC:24:11:00:00:01,bridge=vmbr2"},
	}
	for _, tt := range tests {
		if got := WithBridge(tt.net0, tt.bridge); got != tt.want {
			t.Errorf("WithBridge(%q, %q) = %q, want %q", tt.net0, tt.bridge, got, tt.want)
		}
		if got := BridgeOf(WithBridge(tt.net0, tt.bridge)); got != tt.bridge {
			t.Errorf("BridgeOf = %q, want %q", got, tt.bridge)
		}
	}
}

func TestSeedISOOf(t *testing.T) {
	tests := []struct {
		name string
		cfg  pveapi.VirtualMachineConfig
		want string
	}{
		{"ours on ide2", pveapi.VirtualMachineConfig{IDEs: map[string]string{"ide2": "local:iso/llmgw-cidata-142.iso,media=cdrom"}}, "local:iso/llmgw-cidata-142.iso"},
		{"detached", pveapi.VirtualMachineConfig{IDEs: map[string]string{"ide2": "none,media=cdrom"}}, ""},
		{"another ISO", pveapi.VirtualMachineConfig{IDEs: map[string]string{"ide2": "local:iso/ubuntu-24.04.iso,media=cdrom"}}, ""},
		{"Proxmox's own cloud-init drive", pveapi.VirtualMachineConfig{IDEs: map[string]string{"ide2": "local-lvm:vm-142-cloudinit,media=cdrom"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SeedISOOf(&tt.cfg); got != tt.want {
				t.Errorf("SeedISOOf = %q, want %q", got, tt.want)
			}
		})
	}
}
