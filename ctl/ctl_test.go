package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/api/specpb"
	"github.com/llmgw/llmgw/api/specv1"
	"github.com/llmgw/llmgw/spec"
)

func TestTables(t *testing.T) {
	env := startServer(t, cannedManage())
	tests := []struct {
		name string
		args []string
		want string
	}{
		{
			name: "status",
			args: []string{"status"},
			want: `version:   0.4.0
nodes:     2/3 ready, 1 lost
models:    2
replicas:  1/2 ready
gpus:      2/16 used
`,
		},
		{
			name: "nodes",
			args: []string{"nodes"},
			want: `NODE          STATE               GPUS      MEM    DISK       CLASSES   FABRICS         REPLICAS  LAST SEEN
llmgw-node01  ready (undeclared)  8/8 free  503G   120G/400G  h100-80g  ib-a            0         2s
llmgw-node02  ready (undeclared)  6/8 free  1007G  -          h100-80g  ib-a(out),roce  1         1m
cpu01         lost (undeclared)   -         62G    -          -         -               0         3h

llmgw-node02: fabric ib-a out of service: mlx5_1 port 1 is DOWN
cpu01: lost: no heartbeat since 3h
`,
		},
		{
			name: "fabrics, a multi-line description folded",
			args: []string{"fabrics"},
			want: `FABRIC  DESCRIPTION               NODES
ib-a    rack A, NDR 400G spine 1  llmgw-node01,llmgw-node02
ib-b    -                         -
`,
		},
		{
			name: "models",
			args: []string{"models"},
			want: `MODEL                      SERVING  REPLICAS  WEIGHT  STATUS   ALIASES
qwen2.5-coder-3b-instruct  yes      1/1       cpu:1   serving  coder
llama-3.1-70b              no       0/1       -       failed   -

llama-3.1-70b: failed: replica r-70b-1 failed: shard 1 exited
`,
		},
		{
			name: "replicas with the failed shard's diagnosis",
			args: []string{"replicas"},
			want: `REPLICA    MODEL                      PROFILE  STATE   SHARDS  NODES                      RUN/WAIT/KV  ERROR
r-coder-1  qwen2.5-coder-3b-instruct  cpu      ready   1/1     llmgw-node01               2/1/35%      -
r-70b-1    llama-3.1-70b              tp8x2    failed  0/2     llmgw-node01,llmgw-node02  -            shard 1 on llmgw-node02 failed: engine…

replica r-70b-1 (llama-3.1-70b) failed: shard 1 on llmgw-node02 failed: engine exited with status 1 before it was ready
  shard 1 on llmgw-node02: engine exited with status 1 before it was ready
    engine output, last lines:
    | INFO loading weights
    | ERROR NCCL error: unhandled system error
    | RuntimeError: NCCL communicator was aborted
`,
		},
		{
			name: "replicas of one model, flag value after the flag",
			args: []string{"replicas", "--model", "qwen2.5-coder-3b-instruct"},
			want: `REPLICA    MODEL                      PROFILE  STATE  SHARDS  NODES         RUN/WAIT/KV  ERROR
r-coder-1  qwen2.5-coder-3b-instruct  cpu      ready  1/1     llmgw-node01  2/1/35%      -
`,
		},
		{
			name: "explain-placement prints the control plane's text",
			args: []string{"explain-placement", "llama-3.1-70b"},
			want: `llama-3.1-70b does not place.
profile tp8x2: no fabric has two nodes with 8 free h100-80g
  llmgw-node01  ok (score 0.50)
  cpu01         node is lost
`,
		},
		{
			name: "model get prints the definition model add reads",
			args: []string{"model", "get", "qwen2.5-coder-3b-instruct"},
			want: `# origin: api, generation 5f2c
# status: serving, 1/1 replicas ready (1 total)
name: qwen2.5-coder-3b-instruct
aliases:
  - coder
source: /var/lib/llmgw-models/qwen2.5-coder-3b-instruct-q4_k_m.gguf
routing_profile: chat
context_length: 32768
max_output: 4096
scaling:
  min: 1
  max: 1
profiles:
  - name: cpu
    engine: llamacpp
    nodes: 1
    weight: 1
    priority: 100
    startup_timeout: 5m
    min_memory_gb: 8
    args:
      - --ctx-size
      - "65536"
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCtl(t, env, tt.args...)
			if code != 0 {
				t.Fatalf("exit %d, stderr:\n%s", code, errOut)
			}
			if out != tt.want {
				t.Errorf("stdout:\n%s\nwant:\n%s", out, tt.want)
			}
			if errOut != "" {
				t.Errorf("stderr: %q, want nothing", errOut)
			}
		})
	}
}

func TestExplainWithoutTextRendersVerdicts(t *testing.T) {
	f := cannedManage()
	f.explanation.Text = ""
	env := startServer(t, f)
	code, out, errOut := runCtl(t, env, "explain-placement", "llama-3.1-70b")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	want := `model llama-3.1-70b does not place

profile tp8x2: does not place: no fabric has two nodes with 8 free h100-80g
  NODE          FEASIBLE  SCORE  REASON
  llmgw-node01  yes       0.50   -
  cpu01         no        -      node is lost
`
	if out != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out, want)
	}
}

// decodeArray reads a --json array back into messages of type M.
func decodeArray[M proto.Message](t *testing.T, out string, newM func() M) []M {
	t.Helper()
	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("output is not a JSON array: %v\n%s", err, out)
	}
	msgs := make([]M, len(raw))
	for i, r := range raw {
		msgs[i] = newM()
		if err := protojson.Unmarshal(r, msgs[i]); err != nil {
			t.Fatalf("element %d: %v", i, err)
		}
	}
	return msgs
}

func TestJSON(t *testing.T) {
	f := cannedManage()
	env := startServer(t, f)

	t.Run("nodes", func(t *testing.T) {
		code, out, errOut := runCtl(t, env, "nodes", "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		// docs/releases.md reads each agent's version from this key.
		for _, key := range []string{`"nvlink_peers": [`, `"last_seen_unix_ms": `, `"memory_total_bytes": `, `"in_service": true`, `"agent_version": "0.9.0"`} {
			if !strings.Contains(out, key) {
				t.Errorf("output lacks %s", key)
			}
		}
		if strings.Contains(out, "nvlinkPeers") {
			t.Error("output has camelCase keys, want the proto names")
		}
		if !strings.HasPrefix(out, "[\n  {\n    \"id\": \"llmgw-node01\",\n") {
			t.Errorf("output is not a multiline array of nodes:\n%.200s", out)
		}
		got := decodeArray(t, out, func() *managev1.Node { return new(managev1.Node) })
		if len(got) != len(f.nodes) {
			t.Fatalf("%d nodes, want %d", len(got), len(f.nodes))
		}
		for i := range got {
			if !proto.Equal(got[i], f.nodes[i]) {
				t.Errorf("node %d round-trips as %v, want %v", i, got[i], f.nodes[i])
			}
		}
	})

	t.Run("fabrics", func(t *testing.T) {
		code, out, errOut := runCtl(t, env, "fabrics", "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		want := `[
  {
    "name": "ib-a",
    "description": "rack A, NDR 400G\nspine 1",
    "nodes": [
      "llmgw-node01",
      "llmgw-node02"
    ]
  },
  {
    "name": "ib-b"
  }
]
`
		if out != want {
			t.Errorf("stdout:\n%s\nwant:\n%s", out, want)
		}
		got := decodeArray(t, out, func() *managev1.Fabric { return new(managev1.Fabric) })
		if len(got) != len(f.fabrics) {
			t.Fatalf("%d fabrics, want %d", len(got), len(f.fabrics))
		}
		for i := range got {
			if !proto.Equal(got[i], f.fabrics[i]) {
				t.Errorf("fabric %d round-trips as %v, want %v", i, got[i], f.fabrics[i])
			}
		}
	})

	t.Run("models", func(t *testing.T) {
		code, _, errOut := runCtl(t, env, "--json", "models")
		if code != 2 {
			t.Fatalf("a flag before the command: exit %d, want 2; stderr %s", code, errOut)
		}
		code, out, errOut := runCtl(t, env, "models", "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		got := decodeArray(t, out, func() *managev1.Model { return new(managev1.Model) })
		if len(got) != 2 || !proto.Equal(got[0], f.models[0]) || !proto.Equal(got[1], f.models[1]) {
			t.Errorf("models round-trip as %v", got)
		}
		if !strings.Contains(out, `"routing_profile": "chat"`) {
			t.Errorf("output lacks routing_profile:\n%s", out)
		}
	})

	t.Run("replicas", func(t *testing.T) {
		code, out, errOut := runCtl(t, env, "replicas", "--json", "--model", "llama-3.1-70b")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		got := decodeArray(t, out, func() *managev1.Replica { return new(managev1.Replica) })
		if len(got) != 1 || !proto.Equal(got[0], f.replicas[1]) {
			t.Errorf("replicas round-trip as %v, want only r-70b-1", got)
		}
		if !strings.Contains(out, `"last_output": [`) {
			t.Errorf("output lacks last_output:\n%s", out)
		}
	})

	t.Run("explain-placement, flag after the model", func(t *testing.T) {
		code, out, errOut := runCtl(t, env, "explain-placement", "llama-3.1-70b", "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		want := `{
  "model": "llama-3.1-70b",
  "profiles": [
    {
      "profile": "tp8x2",
      "summary": "no fabric has two nodes with 8 free h100-80g",
      "nodes": [
        {
          "node": "llmgw-node01",
          "feasible": true,
          "score": 0.5
        },
        {
          "node": "cpu01",
          "reason": "node is lost"
        }
      ]
    }
  ],
  "text": "llama-3.1-70b does not place.\nprofile tp8x2: no fabric has two nodes with 8 free h100-80g\n  llmgw-node01  ok (score 0.50)\n  cpu01         node is lost\n"
}
`
		if out != want {
			t.Errorf("stdout:\n%s\nwant:\n%s", out, want)
		}
	})

	t.Run("empty list is an empty array", func(t *testing.T) {
		code, out, _ := runCtl(t, env, "replicas", "--model", "nothing", "--json")
		if code != 0 || out != "[]\n" {
			t.Errorf("exit %d, stdout %q; want 0 and []", code, out)
		}
	})
}

const coderYAML = `# qwen-coder-3b.yaml
name: qwen2.5-coder-3b-instruct
aliases: [coder]
source: /var/lib/llmgw-models/qwen2.5-coder-3b-instruct-q4_k_m.gguf
routing_profile: chat
context_length: 32768
max_output: 4096
scaling: { min: 1, max: 2, idle_timeout: 30m }
profiles:
- name: cpu
  engine: llamacpp
  weight: 1
  priority: 100
  startup_timeout: 5m
  min_memory_gb: 8
  args: ["--ctx-size", "65536"]
- name: tp2
  engine: vllm
  gpu_class: h100-80g
  tp: 2
  priority: 50
  min_disk_gb: 20
  labels: { zone: a }
`

func wantCoder() *managev1.Model {
	return &managev1.Model{
		Name: "qwen2.5-coder-3b-instruct", Aliases: []string{"coder"},
		Source:         "/var/lib/llmgw-models/qwen2.5-coder-3b-instruct-q4_k_m.gguf",
		RoutingProfile: "chat", ContextLength: 32768, MaxOutput: 4096,
		Scaling: &managev1.Scaling{Min: 1, Max: 2, IdleTimeout: "30m"},
		Profiles: []*specv1.Profile{
			{Name: "cpu", Engine: "llamacpp", Nodes: 1, Weight: 1, Priority: 100, StartupTimeout: "5m", MinMemoryGb: 8, Args: []string{"--ctx-size", "65536"}},
			// nodes, weight and startup_timeout are the catalog's defaults.
			{Name: "tp2", Engine: "vllm", GpuClass: "h100-80g", Tp: 2, Nodes: 1, Weight: 1, Priority: 50, StartupTimeout: "10m", MinDiskGb: 20, Labels: map[string]string{"zone": "a"}},
		},
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestModelAdd(t *testing.T) {
	existing := writeFile(t, "coder.yaml", coderYAML)
	fresh := writeFile(t, "fresh.yaml", strings.Replace(coderYAML, "name: qwen2.5-coder-3b-instruct", "name: fresh-model", 1))
	wantFresh := wantCoder()
	wantFresh.Name = "fresh-model"

	tests := []struct {
		name        string
		args        []string
		wantOut     string
		wantCreated []*managev1.Model
		wantUpdated []*managev1.Model
	}{
		{
			name:        "new model is created",
			args:        []string{"model", "add", "-f", fresh},
			wantOut:     "created model fresh-model (generation g1)\n",
			wantCreated: []*managev1.Model{wantFresh},
		},
		{
			name:        "existing model is updated",
			args:        []string{"model", "add", "-f", existing},
			wantOut:     "updated model qwen2.5-coder-3b-instruct (generation g2)\n",
			wantCreated: []*managev1.Model{wantCoder()},
			wantUpdated: []*managev1.Model{wantCoder()},
		},
		{
			name:        "--update goes straight to UpdateModel",
			args:        []string{"model", "add", "--update", "--file", existing},
			wantOut:     "updated model qwen2.5-coder-3b-instruct (generation g2)\n",
			wantUpdated: []*managev1.Model{wantCoder()},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := cannedManage()
			env := startServer(t, f)
			code, out, errOut := runCtl(t, env, tt.args...)
			if code != 0 {
				t.Fatalf("exit %d, stderr:\n%s", code, errOut)
			}
			if out != tt.wantOut {
				t.Errorf("stdout %q, want %q", out, tt.wantOut)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			assertModels(t, "created", f.created, tt.wantCreated)
			assertModels(t, "updated", f.updated, tt.wantUpdated)
		})
	}
}

func assertModels(t *testing.T, what string, got, want []*managev1.Model) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s %d models, want %d: %v", what, len(got), len(want), got)
	}
	for i := range got {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("%s model %d:\n%v\nwant:\n%v", what, i, got[i], want[i])
		}
	}
}

func TestModelGetRoundTripsThroughAdd(t *testing.T) {
	f := cannedManage()
	env := startServer(t, f)
	code, out, errOut := runCtl(t, env, "model", "get", "qwen2.5-coder-3b-instruct")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	def, err := spec.ParseModelYAML([]byte(out), "get-output.yaml")
	if err != nil {
		t.Fatalf("model get output does not parse as a definition: %v", err)
	}
	want := proto.Clone(f.models[0]).(*managev1.Model)
	want.Origin, want.Generation, want.Status = "", "", nil
	if got := specpb.ModelToProto(def); !proto.Equal(got, want) {
		t.Errorf("round trip:\n%v\nwant:\n%v", got, want)
	}
}

func TestModelRm(t *testing.T) {
	f := cannedManage()
	env := startServer(t, f)
	code, out, errOut := runCtl(t, env, "model", "rm", "qwen2.5-coder-3b-instruct")
	if code != 0 || out != "deleted model qwen2.5-coder-3b-instruct\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, _, errOut = runCtl(t, env, "model", "rm", "llama-3.1-70b")
	wantErr := "llmgw ctl: deleting model llama-3.1-70b: model \"llama-3.1-70b\" is declared in server.yaml; remove it there\n"
	if code != 1 || errOut != wantErr {
		t.Errorf("removing a config model: exit %d, stderr %q; want 1, %q", code, errOut, wantErr)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !reflect.DeepEqual(f.deleted, []string{"qwen2.5-coder-3b-instruct"}) {
		t.Errorf("server deleted %v", f.deleted)
	}
}

func TestErrors(t *testing.T) {
	env := startServer(t, cannedManage())
	// A loopback port with nothing listening.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := lis.Addr().String()
	lis.Close()
	otherCA := newTestPKI(t).caFile
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for kk, vv := range env {
			m[kk] = vv
		}
		m[k] = v
		return m
	}
	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		wantCode int
		wantErr  []string
	}{
		{"bad token", with(EnvToken, "wrong"), []string{"nodes"}, 1,
			[]string{"llmgw ctl: listing nodes: invalid admin token\n", "check LLMGW_TOKEN"}},
		{"--token overrides the environment", with(EnvToken, "wrong"), []string{"status", "--token", "also-wrong"}, 1,
			[]string{"llmgw ctl: getting cluster status: invalid admin token\n"}},
		{"missing endpoint", with(EnvEndpoint, ""), []string{"models"}, 2,
			[]string{"set --endpoint or LLMGW_ENDPOINT"}},
		{"missing token", with(EnvToken, ""), []string{"models"}, 2,
			[]string{"set --token or LLMGW_TOKEN"}},
		{"unreachable endpoint", with(EnvEndpoint, closed), []string{"replicas"}, 1,
			[]string{"llmgw ctl: listing replicas: ", "unreachable; check LLMGW_ENDPOINT"}},
		{"certificate from another CA", with(EnvCACert, otherCA), []string{"status"}, 1,
			[]string{"llmgw ctl: getting cluster status: ", "certificate", "unreachable"}},
		{"unreadable CA file", with(EnvCACert, filepath.Join(t.TempDir(), "nope.pem")), []string{"status"}, 1,
			[]string{"llmgw ctl: --ca-cert / LLMGW_CA_CERT: ", "nope.pem"}},
		{"unknown model", env, []string{"model", "get", "nope"}, 1,
			[]string{"llmgw ctl: getting model nope: model \"nope\" not found\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCtl(t, tt.env, tt.args...)
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.wantCode, errOut)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing", out)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
		})
	}
}

func TestRunReadsEnv(t *testing.T) {
	env := startServer(t, cannedManage())
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if code := Run(ctx, []string{"status"}, &out, &errOut, func(k string) string { return env[k] }); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "version:   0.4.0") {
		t.Errorf("stdout:\n%s", out.String())
	}
	out.Reset()
	errOut.Reset()
	if code := Run(ctx, []string{"nodes"}, &out, &errOut, nil); code != 2 || !strings.Contains(errOut.String(), "LLMGW_ENDPOINT") {
		t.Errorf("nil env: exit %d, stderr %q; want 2 naming LLMGW_ENDPOINT", code, errOut.String())
	}
}

func TestModelAddFileErrors(t *testing.T) {
	f := cannedManage()
	env := startServer(t, f)
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	tests := []struct {
		name    string
		file    string
		wantErr string
	}{
		{
			name:    "unknown key in a profile",
			file:    writeFile(t, "bad.yaml", strings.Replace(coderYAML, "  tp: 2\n", "  tp: 2\n  gpu_count: 2\n", 1)),
			wantErr: `bad.yaml:21: unknown key "profiles[1].gpu_count"`,
		},
		{
			name:    "unknown top-level key",
			file:    writeFile(t, "top.yaml", strings.Replace(coderYAML, "source:", "sorce:", 1)),
			wantErr: `top.yaml:4: unknown key "sorce"`,
		},
		{
			name:    "duration without a unit",
			file:    writeFile(t, "dur.yaml", strings.Replace(coderYAML, "startup_timeout: 5m", "startup_timeout: 5", 1)),
			wantErr: `dur.yaml:14: profiles[0].startup_timeout: cannot parse 5 as a duration`,
		},
		{
			name:    "NaN price",
			file:    writeFile(t, "nan.yaml", coderYAML+"pricing: {prompt_per_1k: .nan, completion_per_1k: 1}\n"),
			wantErr: `nan.yaml: pricing.prompt_per_1k: must be a finite number, got NaN`,
		},
		{
			name:    "missing file",
			file:    missing,
			wantErr: missing,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCtl(t, env, "model", "add", "-f", tt.file)
			if code != 1 || out != "" {
				t.Errorf("exit %d, stdout %q; want 1 and nothing", code, out)
			}
			if !strings.HasPrefix(errOut, "llmgw ctl: reading model definition: ") || !strings.Contains(errOut, tt.wantErr) {
				t.Errorf("stderr %q, want it to contain %q", errOut, tt.wantErr)
			}
		})
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.created)+len(f.updated) != 0 {
		t.Errorf("the server was sent %d models, want none", len(f.created)+len(f.updated))
	}
}

func TestUsage(t *testing.T) {
	const scaleUsage = "usage: llmgw ctl scale MODEL [N] [--min N] [--max N]\n"
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
		wantErr  string
	}{
		{"no command", nil, 2, "", "usage: llmgw ctl <command>"},
		{"help", []string{"help"}, 0, "explain-placement MODEL", ""},
		{"unknown command", []string{"frobnicate"}, 2, "", "unknown command \"frobnicate\""},
		{"explain without a model", []string{"explain-placement", "--json"}, 2, "", "llmgw ctl explain-placement: missing the model name\nusage: llmgw ctl explain-placement"},
		{"explain with two models", []string{"explain-placement", "a", "b"}, 2, "", "unexpected argument \"b\""},
		{"nodes with an argument", []string{"nodes", "extra"}, 2, "", "llmgw ctl nodes: unexpected argument \"extra\"\nusage: llmgw ctl nodes"},
		{"help lists drain", []string{"help"}, 0, "drain NODE [--cancel|--force]", ""},
		{"help lists fabrics", []string{"help"}, 0, "fabrics [--json]", ""},
		{"drain without a node", []string{"drain", "--cancel"}, 2, "", "missing the node name"},
		{"drain with two nodes", []string{"drain", "a", "b"}, 2, "", "llmgw ctl drain: unexpected argument \"b\"\nusage: llmgw ctl drain"},
		{"drain help", []string{"drain", "-h"}, 0, "", "usage: llmgw ctl drain NODE [--cancel | --force]"},
		{"fabrics with an argument", []string{"fabrics", "ib-a"}, 2, "", "unexpected argument \"ib-a\""},
		{"unknown flag", []string{"nodes", "--wide"}, 2, "", "flag provided but not defined: -wide"},
		{"subcommand help", []string{"replicas", "-h"}, 0, "", "usage: llmgw ctl replicas [--model M] [--json]"},
		{"model add without -f", []string{"model", "add"}, 2, "", "no model definition: pass -f FILE"},
		{"scale without a model", []string{"scale"}, 2, "", "llmgw ctl scale: missing the model name\n" + scaleUsage},
		{"scale with three arguments", []string{"scale", "m", "1", "2"}, 2, "", "llmgw ctl scale: unexpected argument \"2\"\n" + scaleUsage},
		{"scale without a count", []string{"scale", "m"}, 2, "", "llmgw ctl scale: missing the replica count: scale MODEL N, or --min/--max\n" + scaleUsage},
		{"scale by a word", []string{"scale", "m", "many"}, 2, "", "llmgw ctl scale: N \"many\" is not a replica count (a whole number of at least 0)\n" + scaleUsage},
		{"scale by a negative max", []string{"scale", "m", "--max", "-1"}, 2, "", "llmgw ctl scale: --max \"-1\" is not a replica count (a whole number of at least 0)\n" + scaleUsage},
		{"scale by count and --min", []string{"scale", "m", "2", "--min", "1"}, 2, "", "llmgw ctl scale: give the count or --min, not both\n" + scaleUsage},
		{"scale with an unknown flag", []string{"scale", "m", "2", "--replicas", "3"}, 2, "", "flag provided but not defined: -replicas\n" + scaleUsage},
		{"scale help", []string{"scale", "--help"}, 0, "", scaleUsage},
		{"model without subcommand", []string{"model"}, 2, "", "usage: llmgw ctl model <add|get|rm>"},
		{"cert without subcommand", []string{"cert"}, 2, "", "usage: llmgw ctl cert <init-ca|issue-server|issue-node>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCtl(t, map[string]string{}, tt.args...)
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.wantCode, errOut)
			}
			if !strings.Contains(out, tt.wantOut) {
				t.Errorf("stdout lacks %q:\n%s", tt.wantOut, out)
			}
			if !strings.Contains(errOut, tt.wantErr) {
				t.Errorf("stderr lacks %q:\n%s", tt.wantErr, errOut)
			}
		})
	}
}

func TestHumanise(t *testing.T) {
	durations := []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0s"},
		{0, "0s"},
		{2400 * time.Millisecond, "2s"},
		{59 * time.Second, "59s"},
		{90 * time.Second, "1m"},
		{3 * time.Hour, "3h"},
		{47 * time.Hour, "47h"},
		{72 * time.Hour, "3d"},
	}
	for _, tt := range durations {
		if got := humanDuration(tt.d); got != tt.want {
			t.Errorf("humanDuration(%s) = %q, want %q", tt.d, got, tt.want)
		}
	}
	if got := humanAgo(testNow, 0); got != "never" {
		t.Errorf("humanAgo(never seen) = %q, want never", got)
	}
	sizes := []struct {
		b    uint64
		want string
	}{
		{0, "-"},
		{512 << 20, "512M"},
		{503<<30 + 1, "503G"},
		{12 << 40, "12T"},
	}
	for _, tt := range sizes {
		if got := humanBytes(tt.b); got != tt.want {
			t.Errorf("humanBytes(%d) = %q, want %q", tt.b, got, tt.want)
		}
	}
}

// A usage message lists every flag with its default; the admin token from
// LLMGW_TOKEN must not be one of them.
func TestUsageNeverShowsTheToken(t *testing.T) {
	const token = "llmgwadm-secret-from-the-environment"
	for _, args := range [][]string{{"nodes", "--wide"}, {"replicas", "-h"}, {"model", "add", "--bogus"}, {"login", "--bogus"}} {
		_, out, errOut := runCtl(t, map[string]string{EnvToken: token, EnvEndpoint: "127.0.0.1:1"}, args...)
		if strings.Contains(out+errOut, token) {
			t.Errorf("ctl %v printed the admin token:\n%s%s", args, out, errOut)
		}
		if !strings.Contains(errOut, "-token") {
			t.Errorf("ctl %v: usage without the -token flag:\n%s", args, errOut)
		}
	}
}
