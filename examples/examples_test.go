// Package examples holds the example configuration files of the operator
// guides. This test loads each one with the loaders the daemons use, and
// checks the YAML blocks of docs/*.md marked as whole files, so that neither
// the examples nor the guides can drift from the code.
package examples

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	agentconfig "github.com/llmgw/llmgw/agent/config"
	"github.com/llmgw/llmgw/agent/driver"
	"github.com/llmgw/llmgw/runtime/config"
	"github.com/llmgw/llmgw/spec"
)

// clearEnv unsets every LLMGW_ variable for the test (restored afterwards),
// so that the loaders see the files alone.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, config.EnvPrefix) {
			t.Setenv(name, "") // registers the restore
			if err := os.Unsetenv(name); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func loadServer(t *testing.T) config.Server {
	t.Helper()
	s, err := config.Load("quickstart/server.yaml")
	if err != nil {
		t.Fatalf("quickstart/server.yaml: %v", err)
	}
	return s
}

func loadAgent(t *testing.T) agentconfig.Agent {
	t.Helper()
	a, err := agentconfig.Load("quickstart/agent.yaml")
	if err != nil {
		t.Fatalf("quickstart/agent.yaml: %v", err)
	}
	return a
}

func TestQuickstartServer(t *testing.T) {
	clearEnv(t)
	s := loadServer(t)
	if s.AgentTLS != (config.TLS{CA: "/etc/llmgw/ca.pem", Cert: "/etc/llmgw/server.pem", Key: "/etc/llmgw/server-key.pem"}) {
		t.Errorf("agent_tls = %+v, want the files getting-started.md issues", s.AgentTLS)
	}
	if s.ManageTLS != (config.CertKey{Cert: s.AgentTLS.Cert, Key: s.AgentTLS.Key}) {
		t.Errorf("manage_tls = %+v, want agent_tls's certificate (the comment says so)", s.ManageTLS)
	}
	if s.Auth.Store != "/var/lib/llmgw/llmgw.db" {
		t.Errorf("auth.store = %q", s.Auth.Store)
	}
	if s.Agents.Grace != 20*time.Second || s.Timeouts.ResponseHeader != 5*time.Minute {
		t.Errorf("agents.grace = %s, timeouts.response_header = %s", s.Agents.Grace, s.Timeouts.ResponseHeader)
	}
	if len(s.Models) != 0 {
		t.Errorf("models = %d, want none (the guide adds them through ctl)", len(s.Models))
	}
	// The example spells out the defaults for the listeners; it must agree
	// with them, or the guide's port table is wrong.
	d := config.Default()
	for _, l := range []struct{ key, got, want string }{
		{"listen", s.Listen, d.Listen},
		{"agent_listen", s.AgentListen, d.AgentListen},
		{"manage_listen", s.ManageListen, d.ManageListen},
		{"metrics_listen", s.MetricsListen, d.MetricsListen},
		{"pprof_listen", s.PprofListen, d.PprofListen},
		{"limits.max_body_bytes", strconv.FormatInt(s.Limits.MaxBodyBytes, 10), strconv.FormatInt(d.Limits.MaxBodyBytes, 10)},
		{"agents.heartbeat_interval", s.Agents.HeartbeatInterval.String(), d.Agents.HeartbeatInterval.String()},
	} {
		if l.got != l.want {
			t.Errorf("%s = %q, want the default %q", l.key, l.got, l.want)
		}
	}
}

