package proxmoxnode_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	agentconfig "github.com/llmgw/llmgw/agent/config"
	"github.com/llmgw/llmgw/spec"
	"github.com/llmgw/llmgw/testkit/tfacc"
)

// templateCase is one set of the template's inputs, as main.tf passes them,
// with the agent configuration they describe.
type templateCase struct {
	name string
	vars map[string]any
	want agentconfig.Agent
}

// agentFor is the agent configuration a node with these inputs runs with:
// the loader's defaults and what the module sets.
func agentFor(name, server, serverName, address string, d spec.Declaration) agentconfig.Agent {
	a := agentconfig.Default()
	a.NodeID, a.Server, a.ServerName, a.Address = name, server, serverName, address
	a.TLS = agentconfig.TLS{CA: vmCA, Cert: "/etc/llmgw/" + name + ".pem", Key: "/etc/llmgw/" + name + "-key.pem"}
	a.Declaration = d
	return a
}

func templateVars(name, server string, serverName any, address string, fabric any, engines, labels map[string]string, modelDirs []string, discovery map[string]string) map[string]any {
	return map[string]any{
		"name": name, "server": server, "server_name": serverName,
		"ca_path": vmCA, "cert_path": "/etc/llmgw/" + name + ".pem", "key_path": "/etc/llmgw/" + name + "-key.pem",
		"address": address, "fabric": fabric, "engines": engines, "labels": labels, "model_dirs": modelDirs, "discovery": discovery,
	}
}

var templateCases = []templateCase{
	{
		name: "everything",
		vars: templateVars("gpu-142", "10.0.0.140:7443", "llmgw-cp", "10.0.0.142",
			map[string]any{"name": "ib-a", "adapters": []string{"mlx5_0", "mlx5_1"}},
			map[string]string{"vllm": "/opt/venvs/vllm/bin/vllm", "llamacpp": "/usr/local/bin/llama-server"},
			map[string]string{"rack": "r1", "gpu": "h100"},
			[]string{"/var/lib/llmgw-models", "/srv/models"},
			map[string]string{"nvidia_smi": "/usr/bin/nvidia-smi", "ib_root": "/sys/class/infiniband", "cpuinfo": "/proc/cpuinfo"}),
		want: agentFor("gpu-142", "10.0.0.140:7443", "llmgw-cp", "10.0.0.142", spec.Declaration{
			Fabrics:   []spec.Fabric{{Name: "ib-a", Adapters: []string{"mlx5_0", "mlx5_1"}}},
			Engines:   map[string]string{"vllm": "/opt/venvs/vllm/bin/vllm", "llamacpp": "/usr/local/bin/llama-server"},
			Labels:    map[string]string{"rack": "r1", "gpu": "h100"},
			ModelDirs: []string{"/var/lib/llmgw-models", "/srv/models"},
			Discovery: spec.Discovery{NvidiaSMI: "/usr/bin/nvidia-smi", IBRoot: "/sys/class/infiniband", CPUInfo: "/proc/cpuinfo"},
		}),
	},
	{
		name: "only what is required",
		vars: templateVars("cpu-7", "cp.lab.example:7443", nil, "10.0.0.7", nil, map[string]string{}, map[string]string{}, []string{}, map[string]string{}),
		want: agentFor("cpu-7", "cp.lab.example:7443", "", "10.0.0.7", spec.Declaration{}),
	},
	{
		name: "values YAML would read as other types, IPv6",
		vars: templateVars("gpu-9", "[fd00::1]:7443", nil, "fd00::9", nil,
			map[string]string{"llamacpp": "/opt/llama server/bin/llama-server"},
			map[string]string{"dedicated": "true", "generation": "4", "topology.kubernetes.io/zone": "no", "note": "a: b # c"},
			[]string{"/models"},
			map[string]string{"cpuinfo": "/tmp/cpu info"}),
		want: agentFor("gpu-9", "[fd00::1]:7443", "", "fd00::9", spec.Declaration{
			Engines:   map[string]string{"llamacpp": "/opt/llama server/bin/llama-server"},
			Labels:    map[string]string{"dedicated": "true", "generation": "4", "topology.kubernetes.io/zone": "no", "note": "a: b # c"},
			ModelDirs: []string{"/models"},
			Discovery: spec.Discovery{CPUInfo: "/tmp/cpu info"},
		}),
	},
}

