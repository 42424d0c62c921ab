package proxmox

import (
	"strings"
	"testing"
)

func TestCloudInitFiles(t *testing.T) {
	f := Seed{Hostname: "gpu-42", VMID: 1042, SSHKeys: []string{"ssh-ed25519 AAAA op@x"}, Address: "10.0.0.42/24", Gateway: "10.0.0.1",
		Nameservers: []string{"10.0.0.1", "2001:db8::53"}, SearchDomains: []string{"lab.example"}}.Files()
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
	if ud := (Seed{Hostname: "h", UserData: "#cloud-config\nruncmd: [x]\n"}).Files()["user-data"]; ud != "#cloud-config\nruncmd: [x]\n" {
		t.Errorf("given user-data changed: %q", ud)
	}
	if b, err := (Seed{Hostname: "h", Address: "10.0.0.1/24"}).ISO(); err != nil || len(b) < 32*1024 {
		t.Errorf("ISO() = %d bytes, %v", len(b), err)
	}
}
