package provider

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
	proxmox "github.com/luthermonson/go-proxmox"

	managev1 "github.com/llmgw/llmgw/api/managev1"
)

func TestVMIDOf(t *testing.T) {
	tests := []struct {
		cidr    string
		want    int
		wantErr string
	}{
		{cidr: "10.0.0.142/24", want: 142},
		{cidr: "192.168.7.254/16", want: 254},
		{cidr: "10.0.0.42/24", wantErr: "Proxmox VMIDs start at 100: set vmid explicitly (e.g. 1042)"},
		{cidr: "fd00::5/64", wantErr: "not an IPv4 CIDR"},
		{cidr: "10.0.0.142", wantErr: "not an IPv4 CIDR"},
	}
	for _, tt := range tests {
		t.Run(tt.cidr, func(t *testing.T) {
			got, err := vmidOf(tt.cidr)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("vmidOf(%q) error = %v, want %q", tt.cidr, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("vmidOf(%q) = %d, %v; want %d", tt.cidr, got, err, tt.want)
			}
		})
	}
}

// TestConfigSetAndDiffers: a first-boot input replaces the VM only when the
// configuration sets a value and the state has one; an unset or empty value
// (a VM imported into a configuration without it) replaces nothing.
func TestConfigSetAndDiffers(t *testing.T) {
	str := func(v *string) types.String {
		if v == nil {
			return types.StringNull()
		}
		return types.StringValue(*v)
	}
	gw, other, empty := "10.0.0.1", "10.0.0.254", ""
	tests := []struct {
		name          string
		config, state *string
		want          bool
	}{
		{name: "changed", config: &other, state: &gw, want: true},
		{name: "unset after import", config: nil, state: &gw, want: false},
		{name: "empty after import", config: &empty, state: &gw, want: false},
		{name: "not read by import", config: &gw, state: nil, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var resp stringplanmodifier.RequiresReplaceIfFuncResponse
			configSetAndDiffers(context.Background(), planmodifier.StringRequest{ConfigValue: str(tt.config), PlanValue: str(tt.config), StateValue: str(tt.state)}, &resp)
			if resp.RequiresReplace != tt.want {
				t.Fatalf("string: RequiresReplace = %v, want %v", resp.RequiresReplace, tt.want)
			}
			list := func(v *string) types.List {
				if v == nil {
					return types.ListNull(types.StringType)
				}
				if *v == "" {
					return types.ListValueMust(types.StringType, nil)
				}
				return types.ListValueMust(types.StringType, []attr.Value{types.StringValue(*v)})
			}
			var lresp listplanmodifier.RequiresReplaceIfFuncResponse
			listConfigSetAndDiffers(context.Background(), planmodifier.ListRequest{ConfigValue: list(tt.config), PlanValue: list(tt.config), StateValue: list(tt.state)}, &lresp)
			if lresp.RequiresReplace != tt.want {
				t.Fatalf("list: RequiresReplace = %v, want %v", lresp.RequiresReplace, tt.want)
			}
		})
	}
}

func TestCPUTypeWarning(t *testing.T) {
	for _, cpu := range []string{"host", "host,flags=+aes"} {
		if w := cpuTypeWarning(cpu); w != "" {
			t.Errorf("%s warns: %q", cpu, w)
		}
	}
	for _, cpu := range []string{"kvm64", "x86-64-v2-AES"} {
		w := cpuTypeWarning(cpu)
		for _, want := range []string{cpu, "AVX2", "several times slower", `cpu_type = "host"`} {
			if !strings.Contains(w, want) {
				t.Errorf("cpuTypeWarning(%q) = %q lacks %q", cpu, w, want)
			}
		}
	}
}

func TestBootDisk(t *testing.T) {
	tests := []struct {
		name     string
		cfg      proxmox.VirtualMachineConfig
		wantDisk string
		wantSize int
	}{
		{"scsi0 in GiB", proxmox.VirtualMachineConfig{SCSIs: map[string]string{"scsi0": "local-lvm:vm-1-disk-0,size=32G"}}, "scsi0", 32},
		{"boot order wins", proxmox.VirtualMachineConfig{Boot: "order=virtio1;net0", VirtIOs: map[string]string{"virtio0": "a:x,size=8G", "virtio1": "a:y,size=2T"}}, "virtio1", 2048},
		{"cdrom and cloudinit drives skipped", proxmox.VirtualMachineConfig{IDEs: map[string]string{"ide2": "local:iso/x.iso,media=cdrom", "ide0": "local-lvm:vm-1-cloudinit,media=cdrom"}, SATAs: map[string]string{"sata0": "a:z,size=4096M"}}, "sata0", 4},
		{"no disk", proxmox.VirtualMachineConfig{}, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, s := bootDisk(&tt.cfg)
			if d != tt.wantDisk || s != tt.wantSize {
				t.Fatalf("bootDisk = %s, %d; want %s, %d", d, s, tt.wantDisk, tt.wantSize)
			}
		})
	}
}

