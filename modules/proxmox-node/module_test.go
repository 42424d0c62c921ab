// Package proxmoxnode_test runs the proxmox-node module with the real
// terraform CLI and the provider built from this repository, against the
// Proxmox VE fake (testkit/pvefake) and a real control plane
// (testkit/testcluster). The booted VM is played by an agent started on
// this machine from what the VM would have run: the user-data the fake
// received on the cloud-init ISO. Those tests run under TF_ACC, like the
// provider's acceptance tests; the install script's own test does not.
package proxmoxnode_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/llmgw/llmgw/pki"
	"github.com/llmgw/llmgw/runtime/config"
	"github.com/llmgw/llmgw/sim/simhw"
	"github.com/llmgw/llmgw/spec"
	"github.com/llmgw/llmgw/testkit/pvefake"
	"github.com/llmgw/llmgw/testkit/testcluster"
	"github.com/llmgw/llmgw/testkit/tfacc"
)

// The user-data's paths on the VM, which the test maps under a directory of
// its own.
const (
	vmBinary  = "/usr/local/bin/llmgw"
	vmInstall = "/usr/local/lib/llmgw/install-llmgw"
	vmConfig  = "/etc/llmgw/agent.yaml"
	vmCA      = "/etc/llmgw/ca.pem"
	vmUnit    = "/etc/systemd/system/llmgw-agent.service"
)

// libgompScript fails like a llama-server built against a libgomp the node
// lacks.
const libgompScript = "#!/bin/sh\necho \"$0: error while loading shared libraries: libgomp.so.1: cannot open shared object file: No such file or directory\" >&2\nexit 127\n"

// versionScript answers --version like llama-server.
const versionScript = "#!/bin/sh\necho 'version: 4567 (abcdef0)'\necho 'built with cc for x86_64-linux-gnu'\n"