func TestQuickstartAgent(t *testing.T) {
	clearEnv(t)
	a := loadAgent(t)
	if a.NodeID != "gpu-01" || !strings.Contains(a.TLS.Cert, a.NodeID) {
		t.Errorf("node_id %q and tls.cert %q should name the same node", a.NodeID, a.TLS.Cert)
	}
	if len(a.Fabrics) != 1 || a.Fabrics[0].Name != "ib-a" || len(a.Fabrics[0].Adapters) == 0 {
		t.Errorf("fabrics = %+v, want one fabric ib-a with adapters", a.Fabrics)
	}
	for _, e := range []string{"vllm", "llamacpp"} {
		if a.Engines[e] == "" {
			t.Errorf("engines.%s has no path", e)
		}
	}
	if a.EnginePorts.Size() < 1 {
		t.Errorf("engine_ports %+v is empty", a.EnginePorts)
	}

	// The agent dials the port the control plane's example listens on.
	s := loadServer(t)
	_, agentPort, _ := strings.Cut(s.AgentListen, ":")
	if !strings.HasSuffix(a.Server, ":"+agentPort) {
		t.Errorf("agent server %q does not dial server.yaml's agent_listen %q", a.Server, s.AgentListen)
	}
}

func parseModel(t *testing.T, name string) spec.Model {
	t.Helper()
	m, err := spec.ParseModelFile(filepath.Join("models", name))
	if err != nil {
		t.Fatalf("models/%s: %v", name, err)
	}
	return m
}

// commands builds the engine command lines of one shard of m's first profile
// as an agent would, with the agent example's engine paths.
func commands(t *testing.T, m spec.Model, rank int) []driver.Command {
	t.Helper()
	a := loadAgent(t)
	p := m.Profiles[0]
	spec := driver.ShardSpec{
		Profile: p, ShardID: "r-1-" + strconv.Itoa(rank), ReplicaID: "r-1", Model: m.Name, Source: m.Source,
		Binary: a.Engines[p.Engine], Host: a.Address, Port: a.EnginePorts.From,
		Rank: rank, ContextLength: m.ContextLength,
	}
	if p.Engine == driver.EngineSim {
		spec.Binary = "/usr/local/bin/llmgw"
	}
	for i := range p.TP {
		spec.GPUIndices = append(spec.GPUIndices, i)
	}
	if p.Shards() > 1 {
		spec.DistInitAddr = "10.0.0.141:20001"
		spec.FabricAdapters = a.Fabrics[0].Adapters
	}
	d, err := driver.ForEngine(p.Engine)
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := d.Commands(spec)
	if err != nil {
		t.Fatalf("%s rank %d: %v", m.Name, rank, err)
	}
	return cmds
}

func TestModelQwenCoder(t *testing.T) {
	m := parseModel(t, "qwen-coder-3b.yaml")
	p := m.Profiles[0]
	if p.Engine != "llamacpp" || p.GPUClass != "" || p.TP != 0 || p.Shards() != 1 {
		t.Fatalf("profile = %+v, want a single-node llamacpp CPU profile", p)
	}
	if !slices.Contains(m.Aliases, "coder") {
		t.Errorf("aliases = %v, want coder (the guides call it so)", m.Aliases)
	}
	cmd := commands(t, m, 0)[0]
	// The comment in the file promises context_length x slots.
	if !containsSeq(cmd.Args, "--ctx-size", "65536") || !containsSeq(cmd.Args, "--n-gpu-layers", "0") {
		t.Errorf("llama-server args = %v, want --ctx-size 65536 and --n-gpu-layers 0", cmd.Args)
	}
	if !slices.Contains(cmd.Env, "CUDA_VISIBLE_DEVICES=") {
		t.Errorf("env = %v, want an empty CUDA_VISIBLE_DEVICES", cmd.Env)
	}
}

func TestModelLlama70B(t *testing.T) {
	m := parseModel(t, "llama-70b-tp8x2.yaml")
	p := m.Profiles[0]
	if p.Engine != "vllm" || p.GPUClass != "h100-80g" || p.TP != 8 || p.Shards() != 2 {
		t.Fatalf("profile = %+v, want vllm, h100-80g, tp 8, two nodes", p)
	}
	r0, r1 := commands(t, m, 0)[0], commands(t, m, 1)[0]
	for _, c := range []driver.Command{r0, r1} {
		if !containsSeq(c.Args, "--pipeline-parallel-size", "2") || !containsSeq(c.Args, "--tensor-parallel-size", "8") {
			t.Errorf("vllm args = %v, want tp 8 and pp 2", c.Args)
		}
		if !slices.Contains(c.Env, "NCCL_IB_HCA=mlx5_0,mlx5_1") {
			t.Errorf("env = %v, want the agent example's adapters in NCCL_IB_HCA", c.Env)
		}
	}
	if slices.Contains(r0.Args, "--headless") || !slices.Contains(r1.Args, "--headless") {
		t.Errorf("rank 0 args %v, rank 1 args %v: only the worker is headless", r0.Args, r1.Args)
	}
}

