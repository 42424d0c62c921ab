// Package testcluster starts llmgw as separate processes — control plane,
// agents on simulated hardware, sim engines — over real mutual TLS, for the
// end-to-end tests and the Terraform provider's acceptance tests.
package testcluster

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	agentconfig "github.com/llmgw/llmgw/agent/config"
	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/internal/konfig"
	"github.com/llmgw/llmgw/pki"
	"github.com/llmgw/llmgw/runtime/config"
	"github.com/llmgw/llmgw/sim/simhw"
	"github.com/llmgw/llmgw/spec"
)

// Build compiles the llmgw binary into dir and returns its path.
func Build(dir string) (string, error) {
	binary := filepath.Join(dir, "llmgw")
	cmd := exec.Command("go", "build", "-o", binary, "github.com/llmgw/llmgw/cmd/llmgw")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building llmgw: %w\n%s", err, out)
	}
	return binary, nil
}

// FreePorts reserves n distinct loopback ports.
func FreePorts(t testing.TB, n int) []int {
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

// Proc is a child process with its output captured for assertions.
type Proc struct {
	name string
	Cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	Done chan struct{}
}

func (p *Proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

// Output returns everything the process printed so far.
func (p *Proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// Start runs binary with args; the process is stopped when the test ends.
func Start(t testing.TB, binary, name string, args ...string) *Proc {
	t.Helper()
	p := &Proc{name: name, Done: make(chan struct{})}
	p.Cmd = exec.Command(binary, args...)
	p.Cmd.Stdout, p.Cmd.Stderr = p, p
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { _ = p.Cmd.Wait(); close(p.Done) }()
	t.Cleanup(func() {
		_ = p.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.Done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
			<-p.Done
		}
		if t.Failed() {
			t.Logf("--- output of %s ---\n%s", name, Tail(p.Output(), 60))
		}
	})
	return p
}

// Tail returns the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// WaitFor polls cond until it holds, failing the test at the deadline.
func WaitFor(t testing.TB, what string, timeout time.Duration, cond func() (bool, string)) {
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

// Cluster is a control plane and agents, each its own process.
type Cluster struct {
	t         testing.TB
	Binary    string
	Dir       string
	PKIDir    string
	Client    string // client API base URL (…/v1)
	Manage    string
	AgentAddr string
	APIKey    string
	Token     string
	Server    *Proc
	CfgPath   string
	// StoreDSN is the control plane's auth.store.
	StoreDSN string
	Nodes    map[string]*Proc
	NodeDirs map[string]string
	Ports    map[string][2]int

	// opts are what the cluster was started with; extra control planes
	// (AddControlPlane) are configured from them.
	opts Options

	secretsMu   sync.Mutex
	secrets     []string
	allProcs    []*Proc
	metricsURL  string
	metricsMu   sync.Mutex
	metricsText string // the last metrics read
	metricsRead bool
}

// NodeSpec describes an agent to start on simulated hardware.
type NodeSpec struct {
	ID string
	// Name keys the agent's process, directory and ports in the Cluster;
	// defaults to ID. A second agent claiming a node's ID needs its own.
	Name     string
	CertFor  string             // certificate CN; defaults to id
	Fabrics  string             // top-level agent.yaml keys (fabrics, labels) as YAML
	Adapters []simhw.SimAdapter // sysfs contents
	GPUs     int
	// KeepEngines starts the agent without --stop-engines-on-exit, as in
	// production: its engines outlive it.
	KeepEngines bool
	// Engines maps engine names to executables (the agent.yaml engines key).
	Engines map[string]string
	// CPUInfo is a /proc/cpuinfo-shaped file for the CPU probe
	// (simhw.WriteCPUInfo); empty reads the machine's.
	CPUInfo string
	// Servers are the control planes' agent addresses the agent dials, the
	// first as agent.yaml's server and the rest as servers; empty is the
	// cluster's first control plane alone.
	Servers []string
}

// New starts a control plane whose server.yaml lists models (YAML list
// items, indented two spaces) with agents.grace set to grace; it creates an
// API key and an admin token first.
func New(t testing.TB, binary, grace, models string) *Cluster {
	t.Helper()
	return NewWithAuth(t, binary, grace, models, "")
}

// NewWithAuth is New with extra keys under auth: in server.yaml (YAML
// lines indented two spaces, e.g. "  default_rpm: 60\n").
//
// Every cluster checks, when its test ends, that none of the secrets it
// knows (the API key, the admin token, and any given to AddSecret) appears
// in a line the control plane or an agent logged, or in its metrics.
func NewWithAuth(t testing.TB, binary, grace, models, authYAML string) *Cluster {
	t.Helper()
	return NewCluster(t, binary, Options{Grace: grace, Models: models, AuthYAML: authYAML})
}

// Options describe the control plane NewCluster starts.
type Options struct {
	// Grace is agents.grace.
	Grace string
	// Models are YAML list items, indented two spaces, read as the models
	// key of server.yaml.
	Models string
	// AuthYAML are extra lines under auth:, indented two spaces, read as
	// keys of server.yaml's auth section.
	AuthYAML string
	// Store is auth.store; empty is a SQLite file in the cluster's
	// directory.
	Store string
	// Configure, when set, changes the configuration last, before it is
	// written.
	Configure func(*config.Server)
}

// NewCluster starts a control plane as opts describe.
func NewCluster(t testing.TB, binary string, opts Options) *Cluster {
	t.Helper()
	dir := t.TempDir()
	c := &Cluster{t: t, Binary: binary, Dir: dir, PKIDir: filepath.Join(dir, "pki"), Nodes: map[string]*Proc{}, NodeDirs: map[string]string{}, Ports: map[string][2]int{}, opts: opts}
	if err := os.MkdirAll(c.PKIDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, _, err := pki.InitCA(c.PKIDir, pki.CAOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := pki.IssueServer(c.PKIDir, "llmgw-e2e", []string{"127.0.0.1", "localhost"}, c.PKIDir, 0); err != nil {
		t.Fatal(err)
	}
	storeDSN := opts.Store
	if storeDSN == "" {
		storeDSN = filepath.Join(dir, "llmgw.db")
	}
	c.StoreDSN = storeDSN
	p := FreePorts(t, 4)
	c.Client = "http://127.0.0.1:" + strconv.Itoa(p[0]) + "/v1"
	c.Manage = "127.0.0.1:" + strconv.Itoa(p[1])
	c.AgentAddr = "127.0.0.1:" + strconv.Itoa(p[2])
	cfg, err := serverConfig(c, p, opts)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "server.yaml")
	if err := cfg.WriteFile(cfgPath, "Written by testcluster."); err != nil {
		t.Fatal(err)
	}
	c.APIKey = secretFrom(t, binary, "keys", "create", "--name", "e2e", "-c", cfgPath)
	c.Token = secretFrom(t, binary, "keys", "admin-token", "--name", "e2e", "-c", cfgPath)
	c.AddSecret(c.APIKey)
	c.AddSecret(c.Token)
	c.CfgPath = cfgPath
	// Registered before the processes start, so it runs after they have
	// stopped and their output is complete.
	t.Cleanup(c.scanForSecrets)
	c.metricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", p[3])
	c.StartServer()
	// Runs before the processes stop: the metrics are read live.
	t.Cleanup(c.scrapeMetrics)
	// Tests change the catalog at once, and until it has won its first
	// election a control plane refuses management calls (Unavailable).
	mc := c.ManageClient()
	WaitFor(t, "the control plane to lead", 30*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := mc.ListNodes(ctx, &managev1.ListNodesRequest{})
		return err == nil, fmt.Sprint(err)
	})
	return c
}

// serverConfig is the control plane's configuration: loopback listeners
// on ports p (client, management, agents, metrics), no pprof, the
// cluster's PKI and store, one-second heartbeats, then what opts says. Its
// YAML fragments are read into the value with the loader's strictness.
func serverConfig(c *Cluster, p []int, opts Options) (config.Server, error) {
	s := config.Default()
	s.Listen = "127.0.0.1:" + strconv.Itoa(p[0])
	s.ManageListen = c.Manage
	s.AgentListen = c.AgentAddr
	s.MetricsListen = "127.0.0.1:" + strconv.Itoa(p[3])
	s.PprofListen = ""
	s.AgentTLS = config.TLS{CA: filepath.Join(c.PKIDir, "ca.pem"), Cert: filepath.Join(c.PKIDir, "server.pem"), Key: filepath.Join(c.PKIDir, "server-key.pem")}
	s.Auth.Store = c.StoreDSN
	s.Agents.HeartbeatInterval = time.Second
	grace, err := time.ParseDuration(opts.Grace)
	if err != nil {
		return s, fmt.Errorf("testcluster.Options.Grace: %w", err)
	}
	s.Agents.Grace = grace
	// Control planes of one cluster run on one host: each needs its own
	// name (AddControlPlane names the others).
	s.HA.Name = "cp-1"
	var frag string
	if opts.AuthYAML != "" {
		frag += "auth:\n" + opts.AuthYAML
	}
	if opts.Models != "" {
		frag += "models:\n" + opts.Models
	}
	if err := konfig.Parse([]byte(frag), "testcluster.Options", &s); err != nil {
		return s, err
	}
	if opts.Configure != nil {
		opts.Configure(&s)
	}
	return s, nil
}

// AddSecret names a secret that must never appear in any process's output
// or metrics.
func (c *Cluster) AddSecret(s string) {
	c.secretsMu.Lock()
	defer c.secretsMu.Unlock()
	c.secrets = append(c.secrets, s)
}

// MetricsURL is the control plane's /metrics address.
func (c *Cluster) MetricsURL() string { return c.metricsURL }

// readMetrics GETs the control plane's metrics and keeps them for
// scanForSecrets; it returns why it could not.
func (c *Cluster) readMetrics() error {
	cli := http.Client{Timeout: 5 * time.Second}
	resp, err := cli.Get(c.metricsURL)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "# TYPE ") {
		return fmt.Errorf("GET %s: %s, %d bytes without a metric", c.metricsURL, resp.Status, len(b))
	}
	c.metricsMu.Lock()
	c.metricsText, c.metricsRead = string(b), true
	c.metricsMu.Unlock()
	return nil
}

// watchMetrics reads the metrics of the control plane p every half second
// until it exits, so that a test that kills it still leaves metrics to
// scan: the last ones read before it died.
func (c *Cluster) watchMetrics(p *Proc) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-p.Done:
			return
		case <-tick.C:
			_ = c.readMetrics()
		}
	}
}