// TestModule applies the module once per case, each a node of its own on
// one control plane (with agents.require_declared on) and one Proxmox. An
// agent configured from the user-data the fake received stands in for the
// booted VM. A node whose engine runs reaches ready, the ISO is gone, a
// second plan is empty and destroy removes VM and node; a node whose
// llama-server lacks libgomp fails apply with the engine's own message,
// and once the engine is fixed the next apply brings it back, ready with
// the same certificate.
func TestModule(t *testing.T) {
	h := newHarness(t)
	t.Run("ready", func(t *testing.T) {
		n := h.node(t, "gpu-142", 142, versionScript)
		n.writeRoot(t)
		n.tf.Run(0, "init", "-input=false", "-no-color")
		apply := n.startApply(t)
		ud := n.awaitUserData(t, apply)
		boot := n.checkUserData(t, ud)
		n.checkInstallRefuses(t, boot)
		agent := boot.start(t)
		out, code := apply.wait(t)
		if code != 0 {
			t.Fatalf("apply exited %d:\n%s", code, testcluster.Tail(out, 60))
		}
		outputs := n.outputs(t)
		want := map[string]any{"node_id": "gpu-142", "vmid": 142.0, "vm_id": "pve1/142", "address": "10.0.0.142", "status": "ready", "cloud_init_iso_removed": true}
		for k, v := range want {
			if outputs[k] != v {
				t.Errorf("output %s = %v, want %v (outputs %v)", k, outputs[k], v, outputs)
			}
		}
		n.checkISORemoved(t)
		n.checkStateFiles(t, boot)
		if key := string(boot.files["/etc/llmgw/gpu-142-key.pem"]); strings.Contains(out, "PRIVATE KEY") || strings.Contains(agent.Output(), key) {
			t.Errorf("the node's private key appears in the apply output or the agent's log")
		}
		n.tf.Run(0, "plan", "-input=false", "-no-color", "-detailed-exitcode")
		n.checkPlanHasNoKey(t, boot)

		n.tf.Run(0, "destroy", "-input=false", "-no-color", "-auto-approve")
		if _, ok := h.pve.VM(142); ok {
			t.Errorf("VM 142 still exists after destroy")
		}
	})
	t.Run("engine check fails", func(t *testing.T) {
		n := h.node(t, "cpu-143", 143, libgompScript)
		n.writeRoot(t)
		n.tf.Run(0, "init", "-input=false", "-no-color")
		apply := n.startApply(t)
		boot := n.checkUserData(t, n.awaitUserData(t, apply))
		agent := boot.start(t)
		out, code := apply.wait(t)
		if code == 0 {
			t.Fatalf("apply succeeded though llama-server cannot start:\n%s", testcluster.Tail(out, 40))
		}
		flat := strings.Join(strings.Fields(out), " ")
		for _, want := range []string{
			"Error: Node cpu-143 is not ready",
			"llama-server cannot start: libgomp.so.1: cannot open shared object file: No such file or directory",
		} {
			if !strings.Contains(flat, want) {
				t.Errorf("apply output lacks %q:\n%s", want, testcluster.Tail(out, 40))
			}
		}
		// The node registered, so the ISO with its key is gone all the same.
		n.checkISORemoved(t)

		// The operator installs libgomp (here: the engine now starts) and
		// applies again. The tainted declaration is replaced without
		// revoking the node, whose engines are checked again: it is ready
		// with the certificate it booted with, on the same agent session.
		if err := os.WriteFile(n.llama, []byte(versionScript), 0o755); err != nil {
			t.Fatal(err)
		}
		out, _ = n.tf.Run(0, "apply", "-input=false", "-no-color", "-auto-approve")
		if flat := strings.Join(strings.Fields(out), " "); !strings.Contains(flat, "module.node.llmgw_node.this is tainted, so must be replaced") ||
			!strings.Contains(flat, "Node cpu-143 removed without revoking its identity") {
			t.Errorf("the second apply did not replace the tainted node without revoking it:\n%s", testcluster.Tail(out, 40))
		}
		if got := n.outputs(t)["status"]; got != "ready" {
			t.Errorf("after fixing the engine, status = %v, want ready", got)
		}
		if log := agent.Output(); strings.Contains(log, "revoked") || strings.Contains(log, "refused by control plane") {
			t.Errorf("the agent was refused after the engine was fixed:\n%s", testcluster.Tail(log, 10))
		}
		if _, ok := h.pve.VM(143); !ok {
			t.Errorf("VM 143 was replaced; only the declaration should be")
		}
	})
	t.Run("variables are validated", func(t *testing.T) {
		n := h.node(t, "gpu-144", 144, versionScript)
		n.writeRoot(t)
		n.tf.Run(0, "init", "-input=false", "-no-color")
		main := filepath.Join(n.tf.Dir, "main.tf")
		good, err := os.ReadFile(main)
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct{ old, new, want string }{
			{`name          = "gpu-144"`, `name          = "GPU_144"`, `name "GPU_144" cannot be a hostname, a Proxmox VM name and a node id at once`},
			{`sha256 = "`, `sha256 = "X`, `llmgw_binary.sha256 must be the binary's sha256 as 64 lowercase hex digits`},
			{`size = ` + strconv.Itoa(len(h.binary)), `size = 0`, `a zero-byte binary is never installed`},
			{`engines   = { llamacpp`, `engines   = { llama`, `engines: unknown engine "llama"`},
			{`address     = "10.0.0.144/24"`, `address     = "10.0.0.144"`, `address "10.0.0.144" is not an address with its prefix`},
		} {
			if err := os.WriteFile(main, bytes.Replace(good, []byte(tt.old), []byte(tt.new), 1), 0o600); err != nil {
				t.Fatal(err)
			}
			out, _ := n.tf.Run(1, "validate", "-no-color")
			if flat := strings.Join(strings.Fields(out), " "); !strings.Contains(flat, tt.want) {
				t.Errorf("with %s, validate does not say %q:\n%s", tt.new, tt.want, out)
			}
		}
	})
}

// harness is what the cases share: a control plane, the Proxmox fake, the
// llmgw binary served over HTTP as a mirror would.
type harness struct {
	cluster   *testcluster.Cluster
	pve       *pvefake.Server
	binary    []byte
	binaryURL string
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	tfacc.Require(t)
	llmgw, err := testcluster.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// require_declared: the VM and the declaration are created side by
	// side, and the node must still get in.
	c := testcluster.NewCluster(t, llmgw, testcluster.Options{Grace: "10s", Models: "  []\n",
		Configure: func(s *config.Server) { s.Agents.RequireDeclared = true }})
	s := pvefake.New(t)
	s.AddTemplate(pvefake.DefaultNode, 9000, "ubuntu-2404")
	bin, err := os.ReadFile(llmgw)
	if err != nil {
		t.Fatal(err)
	}
	srv := binaryServer(t, bin)
	return &harness{cluster: c, pve: s, binary: bin, binaryURL: srv.URL + "/llmgw"}
}