// TestTemplateIsTheMarshalledConfig renders agent.yaml.tftpl with the real
// terraform for representative inputs and checks each result against the
// agent configuration the same inputs describe, written by
// agentconfig.Marshal: the same keys with the same values, and the same
// configuration once read by the agent's strict loader. The template stays
// a template (Terraform cannot call Go); this test keeps it the marshalled
// form. The bytes differ only in quoting: the template quotes every string
// with jsonencode, Marshal only those YAML would read otherwise.
func TestTemplateIsTheMarshalledConfig(t *testing.T) {
	rendered := renderTemplate(t, templateCases)
	for _, tc := range templateCases {
		t.Run(tc.name, func(t *testing.T) {
			sameAgentConfig(t, []byte(rendered[tc.name]), tc.want)
		})
	}
}

// renderTemplate renders the template once per case with terraform's
// templatefile, as main.tf does, and returns the results by case name.
func renderTemplate(t *testing.T, cases []templateCase) map[string]string {
	t.Helper()
	tfacc.Require(t)
	bin := os.Getenv("TF_ACC_TERRAFORM_PATH")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("terraform"); err != nil {
			t.Fatalf("finding terraform: %v (set TF_ACC_TERRAFORM_PATH)", err)
		}
	}
	tmpl, err := filepath.Abs("agent.yaml.tftpl")
	if err != nil {
		t.Fatal(err)
	}
	// JSON values are HCL expressions: objects, lists, strings and null.
	var main strings.Builder
	for i, tc := range cases {
		vars, err := json.Marshal(tc.vars)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&main, "output \"c%d\" {\n  value = templatefile(%q, %s)\n}\n", i, tmpl, vars)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(main.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) []byte {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "TF_IN_AUTOMATION=1", "TF_INPUT=0", "CHECKPOINT_DISABLE=1")
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				stderr = exit.Stderr
			}
			t.Fatalf("terraform %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
		}
		return out
	}
	run("apply", "-input=false", "-no-color", "-auto-approve")
	var outputs map[string]struct {
		Value string `json:"value"`
	}
	if err := json.Unmarshal(run("output", "-json"), &outputs); err != nil {
		t.Fatal(err)
	}
	rendered := map[string]string{}
	for i, tc := range cases {
		rendered[tc.name] = outputs[fmt.Sprintf("c%d", i)].Value
	}
	return rendered
}

// sameAgentConfig checks that rendered, an agent.yaml the module wrote,
// is want's marshalled form: both hold the same keys with the same values
// (so the template writes no default of its own and leaves out nothing),
// and the agent's strict loader reads want from both.
func sameAgentConfig(t *testing.T, rendered []byte, want agentconfig.Agent) {
	t.Helper()
	marshalled, err := want.Marshal("")
	if err != nil {
		t.Fatal(err)
	}
	var fromTemplate, fromMarshal any
	if err := yaml.Unmarshal(rendered, &fromTemplate); err != nil {
		t.Fatalf("the rendered agent.yaml is not YAML: %v\n%s", err, rendered)
	}
	if err := yaml.Unmarshal(marshalled, &fromMarshal); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromTemplate, fromMarshal) {
		t.Errorf("the rendered agent.yaml holds\n%v\nthe marshalled form\n%v\nrendered:\n%s\nmarshalled:\n%s", fromTemplate, fromMarshal, rendered, marshalled)
	}
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, agentconfig.EnvPrefix) {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
	dir := t.TempDir()
	for file, data := range map[string][]byte{"rendered.yaml": rendered, "marshalled.yaml": marshalled} {
		path := filepath.Join(dir, file)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := agentconfig.Load(path)
		if err != nil {
			t.Fatalf("%s does not load: %v\n%s", file, err, data)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s loads as\n%+v\nwant\n%+v", file, got, want)
		}
	}
}
