// Package e2e starts llmgw as separate processes — control plane, agents,
// sim engines — over real mutual TLS, and checks the whole path with the
// official OpenAI Go client.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/llmgw/llmgw/agent/discovery/simhw"
	"github.com/llmgw/llmgw/pki"
	managev1 "github.com/llmgw/llmgw/runtime/api/managev1"
)

var binary string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e: skipped in -short mode")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "llmgw-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "llmgw")
	cmd := exec.Command("go", "build", "-o", binary, "github.com/llmgw/llmgw/cmd/llmgw")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building llmgw: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freePorts reserves n distinct loopback ports.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// proc is a child process with its output captured for assertions.
type proc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, done: make(chan struct{})}
	p.cmd = exec.Command(binary, args...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- output of %s ---\n%s", name, tail(p.output(), 60))
		}
	})
	return p
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last state: %s", timeout, what, last)
		}
		time.Sleep(100 * time.Millisecond) // polling interval, not a wait for an outcome
	}
}

// cluster is a control plane and agents, each its own process.
type cluster struct {
	t        *testing.T
	dir      string
	pkiDir   string
	client   string // client API base URL (…/v1)
	manage   string
	agents   string
	apiKey   string
	token    string
	server   *proc
	cfgPath  string
	nodes    map[string]*proc
	nodeDirs map[string]string
	ports    map[string][2]int
}

type nodeSpec struct {
	id       string
	certFor  string             // certificate CN; defaults to id
	fabrics  string             // YAML of the fabrics key
	adapters []simhw.SimAdapter // sysfs contents
	gpus     int
	// keepEngines starts the agent without --stop-engines-on-exit, as in
	// production: its engines outlive it.
	keepEngines bool
}

