package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
	pveapi "github.com/luthermonson/go-proxmox"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/provider/proxmox"
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

func TestResolvePVE(t *testing.T) {
	tests := []struct {
		name string
		cfg  *pveModel
		env  map[string]string
		want proxmox.Settings
	}{
		{
			name: "environment as bpg reads it",
			env:  map[string]string{EnvPVEEndpoint: "https://pve1:8006/", EnvPVEToken: "terraform@pve!llmgw=uuid-secret", EnvPVEInsecure: "true"},
			want: proxmox.Settings{Endpoint: "https://pve1:8006/api2/json", TokenID: "terraform@pve!llmgw", Secret: "uuid-secret", Insecure: true},
		},
		{
			name: "block wins",
			cfg: &pveModel{Endpoint: types.StringValue("https://pve2:8006/api2/json"), APITokenID: types.StringValue("a@pam!t"), APITokenSecret: types.StringValue("s"),
				Insecure: types.BoolValue(false), CAFile: types.StringValue("/ca.pem")},
			env:  map[string]string{EnvPVEEndpoint: "https://pve1:8006", EnvPVEToken: "x@pve!y=z", EnvPVEInsecure: "true"},
			want: proxmox.Settings{Endpoint: "https://pve2:8006/api2/json", TokenID: "a@pam!t", Secret: "s", CAFile: "/ca.pem"},
		},
		{name: "nothing set", want: proxmox.Settings{}},
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
		s    proxmox.Settings
		want []string
	}{
		{"nothing", proxmox.Settings{}, []string{"proxmox.endpoint (or PROXMOX_VE_ENDPOINT)", "PROXMOX_VE_API_TOKEN=USER@REALM!TOKENID=SECRET"}},
		{"no secret", proxmox.Settings{Endpoint: "https://pve1:8006/api2/json", TokenID: "a@pve!t"}, []string{"proxmox.api_token_secret"}},
		{"unreadable ca_file", proxmox.Settings{Endpoint: "https://pve1:8006/api2/json", TokenID: "a@pve!t", Secret: "s", CAFile: "/nonexistent/ca.pem"}, []string{"proxmox.ca_file", "/nonexistent/ca.pem"}},
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
		{"token", fmt.Errorf("listing: %w", pveapi.ErrNotAuthorized), "refused the API token", []string{"api_token_secret", EnvPVEToken, "Datastore.Allocate "}},
		{"tls", errors.New(`Get "https://pve1:8006/api2/json/cluster/resources": tls: failed to verify certificate: x509: certificate signed by unknown authority`), "TLS certificate", []string{"ca_file", "pve-root-ca.pem", "insecure"}},
		{"task", &proxmox.TaskError{What: "starting VM 142", UPID: "UPID:pve1:1:2:3:qmstart:142:root@pam:", Exit: "start failed: QEMU exited with code 1"}, "task failed", []string{"starting VM 142", "start failed: QEMU exited with code 1"}},
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