func TestCloudInitDrives(t *testing.T) {
	tests := []struct {
		name string
		cfg  proxmox.VirtualMachineConfig
		want []string
	}{
		{"on ide2, replaced by the seed", proxmox.VirtualMachineConfig{IDEs: map[string]string{"ide2": "local-lvm:vm-142-cloudinit,media=cdrom"}}, nil},
		{"on scsi1 and ide0", proxmox.VirtualMachineConfig{
			IDEs:  map[string]string{"ide0": "local-lvm:vm-142-cloudinit,media=cdrom", "ide2": "local:iso/llmgw-cidata-142.iso,media=cdrom"},
			SCSIs: map[string]string{"scsi0": "local-lvm:vm-142-disk-0,size=4G", "scsi1": "local-lvm:vm-142-cloudinit,media=cdrom"},
		}, []string{"ide0", "scsi1"}},
		{"none", proxmox.VirtualMachineConfig{SCSIs: map[string]string{"scsi0": "local-lvm:vm-142-disk-0,size=4G"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cloudInitDrives(&tt.cfg); !slices.Equal(got, tt.want) {
				t.Fatalf("cloudInitDrives = %v, want %v", got, tt.want)
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
		if got := withBridge(tt.net0, tt.bridge); got != tt.want {
			t.Errorf("withBridge(%q, %q) = %q, want %q", tt.net0, tt.bridge, got, tt.want)
		}
		if got := bridgeOf(withBridge(tt.net0, tt.bridge)); got != tt.bridge {
			t.Errorf("bridgeOf = %q, want %q", got, tt.bridge)
		}
	}
}

func TestResolvePVE(t *testing.T) {
	tests := []struct {
		name string
		cfg  *pveModel
		env  map[string]string
		want pveSettings
	}{
		{
			name: "environment as bpg reads it",
			env:  map[string]string{EnvPVEEndpoint: "https://pve1:8006/", EnvPVEToken: "terraform@pve!llmgw=uuid-secret", EnvPVEInsecure: "true"},
			want: pveSettings{Endpoint: "https://pve1:8006/api2/json", TokenID: "terraform@pve!llmgw", Secret: "uuid-secret", Insecure: true},
		},
		{
			name: "block wins",
			cfg: &pveModel{Endpoint: types.StringValue("https://pve2:8006/api2/json"), APITokenID: types.StringValue("a@pam!t"), APITokenSecret: types.StringValue("s"),
				Insecure: types.BoolValue(false), CAFile: types.StringValue("/ca.pem")},
			env:  map[string]string{EnvPVEEndpoint: "https://pve1:8006", EnvPVEToken: "x@pve!y=z", EnvPVEInsecure: "true"},
			want: pveSettings{Endpoint: "https://pve2:8006/api2/json", TokenID: "a@pam!t", Secret: "s", CAFile: "/ca.pem"},
		},
		{name: "nothing set", want: pveSettings{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.cfg.resolve(func(k string) string { return tt.env[k] }); got != tt.want {
				t.Fatalf("resolve = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestNewPVEMissing(t *testing.T) {
	tests := []struct {
		name string
		s    pveSettings
		want []string
	}{
		{"nothing", pveSettings{}, []string{"proxmox.endpoint (or PROXMOX_VE_ENDPOINT)", "PROXMOX_VE_API_TOKEN=USER@REALM!TOKENID=SECRET"}},
		{"no secret", pveSettings{Endpoint: "https://pve1:8006/api2/json", TokenID: "a@pve!t"}, []string{"proxmox.api_token_secret"}},
		{"unreadable ca_file", pveSettings{Endpoint: "https://pve1:8006/api2/json", TokenID: "a@pve!t", Secret: "s", CAFile: "/nonexistent/ca.pem"}, []string{"proxmox.ca_file", "/nonexistent/ca.pem"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, missing := newPVE(tt.s)
			if p != nil {
				t.Fatal("a client was made")
			}
			for _, w := range tt.want {
				if !strings.Contains(missing, w) {
					t.Errorf("missing = %q, want it to contain %q", missing, w)
				}
			}
		})
	}
}

func TestExplainPVE(t *testing.T) {
	tests := []struct {
		name        string
		err         error
		wantSummary string
		wantDetail  []string
	}{
		{"token", fmt.Errorf("listing: %w", proxmox.ErrNotAuthorized), "refused the API token", []string{"api_token_secret", EnvPVEToken, "Datastore.Allocate "}},
		{"tls", errors.New(`Get "https://pve1:8006/api2/json/cluster/resources": tls: failed to verify certificate: x509: certificate signed by unknown authority`), "TLS certificate", []string{"ca_file", "pve-root-ca.pem", "insecure"}},
		{"task", &pveTaskError{what: "starting VM 142", upid: "UPID:pve1:1:2:3:qmstart:142:root@pam:", exit: "start failed: QEMU exited with code 1"}, "task failed", []string{"starting VM 142", "start failed: QEMU exited with code 1"}},
		{"locked", errors.New("500 VM 142 is locked (backup)"), "locked", []string{"VM 142 is locked (backup)", "qm unlock"}},
		{"unreachable", errors.New("dial tcp 10.0.0.2:8006: connect: connection refused"), "Cannot reach", []string{"https://pve1:8006/api2/json", EnvPVEEndpoint}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			summary, detail := explainPVE("https://pve1:8006/api2/json", "creating VM 142 (gpu-42)", tt.err)
			if !strings.Contains(summary, tt.wantSummary) {
				t.Errorf("summary = %q, want %q", summary, tt.wantSummary)
			}
			for _, w := range tt.wantDetail {
				if !strings.Contains(detail, w) {
					t.Errorf("detail = %q, want it to contain %q", detail, w)
				}
			}
		})
	}
}

func TestCloudInitFiles(t *testing.T) {
	f := cloudInit{Hostname: "gpu-42", VMID: 1042, SSHKeys: []string{"ssh-ed25519 AAAA op@x"}, Address: "10.0.0.42/24", Gateway: "10.0.0.1",
		Nameservers: []string{"10.0.0.1", "2001:db8::53"}, SearchDomains: []string{"lab.example"}}.files()
	for name, want := range map[string][]string{
		"user-data": {"#cloud-config", "hostname: gpu-42"},
		"meta-data": {"instance-id: llmgw-gpu-42-1042", "local-hostname: gpu-42", `- "ssh-ed25519 AAAA op@x"`},
		"network-config": {"version: 2", `addresses: ["10.0.0.42/24"]`, `via: "10.0.0.1"`,
			"    nameservers:\n      addresses: [\"10.0.0.1\", \"2001:db8::53\"]\n      search: [\"lab.example\"]\n"},
	} {
		for _, w := range want {
			if !strings.Contains(f[name], w) {
				t.Errorf("%s = %q lacks %q", name, f[name], w)
			}
		}
	}
	if ud := (cloudInit{Hostname: "h", UserData: "#cloud-config\nruncmd: [x]\n"}).files()["user-data"]; ud != "#cloud-config\nruncmd: [x]\n" {
		t.Errorf("given user-data changed: %q", ud)
	}
	if b, err := (cloudInit{Hostname: "h", Address: "10.0.0.1/24"}).iso(); err != nil || len(b) < 32*1024 {
		t.Errorf("iso() = %d bytes, %v", len(b), err)
	}
}

// Only a session newer than the one seen before the VM started is the VM's
// agent: the old machine's entry, still ready or draining within its grace
// period, is not.
func TestSessionAfter(t *testing.T) {
	tests := []struct {
		name  string
		node  *managev1.Node
		after int64
		want  bool
	}{
		{"unknown node", nil, 0, false},
		{"old machine's entry, disconnected", &managev1.Node{State: "draining", ConnectedSinceUnixMs: 1000}, 1000, false},
		{"old machine's agent still connected", &managev1.Node{State: "ready", Connected: true, ConnectedSinceUnixMs: 1000}, 1000, false},
		{"stale entry, disconnected, newer", &managev1.Node{State: "ready", ConnectedSinceUnixMs: 2000}, 1000, false},
		{"new session", &managev1.Node{State: "draining", Connected: true, ConnectedSinceUnixMs: 2000}, 1000, true},
		{"first node of that name", &managev1.Node{State: "pending", Connected: true, ConnectedSinceUnixMs: 5}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sessionAfter(tt.node, tt.after); got != tt.want {
				t.Errorf("sessionAfter(%v, %d) = %v, want %v", tt.node, tt.after, got, tt.want)
			}
		})
	}
}

func TestSeedISOOf(t *testing.T) {
	tests := []struct {
		name string
		cfg  proxmox.VirtualMachineConfig
		want string
	}{
		{"ours on ide2", proxmox.VirtualMachineConfig{IDEs: map[string]string{"ide2": "local:iso/llmgw-cidata-142.iso,media=cdrom"}}, "local:iso/llmgw-cidata-142.iso"},
		{"detached", proxmox.VirtualMachineConfig{IDEs: map[string]string{"ide2": "none,media=cdrom"}}, ""},
		{"another ISO", proxmox.VirtualMachineConfig{IDEs: map[string]string{"ide2": "local:iso/ubuntu-24.04.iso,media=cdrom"}}, ""},
		{"Proxmox's own cloud-init drive", proxmox.VirtualMachineConfig{IDEs: map[string]string{"ide2": "local-lvm:vm-142-cloudinit,media=cdrom"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := seedISOOf(&tt.cfg); got != tt.want {
				t.Errorf("seedISOOf = %q, want %q", got, tt.want)
			}
		})
	}
}