// node is one module call in a terraform directory of its own, with the
// simulated hardware its agent will see.
type node struct {
	h        *harness
	name     string
	vmid     int
	tf       *testcluster.Terraform
	hw       string // simulated hardware and engines
	llama    string
	smi      string
	ibRoot   string
	cpuinfo  string
	isoVolid string
}

func (h *harness) node(t *testing.T, name string, vmid int, llamaScript string) *node {
	t.Helper()
	n := &node{h: h, name: name, vmid: vmid, hw: t.TempDir(), isoVolid: fmt.Sprintf("local:iso/llmgw-cidata-%d.iso", vmid)}
	n.llama = filepath.Join(n.hw, "llama-server")
	if err := os.WriteFile(n.llama, []byte(llamaScript), 0o755); err != nil {
		t.Fatal(err)
	}
	var err error
	if n.smi, err = simhw.WriteNvidiaSMI(n.hw, simhw.H100s(1, name)); err != nil {
		t.Fatal(err)
	}
	n.ibRoot = filepath.Join(n.hw, "infiniband")
	if err := simhw.WriteInfiniBand(n.ibRoot, []simhw.SimAdapter{{Name: "mlx5_0", Ports: []simhw.SimPort{{State: "ACTIVE", RateGbps: 200}}}}); err != nil {
		t.Fatal(err)
	}
	n.cpuinfo = filepath.Join(n.hw, "cpuinfo")
	if err := simhw.WriteCPUInfo(n.cpuinfo, "Intel Xeon (host)", 4, simhw.HostFlags); err != nil {
		t.Fatal(err)
	}
	n.tf = testcluster.NewTerraform(t, h.cluster)
	n.tf.Env = append(n.tf.Env, "LLMGW_CA_KEY="+filepath.Join(h.cluster.PKIDir, pki.CAKeyFile))
	return n
}

// writeRoot writes the root module: the provider with the fake's Proxmox,
// a fabric, and one call of the module under test.
func (n *node) writeRoot(t *testing.T) {
	t.Helper()
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(n.tf.Dir, here)
	if err != nil {
		t.Fatal(err)
	}
	h := n.h
	main := fmt.Sprintf(`terraform {
  required_providers {
    llmgw = { source = "llmgw/llmgw" }
  }
}

provider "llmgw" {
  proxmox = {
    endpoint         = %[1]q
    api_token_id     = %[2]q
    api_token_secret = %[3]q
    ca_file          = %[4]q
  }
}

resource "llmgw_fabric" "ib" {
  name = "ib-%[5]s"
}

module "node" {
  source = %[6]q

  name          = %[5]q
  control_plane = %[7]q
  llmgw_binary  = { url = %[8]q, sha256 = %[9]q, size = %[10]d }

  target_node = "pve1"
  clone_from  = "ubuntu-2404"
  address     = "10.0.0.%[11]d/24"
  gateway     = "10.0.0.1"
  storage     = "local-lvm"

  fabric    = { name = llmgw_fabric.ib.name, adapters = ["mlx5_0"] }
  engines   = { llamacpp = %[12]q }
  labels    = { rack = "r1" }
  discovery = { nvidia_smi = %[13]q, ib_root = %[14]q, cpuinfo = %[15]q }

  registration_timeout = "3m"
  ready_timeout        = "3m"
}

output "node_id" { value = module.node.node_id }
output "vmid" { value = module.node.vmid }
output "vm_id" { value = module.node.vm_id }
output "address" { value = module.node.address }
output "status" { value = module.node.status }
output "cloud_init_iso_removed" { value = module.node.cloud_init_iso_removed }
`, h.pve.Endpoint(), pvefake.DefaultTokenID, pvefake.DefaultSecret, h.pve.CAFile(t.TempDir()),
		n.name, rel, h.cluster.AgentAddr, h.binaryURL, sha256Hex(h.binary), len(h.binary),
		n.vmid, n.llama, n.smi, n.ibRoot, n.cpuinfo)
	if err := os.WriteFile(filepath.Join(n.tf.Dir, "main.tf"), []byte(main), 0o600); err != nil {
		t.Fatal(err)
	}
}

