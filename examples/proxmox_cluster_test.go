package examples

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/pki"
	"github.com/llmgw/llmgw/testkit/pvefake"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

// TestProxmoxClusterPlan plans examples/proxmox-cluster with the real
// terraform against a control plane and the Proxmox VE fake: two fabrics
// and, per node, a certificate, a VM with cpu = host and its VMID from the
// address, and a declaration in the fabric the example gives it.
func TestProxmoxClusterPlan(t *testing.T) {
	if os.Getenv("TF_ACC") == "" {
		t.Skip("needs the real terraform: set TF_ACC=1 (and TF_ACC_TERRAFORM_PATH)")
	}
	binary, err := testcluster.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := testcluster.New(t, binary, "10s", "  []\n")
	pve := pvefake.New(t)
	tf := testcluster.NewTerraform(t, c)
	tf.Env = append(tf.Env, "LLMGW_CA_KEY="+filepath.Join(c.PKIDir, pki.CAKeyFile),
		"PROXMOX_VE_ENDPOINT="+pve.URL, "PROXMOX_VE_API_TOKEN="+pvefake.DefaultTokenID+"="+pvefake.DefaultSecret, "PROXMOX_VE_INSECURE=true")

	module, err := filepath.Abs("../modules/proxmox-node")
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(tf.Dir, module)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("proxmox-cluster/*.tf")
	if err != nil || len(files) == 0 {
		t.Fatalf("proxmox-cluster/*.tf: %v (found %d files)", err, len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// The module's path from the copy instead of from the example.
		s := strings.ReplaceAll(string(b), `"../../modules/proxmox-node"`, `"`+rel+`"`)
		if err := os.WriteFile(filepath.Join(tf.Dir, filepath.Base(f)), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	vars := "llmgw_binary = {\n  url    = \"http://10.0.0.140:8081/bin/llmgw-linux-amd64\"\n  sha256 = \"" + strings.Repeat("ab", 32) + "\"\n  size   = 41234432\n}\n"
	if err := os.WriteFile(filepath.Join(tf.Dir, "terraform.tfvars"), []byte(vars), 0o600); err != nil {
		t.Fatal(err)
	}
	tf.Run(0, "init", "-input=false", "-no-color")
	tf.Run(0, "validate", "-no-color")
	tf.Run(2, "plan", "-input=false", "-no-color", "-detailed-exitcode", "-out=tfplan")
	out, _ := tf.Run(0, "show", "-json", "tfplan")
	var plan struct {
		ResourceChanges []struct {
			Address string `json:"address"`
			Change  struct {
				Actions []string       `json:"actions"`
				After   map[string]any `json:"after"`
			} `json:"change"`
		} `json:"resource_changes"`
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatalf("reading the plan: %v", err)
	}
	after := map[string]map[string]any{}
	for _, rc := range plan.ResourceChanges {
		if !slices.Equal(rc.Change.Actions, []string{"create"}) {
			t.Errorf("%s: actions %v, want create", rc.Address, rc.Change.Actions)
		}
		after[rc.Address] = rc.Change.After
	}
	want := []string{`llmgw_fabric.this["ib-a"]`, `llmgw_fabric.this["ib-b"]`}
	for _, n := range []string{"gpu-141", "gpu-142", "gpu-143"} {
		// The certificate is ephemeral: never planned, never stored.
		for _, r := range []string{"llmgw_node", "llmgw_proxmox_vm"} {
			want = append(want, `module.node["`+n+`"].`+r+`.this`)
		}
	}
	if got := slices.Sorted(maps.Keys(after)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Fatalf("the plan creates %q, want %q", got, want)
	}
	for n, w := range map[string]struct {
		vmid   float64
		fabric string
	}{"gpu-141": {141, "ib-a"}, "gpu-142": {142, "ib-a"}, "gpu-143": {143, "ib-b"}} {
		vm := after[`module.node["`+n+`"].llmgw_proxmox_vm.this`]
		if vm["name"] != n || vm["cpu_type"] != "host" || vm["vmid"] != w.vmid {
			t.Errorf("VM of %s: name %v cpu_type %v vmid %v; want %s, host, %v", n, vm["name"], vm["cpu_type"], vm["vmid"], n, w.vmid)
		}
		node := after[`module.node["`+n+`"].llmgw_node.this`]
		if f, _ := node["fabric"].(map[string]any); f["name"] != w.fabric {
			t.Errorf("node %s: fabric %v, want %s", n, node["fabric"], w.fabric)
		}
		if _, ok := vm["user_data_wo_version"].(string); !ok || vm["user_data"] != nil {
			t.Errorf("VM of %s: user_data_wo_version %v, user_data %v; want the user-data write-only", n, vm["user_data_wo_version"], vm["user_data"])
		}
	}
}