// scrapeMetrics reads the metrics a last time for scanForSecrets. The
// metrics half of the scan must not pass by doing nothing: a control plane
// still running that does not answer fails the test, and so does a test
// whose metrics were never read at all.
func (c *Cluster) scrapeMetrics() {
	running := false
	if c.Server != nil {
		select {
		case <-c.Server.Done:
		default:
			running = true
		}
	}
	err := c.readMetrics()
	c.metricsMu.Lock()
	read := c.metricsRead
	c.metricsMu.Unlock()
	switch {
	case err != nil && running:
		c.t.Errorf("secret scan: the control plane runs but its metrics cannot be read, so they cannot be scanned: %v", err)
	case !read:
		c.t.Errorf("secret scan: the control plane's metrics were never read (%v), so they cannot be scanned", err)
	}
}

// scanForSecrets fails the test when a secret appears in what the
// processes printed or in the metrics.
func (c *Cluster) scanForSecrets() {
	c.secretsMu.Lock()
	secrets := slices.Clone(c.secrets)
	c.secretsMu.Unlock()
	c.metricsMu.Lock()
	outputs := map[string]string{"metrics": c.metricsText}
	c.metricsMu.Unlock()
	for _, p := range c.allProcs {
		outputs[p.name] += p.Output()
	}
	for where, text := range outputs {
		for _, s := range secrets {
			if s != "" && strings.Contains(text, s) {
				c.t.Errorf("a secret (prefix %.10s…) appears in the output of %s", s, where)
			}
		}
	}
}