func TestModelSimChat(t *testing.T) {
	m := parseModel(t, "sim-chat.yaml")
	p := m.Profiles[0]
	if p.Engine != "sim" || p.TP != 0 || p.Shards() != 1 {
		t.Fatalf("profile = %+v, want a single-node sim CPU profile", p)
	}
	cmd := commands(t, m, 0)[0]
	if cmd.Args[0] != "sim-engine" || !containsSeq(cmd.Args, "--decode-tps", "200") {
		t.Errorf("sim args = %v", cmd.Args)
	}
}

// TestModelsTogether checks that the example models can share one catalog
// (no name or alias clash) and can be pasted under models: in server.yaml.
func TestModelsTogether(t *testing.T) {
	clearEnv(t)
	s := loadServer(t)
	entries, err := os.ReadDir("models")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		s.Models = append(s.Models, parseModel(t, e.Name()))
	}
	if len(s.Models) != 3 {
		t.Fatalf("found %d example models, want 3", len(s.Models))
	}
	if err := s.Validate(); err != nil {
		t.Fatalf("server.yaml with every example model: %v", err)
	}
}

// docBlock is a fenced YAML block of a guide that starts with a marker line
// naming what it is: "# server.yaml", "# agent.yaml" or "# model".
type docBlock struct {
	file string
	line int
	kind string
	body string
}

var marker = regexp.MustCompile(`^# (server\.yaml|agent\.yaml|model)\b`)

func docBlocks(t *testing.T) []docBlock {
	t.Helper()
	files, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []docBlock
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		var cur *docBlock
		var body strings.Builder
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			switch {
			case cur == nil && strings.TrimSpace(line) == "```yaml":
				cur = &docBlock{file: f, line: n + 1}
				body.Reset()
			case cur != nil && strings.TrimSpace(line) == "```":
				if m := marker.FindStringSubmatch(firstLine(body.String())); m != nil {
					cur.kind, cur.body = m[1], body.String()
					out = append(out, *cur)
				}
				cur = nil
			case cur != nil:
				body.WriteString(line)
				body.WriteByte('\n')
			}
		}
		fh.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// TestDocBlocks loads every marked YAML block of docs/*.md with the loader
// its marker names.
func TestDocBlocks(t *testing.T) {
	clearEnv(t)
	blocks := docBlocks(t)
	seen := map[string]int{}
	for _, b := range blocks {
		seen[b.kind]++
		name := filepath.Base(b.file) + ":" + strconv.Itoa(b.line)
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "block.yaml")
			if err := os.WriteFile(path, []byte(b.body), 0o600); err != nil {
				t.Fatal(err)
			}
			var err error
			switch b.kind {
			case "server.yaml":
				_, err = config.Load(path)
			case "agent.yaml":
				_, err = agentconfig.Load(path)
			case "model":
				_, err = spec.ParseModelFile(path)
			}
			if err != nil {
				t.Errorf("%s block at %s:%d does not load:\n%v", b.kind, b.file, b.line, err)
			}
		})
	}
	for _, kind := range []string{"server.yaml", "agent.yaml", "model"} {
		if seen[kind] == 0 {
			t.Errorf("no YAML block marked %q in docs/*.md: the guides lost their checked examples", "# "+kind)
		}
	}
}

// containsSeq reports whether args holds flag immediately followed by value.
func containsSeq(args []string, flag, value string) bool {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag && args[i+1] == value {
			return true
		}
	}
	return false
}