func newCluster(t *testing.T, grace, models string) *cluster {
	t.Helper()
	dir := t.TempDir()
	c := &cluster{t: t, dir: dir, pkiDir: filepath.Join(dir, "pki"), nodes: map[string]*proc{}, nodeDirs: map[string]string{}, ports: map[string][2]int{}}
	if err := os.MkdirAll(c.pkiDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, _, err := pki.InitCA(c.pkiDir, pki.CAOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := pki.IssueServer(c.pkiDir, "llmgw-e2e", []string{"127.0.0.1", "localhost"}, c.pkiDir, 0); err != nil {
		t.Fatal(err)
	}
	p := freePorts(t, 4)
	c.client = "http://127.0.0.1:" + strconv.Itoa(p[0]) + "/v1"
	c.manage = "127.0.0.1:" + strconv.Itoa(p[1])
	c.agents = "127.0.0.1:" + strconv.Itoa(p[2])
	cfg := fmt.Sprintf(`listen: "127.0.0.1:%d"
manage_listen: %q
agent_listen: %q
metrics_listen: "127.0.0.1:%d"
pprof_listen: ""
agent_tls:
  ca: %q
  cert: %q
  key: %q
auth:
  store: %q
agents:
  heartbeat_interval: 1s
  grace: %s
models:
%s`, p[0], c.manage, c.agents, p[3], filepath.Join(c.pkiDir, "ca.pem"), filepath.Join(c.pkiDir, "server.pem"), filepath.Join(c.pkiDir, "server-key.pem"),
		filepath.Join(dir, "llmgw.db"), grace, models)
	cfgPath := filepath.Join(dir, "server.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c.apiKey = secretFrom(t, "keys", "create", "--name", "e2e", "-c", cfgPath)
	c.token = secretFrom(t, "keys", "admin-token", "--name", "e2e", "-c", cfgPath)
	c.cfgPath = cfgPath
	c.startServer()
	return c
}

// startServer starts the control plane and waits for its client API.
func (c *cluster) startServer() {
	t := c.t
	t.Helper()
	c.server = start(t, "server", "server", "-c", c.cfgPath)
	waitFor(t, "the client API to listen", 30*time.Second, func() (bool, string) {
		conn, err := net.Dial("tcp", strings.TrimSuffix(strings.TrimPrefix(c.client, "http://"), "/v1"))
		if err != nil {
			return false, err.Error()
		}
		conn.Close()
		return true, ""
	})
}

// stopServer stops the control plane with SIGTERM and waits for it.
func (c *cluster) stopServer() {
	c.t.Helper()
	if err := c.server.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		c.t.Fatal(err)
	}
	select {
	case <-c.server.done:
	case <-time.After(30 * time.Second):
		c.t.Fatalf("control plane did not stop:\n%s", tail(c.server.output(), 20))
	}
}

// secretFrom runs an llmgw command that prints a secret on an indented line.
func secretFrom(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(binary, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("llmgw %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "  ") && strings.TrimSpace(line) != "" {
			return strings.TrimSpace(line)
		}
	}
	t.Fatalf("no secret in the output of llmgw %s:\n%s", strings.Join(args, " "), out)
	return ""
}

func (c *cluster) startAgent(n nodeSpec) *proc {
	t := c.t
	t.Helper()
	nd := filepath.Join(c.dir, "nodes", n.id)
	if err := os.MkdirAll(nd, 0o750); err != nil {
		t.Fatal(err)
	}
	cn := n.certFor
	if cn == "" {
		cn = n.id
	}
	if _, err := os.Stat(filepath.Join(c.pkiDir, cn+".pem")); err != nil {
		if _, _, err := pki.IssueNode(c.pkiDir, cn, c.pkiDir, 0); err != nil {
			t.Fatal(err)
		}
	}
	if n.gpus == 0 {
		n.gpus = 8
	}
	smi, err := simhw.WriteNvidiaSMI(nd, simhw.H100s(n.gpus, n.id))
	if err != nil {
		t.Fatal(err)
	}
	ib := filepath.Join(nd, "infiniband")
	if len(n.adapters) > 0 {
		if err := simhw.WriteInfiniBand(ib, n.adapters); err != nil {
			t.Fatal(err)
		}
	}
	ports := freePorts(t, 1)
	from := ports[0]
	if from > 60000 {
		from = 40000 + len(c.ports)*100
	}
	c.ports[n.id] = [2]int{from, from + 49}
	cfg := fmt.Sprintf(`node_id: %s
server: %q
tls:
  ca: %q
  cert: %q
  key: %q
address: 127.0.0.1
state_dir: %q
engine_ports: { from: %d, to: %d }
heartbeat_interval: 1s
discovery:
  nvidia_smi: %q
  ib_root: %q
%s
`, n.id, c.agents, filepath.Join(c.pkiDir, "ca.pem"), filepath.Join(c.pkiDir, cn+".pem"), filepath.Join(c.pkiDir, cn+"-key.pem"),
		filepath.Join(nd, "state"), from, from+49, smi, ib, n.fabrics)
	cfgPath := filepath.Join(nd, "agent.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c.nodeDirs[n.id] = nd
	args := []string{"agent", "-c", cfgPath}
	if !n.keepEngines {
		args = append(args, "--stop-engines-on-exit")
	}
	p := start(t, "agent "+n.id, args...)
	c.nodes[n.id] = p
	return p
}

// stop sends SIGTERM to a process and waits for it.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not stop:\n%s", p.name, tail(p.output(), 20))
	}
}

type tokenCreds string

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}
func (tokenCreds) RequireTransportSecurity() bool { return true }

// manageClient dials the management API with the admin token.
func (c *cluster) manageClient() managev1.ManageServiceClient {
	t := c.t
	tlsCfg, err := pki.ClientTLS(filepath.Join(c.pkiDir, "ca.pem"), "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(c.manage, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)), grpc.WithPerRPCCredentials(tokenCreds(c.token)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return managev1.NewManageServiceClient(conn)
}

var _ = metadata.MD{}
var _ = tls.Config{}