// startServer starts the control plane and waits for its client API.
func (c *Cluster) StartServer() {
	t := c.t
	t.Helper()
	c.Server = Start(t, c.Binary, "server", "server", "-c", c.CfgPath)
	c.allProcs = append(c.allProcs, c.Server)
	WaitFor(t, "the client API to listen", 30*time.Second, func() (bool, string) {
		conn, err := net.Dial("tcp", strings.TrimSuffix(strings.TrimPrefix(c.Client, "http://"), "/v1"))
		if err != nil {
			return false, err.Error()
		}
		conn.Close()
		return true, ""
	})
	go c.watchMetrics(c.Server)
}

// stopServer stops the control plane with SIGTERM and waits for it.
func (c *Cluster) StopServer() {
	c.t.Helper()
	// A test may stop the control plane before the watch's first tick:
	// read the metrics now, while it still answers, for the secret scan.
	_ = c.readMetrics()
	if err := c.Server.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		c.t.Fatal(err)
	}
	select {
	case <-c.Server.Done:
	case <-time.After(30 * time.Second):
		c.t.Fatalf("control plane did not stop:\n%s", Tail(c.Server.Output(), 20))
	}
}

// secretFrom runs an llmgw command that prints a secret on an indented line.
func secretFrom(t testing.TB, binary string, args ...string) string {
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

func (c *Cluster) StartAgent(n NodeSpec) *Proc {
	t := c.t
	t.Helper()
	name := n.Name
	if name == "" {
		name = n.ID
	}
	nd := filepath.Join(c.Dir, "nodes", name)
	if err := os.MkdirAll(nd, 0o750); err != nil {
		t.Fatal(err)
	}
	cn := n.CertFor
	if cn == "" {
		cn = n.ID
	}
	if _, err := os.Stat(filepath.Join(c.PKIDir, cn+".pem")); err != nil {
		if _, _, err := pki.IssueNode(c.PKIDir, cn, c.PKIDir, 0); err != nil {
			t.Fatal(err)
		}
	}
	if n.GPUs == 0 {
		n.GPUs = 8
	}
	smi, err := simhw.WriteNvidiaSMI(nd, simhw.H100s(n.GPUs, name))
	if err != nil {
		t.Fatal(err)
	}
	ib := filepath.Join(nd, "infiniband")
	if len(n.Adapters) > 0 {
		if err := simhw.WriteInfiniBand(ib, n.Adapters); err != nil {
			t.Fatal(err)
		}
	}
	ports := FreePorts(t, 1)
	from := ports[0]
	if from > 60000 {
		from = 40000 + len(c.Ports)*100
	}
	c.Ports[name] = [2]int{from, from + 49}
	a := agentconfig.Default()
	a.NodeID = n.ID
	a.Server = c.AgentAddr
	if len(n.Servers) > 0 {
		a.Server, a.Servers = n.Servers[0], n.Servers[1:]
	}
	a.TLS = agentconfig.TLS{CA: filepath.Join(c.PKIDir, "ca.pem"), Cert: filepath.Join(c.PKIDir, cn+".pem"), Key: filepath.Join(c.PKIDir, cn+"-key.pem")}
	a.Address = "127.0.0.1"
	a.StateDir = filepath.Join(nd, "state")
	a.EnginePorts = agentconfig.PortRange{From: from, To: from + 49}
	a.HeartbeatInterval = time.Second
	a.Discovery = spec.Discovery{NvidiaSMI: smi, IBRoot: ib, CPUInfo: n.CPUInfo}
	if err := konfig.Parse([]byte(n.Fabrics), "testcluster.NodeSpec.Fabrics", &a); err != nil {
		t.Fatal(err)
	}
	if len(n.Engines) > 0 {
		a.Engines = maps.Clone(n.Engines)
	}
	cfgPath := filepath.Join(nd, "agent.yaml")
	if err := a.WriteFile(cfgPath, "Written by testcluster."); err != nil {
		t.Fatal(err)
	}
	c.NodeDirs[name] = nd
	args := []string{"agent", "-c", cfgPath}
	if !n.KeepEngines {
		args = append(args, "--stop-engines-on-exit")
	}
	p := Start(t, c.Binary, "agent "+name, args...)
	c.Nodes[name] = p
	c.allProcs = append(c.allProcs, p)
	return p
}

// stop sends SIGTERM to a process and waits for it.
func (p *Proc) Stop(t testing.TB) {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not stop:\n%s", p.name, Tail(p.Output(), 20))
	}
}

type tokenCreds string

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}
func (tokenCreds) RequireTransportSecurity() bool { return true }

// manageClient dials the management API with the admin token.
func (c *Cluster) ManageClient() managev1.ManageServiceClient {
	t := c.t
	tlsCfg, err := pki.ClientTLS(filepath.Join(c.PKIDir, "ca.pem"), "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(c.Manage, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)), grpc.WithPerRPCCredentials(tokenCreds(c.Token)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return managev1.NewManageServiceClient(conn)
}