// applyRun is a terraform apply running in the background.
type applyRun struct {
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
	code int
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startApply starts terraform apply; it is killed if the test ends first.
func (n *node) startApply(t *testing.T) *applyRun {
	t.Helper()
	a := &applyRun{out: &lockedBuffer{}, done: make(chan struct{})}
	a.cmd = exec.Command(n.tf.Bin, "apply", "-input=false", "-no-color", "-auto-approve")
	a.cmd.Dir, a.cmd.Env = n.tf.Dir, n.tf.Env
	a.cmd.Stdout, a.cmd.Stderr = a.out, a.out
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := a.cmd.Start(); err != nil {
		t.Fatalf("starting terraform apply: %v", err)
	}
	go func() {
		err := a.cmd.Wait()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			a.code = exit.ExitCode()
		} else if err != nil {
			a.code = -1
		}
		close(a.done)
	}()
	t.Cleanup(func() {
		select {
		case <-a.done:
		default:
			_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
			<-a.done
		}
	})
	return a
}

// wait waits for apply to end and returns its output and exit code.
func (a *applyRun) wait(t *testing.T) (string, int) {
	t.Helper()
	select {
	case <-a.done:
	case <-time.After(5 * time.Minute):
		t.Fatalf("terraform apply did not finish within 5m:\n%s", testcluster.Tail(a.out.String(), 40))
	}
	return a.out.String(), a.code
}

// awaitUserData waits until the VM's cloud-init ISO is on the fake's
// storage and returns the user-data on it.
func (n *node) awaitUserData(t *testing.T, a *applyRun) string {
	t.Helper()
	var ud string
	testcluster.WaitFor(t, "the cloud-init ISO of VM "+strconv.Itoa(n.vmid), 3*time.Minute, func() (bool, string) {
		select {
		case <-a.done:
			t.Fatalf("apply ended (exit %d) before the ISO was uploaded:\n%s", a.code, testcluster.Tail(a.out.String(), 40))
		default:
		}
		var err error
		ud, err = n.h.pve.ISOFile(pvefake.DefaultNode, n.isoVolid, "user-data")
		if err != nil {
			return false, err.Error()
		}
		// The VM boots only once it is started.
		vm, _ := n.h.pve.VM(n.vmid)
		return vm.Status == "running", "VM " + vm.Status
	})
	return ud
}

// cloudConfig is what the test reads of the user-data.
type cloudConfig struct {
	Hostname   string `yaml:"hostname"`
	WriteFiles []struct {
		Path        string `yaml:"path"`
		Owner       string `yaml:"owner"`
		Permissions string `yaml:"permissions"`
		Encoding    string `yaml:"encoding"`
		Content     string `yaml:"content"`
	} `yaml:"write_files"`
	RunCmd []any `yaml:"runcmd"`
}

// boot is the VM's filesystem as the user-data writes it, mapped under
// root on this machine, with the install command of its runcmd.
type boot struct {
	n       *node
	root    string
	files   map[string][]byte
	modes   map[string]string
	install []string // argv, as on the VM
}

// local is where a path of the VM is on this machine.
func (b *boot) local(vmPath string) string { return filepath.Join(b.root, vmPath) }

