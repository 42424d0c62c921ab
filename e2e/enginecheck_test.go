package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/sim/simhw"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

// libgompMessage is what a node says when its llama-server cannot load
// libgomp (libgomp1 not installed).
const libgompMessage = "llama-server cannot start: libgomp.so.1: cannot open shared object file"

// TestEngineCheckAndAVX2 starts a node whose llama-server exists, is
// executable and cannot start (the dynamic loader refuses it for want of
// libgomp), on a CPU without AVX2 (a Proxmox guest on kvm64). The node is
// ready, but its reason names the engine and the library in the management
// API and `ctl nodes`, with the AVX2 warning; `terraform plan` of its
// llmgw_node warns about AVX2 and `terraform apply` fails with the engine's
// message instead of reporting a healthy node.
func TestEngineCheckAndAVX2(t *testing.T) {
	c := testcluster.New(t, binary, "10s", "  []\n")
	dir := t.TempDir()
	llama := filepath.Join(dir, "llama-server")
	script := "#!/bin/sh\necho \"$0: error while loading shared libraries: libgomp.so.1: cannot open shared object file: No such file or directory\" >&2\nexit 127\n"
	if err := os.WriteFile(llama, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cpuinfo := filepath.Join(dir, "cpuinfo")
	if err := simhw.WriteCPUInfo(cpuinfo, "Common KVM processor", 4, simhw.KVM64Flags); err != nil {
		t.Fatal(err)
	}
	c.StartAgent(testcluster.NodeSpec{ID: "cpu01", GPUs: 1, Engines: map[string]string{"llamacpp": llama}, CPUInfo: cpuinfo})
	mc := c.ManageClient()
	ctx := context.Background()

	var node *managev1.Node
	testcluster.WaitFor(t, "cpu01 to report its engine check and CPU", 30*time.Second, func() (bool, string) {
		n, err := mc.GetNode(ctx, &managev1.GetNodeRequest{Id: "cpu01"})
		if err != nil {
			return false, err.Error()
		}
		node = n
		return strings.Contains(n.GetReason(), libgompMessage) && len(n.GetWarnings()) > 0, fmt.Sprintf("%s: %q", n.GetState(), n.GetReason())
	})
	if node.GetState() != "ready" || node.HasAvx2 == nil || node.GetHasAvx2() || !strings.Contains(node.GetWarnings()[0], "AVX2") {
		t.Fatalf("cpu01 = %s, has_avx2 %v, warnings %q; want ready without AVX2 and warned", node.GetState(), node.HasAvx2, node.GetWarnings())
	}
	sawLlama := false
	for _, ec := range node.GetEngineChecks() {
		switch ec.GetEngine() {
		case "llamacpp":
			if ec.GetOk() || ec.GetPath() != llama || len(ec.GetLastOutput()) == 0 {
				t.Errorf("llamacpp check = %v", ec)
			}
			sawLlama = true
		case "sim":
			if !ec.GetOk() || !strings.Contains(ec.GetVersion(), "sim-engine version") {
				t.Errorf("sim check = %v; want the llmgw binary's sim-engine --version", ec)
			}
		}
	}
	if !sawLlama {
		t.Fatalf("no llamacpp check in %v", node.GetEngineChecks())
	}

	ctl := exec.Command(binary, "ctl", "nodes")
	ctl.Env = append(os.Environ(), "LLMGW_ENDPOINT="+c.Manage, "LLMGW_TOKEN="+c.Token, "LLMGW_CA_CERT="+filepath.Join(c.PKIDir, "ca.pem"))
	out, err := ctl.CombinedOutput()
	if err != nil {
		t.Fatalf("llmgw ctl nodes: %v\n%s", err, out)
	}
	for _, want := range []string{"cpu01: ready: " + libgompMessage, "CPU has no AVX2"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("llmgw ctl nodes lacks %q:\n%s", want, out)
		}
	}

	tf := testcluster.NewTerraform(t, c)
	nd := c.NodeDirs["cpu01"]
	mainTF := fmt.Sprintf(`terraform {
  required_providers {
    llmgw = { source = "llmgw/llmgw" }
  }
}

resource "llmgw_node" "cpu01" {
  name          = "cpu01"
  engines       = { llamacpp = %q }
  discovery     = { nvidia_smi = %q, ib_root = %q, cpuinfo = %q }
  ready_timeout = "60s"
}
`, llama, filepath.Join(nd, "nvidia-smi"), filepath.Join(nd, "infiniband"), cpuinfo)
	if err := os.WriteFile(filepath.Join(tf.Dir, "main.tf"), []byte(mainTF), 0o600); err != nil {
		t.Fatal(err)
	}
	tf.Run(0, "init", "-input=false")
	plan, _ := tf.Run(0, "plan", "-input=false", "-json")
	if d := diagnostic(t, plan, "warning", "AVX2"); !strings.Contains(d.Detail, "kvm64") {
		t.Errorf("plan warning = %+v; want it to say why (kvm64)", d)
	}
	apply, _ := tf.Run(1, "apply", "-input=false", "-auto-approve", "-json")
	if d := diagnostic(t, apply, "error", "Node cpu01 is not ready"); !strings.Contains(d.Detail, libgompMessage) {
		t.Errorf("apply error = %+v; want the engine's message %q", d, libgompMessage)
	}
}

type tfDiagnostic struct {
	Severity string `json:"severity"`
	Summary  string `json:"summary"`
	Detail   string `json:"detail"`
}

// diagnostic returns the first diagnostic of severity whose summary contains
// summary in terraform's -json output, failing the test when there is none.
func diagnostic(t *testing.T, out, severity, summary string) tfDiagnostic {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		var line struct {
			Type       string       `json:"type"`
			Diagnostic tfDiagnostic `json:"diagnostic"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Type != "diagnostic" {
			continue
		}
		if d := line.Diagnostic; d.Severity == severity && strings.Contains(d.Summary, summary) {
			return d
		}
	}
	t.Fatalf("no %s diagnostic about %q in terraform's output:\n%s", severity, summary, testcluster.Tail(out, 40))
	return tfDiagnostic{}
}