// checkUserData parses the user-data as cloud-config, checks what it holds
// and writes its files under a directory of this machine.
func (n *node) checkUserData(t *testing.T, ud string) *boot {
	t.Helper()
	if first, _, _ := strings.Cut(ud, "\n"); first != "#cloud-config" {
		t.Fatalf("user-data does not start with #cloud-config: %q", first)
	}
	var cc cloudConfig
	if err := yaml.Unmarshal([]byte(ud), &cc); err != nil {
		t.Fatalf("user-data is not YAML: %v\n%s", err, ud)
	}
	if cc.Hostname != n.name {
		t.Errorf("hostname = %q, want %q", cc.Hostname, n.name)
	}
	b := &boot{n: n, root: t.TempDir(), files: map[string][]byte{}, modes: map[string]string{}}
	for _, f := range cc.WriteFiles {
		if f.Encoding != "b64" || f.Owner != "root:root" {
			t.Errorf("write_files %s: encoding %q owner %q, want b64 and root:root", f.Path, f.Encoding, f.Owner)
		}
		data, err := base64.StdEncoding.DecodeString(f.Content)
		if err != nil {
			t.Fatalf("write_files %s: %v", f.Path, err)
		}
		b.files[f.Path], b.modes[f.Path] = data, f.Permissions
	}
	cert, key := "/etc/llmgw/"+n.name+".pem", "/etc/llmgw/"+n.name+"-key.pem"
	wantModes := map[string]string{vmInstall: "0755", vmCA: "0644", cert: "0644", key: "0600", vmConfig: "0644", vmUnit: "0644"}
	if len(b.modes) != len(wantModes) {
		t.Errorf("write_files writes %v, want %v", b.modes, wantModes)
	}
	for p, m := range wantModes {
		if b.modes[p] != m {
			t.Errorf("write_files %s: permissions %q, want %q", p, b.modes[p], m)
		}
	}
	// Byte for byte: the CA is the cluster's, the certificate and key are a
	// pair for the node's name signed by it, the script and the unit are the
	// module's files.
	ca, err := os.ReadFile(filepath.Join(n.h.cluster.PKIDir, pki.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.files[vmCA], ca) {
		t.Errorf("%s is not the control plane's CA byte for byte", vmCA)
	}
	checkPair(t, n.name, b.files[cert], b.files[key], ca)
	for vm, mine := range map[string]string{vmInstall: "files/install-llmgw", vmUnit: "files/llmgw-agent.service"} {
		want, err := os.ReadFile(mine)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b.files[vm], want) {
			t.Errorf("%s differs from the module's %s", vm, mine)
		}
	}
	n.checkAgentConfig(t, b.files[vmConfig])

	// runcmd: set -e, then the install, then the unit started.
	var cmds [][]string
	for _, c := range cc.RunCmd {
		switch c := c.(type) {
		case string:
			cmds = append(cmds, []string{c})
		case []any:
			var argv []string
			for _, a := range c {
				s, ok := a.(string)
				if !ok {
					t.Fatalf("runcmd %v: argument %v is %T, not a string (cloud-init quotes strings only)", c, a, a)
				}
				argv = append(argv, s)
			}
			cmds = append(cmds, argv)
		default:
			t.Fatalf("runcmd entry %v is %T", c, c)
		}
	}
	want := [][]string{
		{"set -e"},
		{vmInstall, n.h.binaryURL, sha256Hex(n.h.binary), strconv.Itoa(len(n.h.binary)), vmBinary},
		{"systemctl", "daemon-reload"},
		{"systemctl", "enable", "--now", "llmgw-agent.service"},
	}
	if !slices.EqualFunc(cmds, want, slices.Equal) {
		t.Fatalf("runcmd = %q, want %q", cmds, want)
	}
	b.install = cmds[1]
	for p, data := range b.files {
		mode, _ := strconv.ParseUint(b.modes[p], 8, 32)
		if err := os.MkdirAll(filepath.Dir(b.local(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(b.local(p), data, os.FileMode(mode)); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// checkPair checks that certPEM and keyPEM are a pair whose certificate
// names node and is signed by the CA in caPEM.
func checkPair(t *testing.T, node string, certPEM, keyPEM, caPEM []byte) {
	t.Helper()
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Errorf("the user-data's certificate and key are not a pair: %v", err)
		return
	}
	blk, _ := pem.Decode(certPEM)
	if blk == nil {
		t.Fatalf("the user-data's certificate is not PEM")
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != node {
		t.Errorf("certificate CN = %q, want %q", cert.Subject.CommonName, node)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("certificate not signed by the control plane's CA: %v", err)
	}
}

// checkAgentConfig checks the user-data's agent.yaml against the
// configuration the module was given, marshalled by agentconfig: the same
// keys and values, and the same configuration for the agent's own loader.
func (n *node) checkAgentConfig(t *testing.T, data []byte) {
	t.Helper()
	sameAgentConfig(t, data, agentFor(n.name, n.h.cluster.AgentAddr, "", fmt.Sprintf("10.0.0.%d", n.vmid), spec.Declaration{
		Fabrics:   []spec.Fabric{{Name: "ib-" + n.name, Adapters: []string{"mlx5_0"}}},
		Engines:   map[string]string{"llamacpp": n.llama},
		Labels:    map[string]string{"rack": "r1"},
		Discovery: spec.Discovery{NvidiaSMI: n.smi, IBRoot: n.ibRoot, CPUInfo: n.cpuinfo},
	}))
}

// checkInstallRefuses runs the user-data's install command with a wrong
// sha256 and a wrong size, into a directory of its own: each is refused and
// leaves no binary behind.
func (n *node) checkInstallRefuses(t *testing.T, b *boot) {
	t.Helper()
	for _, tt := range []struct {
		arg  int
		with string
		want string
	}{
		{2, strings.Repeat("0", 64), "has sha256 " + b.install[2] + ", want " + strings.Repeat("0", 64)},
		{3, strconv.Itoa(len(n.h.binary) - 1), fmt.Sprintf("is %d bytes, want %d", len(n.h.binary), len(n.h.binary)-1)},
	} {
		argv := slices.Clone(b.install[1:])
		argv[tt.arg-1] = tt.with
		dest := filepath.Join(t.TempDir(), "bin", "llmgw")
		argv[3] = dest
		out, code := runInstall(t, b.local(b.install[0]), argv...)
		if code == 0 || !strings.Contains(out, tt.want) {
			t.Errorf("install with argument %d = %s: exit %d, output %q; want a failure saying %q", tt.arg, tt.with, code, out, tt.want)
		}
		if entries, _ := os.ReadDir(filepath.Dir(dest)); len(entries) > 0 {
			t.Errorf("a refused install left %v in %s", entries, filepath.Dir(dest))
		}
	}
}

// start does what the VM's runcmd does, on this machine: it installs the
// binary with the user-data's install command (into the mapped directory)
// and starts the agent as the unit's ExecStart does. Only paths differ:
// the files are under b.root, and state_dir, which the agent defaults to
// /var/lib/llmgw-agent, is moved there too through the agent's environment.
func (b *boot) start(t *testing.T) *testcluster.Proc {
	t.Helper()
	argv := slices.Clone(b.install[1:])
	argv[3] = b.local(b.install[4])
	if out, code := runInstall(t, b.local(b.install[0]), argv...); code != 0 {
		t.Fatalf("the user-data's install command failed (exit %d):\n%s", code, out)
	}
	installed, err := os.ReadFile(b.local(vmBinary))
	if err != nil || !bytes.Equal(installed, b.n.h.binary) {
		t.Fatalf("%s after install: %d bytes, %v; want the served binary", vmBinary, len(installed), err)
	}
	m := regexp.MustCompile(`(?m)^ExecStart=(.*)$`).FindSubmatch(b.files[vmUnit])
	if m == nil {
		t.Fatalf("the unit has no ExecStart:\n%s", b.files[vmUnit])
	}
	exec := strings.Fields(string(m[1]))
	if want := []string{vmBinary, "agent", "-c", vmConfig}; !slices.Equal(exec, want) {
		t.Fatalf("ExecStart = %q, want %q", exec, want)
	}
	for _, kv := range [][2]string{
		{"LLMGW_TLS__CA", b.local(vmCA)},
		{"LLMGW_TLS__CERT", b.local("/etc/llmgw/" + b.n.name + ".pem")},
		{"LLMGW_TLS__KEY", b.local("/etc/llmgw/" + b.n.name + "-key.pem")},
		{"LLMGW_STATE_DIR", b.local("/var/lib/llmgw-agent")},
	} {
		t.Setenv(kv[0], kv[1])
	}
	return testcluster.Start(t, b.local(exec[0]), "agent "+b.n.name, exec[1], exec[2], b.local(exec[3]))
}

// outputs reads the root module's outputs.
func (n *node) outputs(t *testing.T) map[string]any {
	t.Helper()
	out, _ := n.tf.Run(0, "output", "-json")
	var raw map[string]struct {
		Value any `json:"value"`
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("terraform output -json: %v\n%s", err, out)
	}
	vals := map[string]any{}
	for k, v := range raw {
		vals[k] = v.Value
	}
	return vals
}

// checkISORemoved checks that the ISO is detached and deleted.
func (n *node) checkISORemoved(t *testing.T) {
	t.Helper()
	vm, ok := n.h.pve.VM(n.vmid)
	if !ok {
		t.Fatalf("VM %d does not exist", n.vmid)
	}
	if got := vm.Config["ide2"]; got != "none,media=cdrom" {
		t.Errorf("VM %d ide2 = %q, want the ISO detached (none,media=cdrom)", n.vmid, got)
	}
	if vols := n.h.pve.Volumes(pvefake.DefaultNode); slices.Contains(vols, n.isoVolid) {
		t.Errorf("%s is still on the storage: %v", n.isoVolid, vols)
	}
	if cfg := vm.Config; cfg["cpu"] != "host" || cfg["name"] != n.name {
		t.Errorf("VM %d: cpu %q name %q, want host and %s", n.vmid, cfg["cpu"], cfg["name"], n.name)
	}
}

// checkStateFiles checks that the certificate and key the VM booted with
// verify against the CA and belong together, and that neither the key nor
// the user-data is anywhere in the state file: they came from the ephemeral
// llmgw_node_certificate through the write-only user_data_wo.
func (n *node) checkStateFiles(t *testing.T, b *boot) {
	t.Helper()
	certPEM, keyPEM, caPEM := b.files["/etc/llmgw/"+n.name+".pem"], b.files["/etc/llmgw/"+n.name+"-key.pem"], b.files[vmCA]
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Errorf("the certificate and key in the user-data do not go together: %v", err)
	}
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil {
		t.Fatalf("certificate in the user-data: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil || cert.Subject.CommonName != n.name {
		t.Errorf("certificate %q in the user-data is not a node certificate of the CA: %v", cert.Subject.CommonName, err)
	}
	state, err := os.ReadFile(filepath.Join(n.tf.Dir, "terraform.tfstate"))
	if err != nil {
		t.Fatal(err)
	}
	checkNoKey(t, "terraform.tfstate", string(state), keyPEM)
	// The state before the last apply, where an earlier write would stay.
	if backup, err := os.ReadFile(filepath.Join(n.tf.Dir, "terraform.tfstate.backup")); err == nil {
		checkNoKey(t, "terraform.tfstate.backup", string(backup), keyPEM)
	}
	if !strings.Contains(string(state), `"user_data_wo_version"`) {
		t.Errorf("terraform.tfstate has no user_data_wo_version: is it the state of this module?")
	}
}

// checkNoKey fails t when text (a state, a plan, terraform's output) holds
// the node's private key, a PEM key header or the user-data.
func checkNoKey(t *testing.T, what, text string, keyPEM []byte) {
	t.Helper()
	key := strings.TrimSpace(string(keyPEM))
	body := key[strings.Index(key, "\n")+1 : strings.LastIndex(key, "\n")]
	for name, s := range map[string]string{
		"the private key":          body,
		"a PEM private key header": "PRIVATE KEY",
		"the user-data":            "#cloud-config",
		"the user-data in base64":  base64.StdEncoding.EncodeToString(keyPEM)[:40],
	} {
		if strings.Contains(text, s) || strings.Contains(text, strings.ReplaceAll(s, "\n", `\n`)) {
			t.Errorf("%s holds %s", what, name)
		}
	}
}

// checkPlanHasNoKey saves a plan that replaces the VM (so it opens the
// ephemeral certificate and sets user_data_wo, as a first apply does) and
// checks that neither the plan as terraform prints it, nor the saved plan
// file as terraform show -json reads it, holds the key or the user-data.
func (n *node) checkPlanHasNoKey(t *testing.T, b *boot) {
	t.Helper()
	keyPEM := b.files["/etc/llmgw/"+n.name+"-key.pem"]
	out, _ := n.tf.Run(0, "plan", "-input=false", "-no-color", "-out=replace.tfplan", "-replace=module.node.llmgw_proxmox_vm.this")
	if !strings.Contains(out, "module.node.llmgw_proxmox_vm.this will be replaced, as requested") || !strings.Contains(out, "ephemeral.llmgw_node_certificate.this: Opening complete") {
		t.Fatalf("the plan does not replace the VM with a certificate signed for it:\n%s", testcluster.Tail(out, 60))
	}
	checkNoKey(t, "the plan's output", out, keyPEM)
	human, _ := n.tf.Run(0, "show", "-no-color", "replace.tfplan")
	checkNoKey(t, "terraform show of the saved plan", human, keyPEM)
	js, _ := n.tf.Run(0, "show", "-json", "replace.tfplan")
	checkNoKey(t, "terraform show -json of the saved plan", js, keyPEM)
	if !strings.Contains(js, `"user_data_wo_version"`) {
		t.Errorf("the saved plan has no user_data_wo_version: is it the plan of this module?")
	}
	if err := os.Remove(filepath.Join(n.tf.Dir, "replace.tfplan")); err != nil {
		t.Fatal(err)
	}
}
