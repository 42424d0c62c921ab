package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/spec"
)

const baseYAML = "server: cp:7443\ntls: {ca: ca.pem, cert: n.pem, key: n-key.pem}\n"

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadExample(t *testing.T) {
	a, err := Load("testdata/agent.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := Agent{
		NodeID:            "gpu-07",
		Server:            "cp.internal:7443",
		TLS:               TLS{CA: "/etc/llmgw/ca.pem", Cert: "/etc/llmgw/node.pem", Key: "/etc/llmgw/node-key.pem"},
		Address:           "10.0.3.7",
		StateDir:          "/var/lib/llmgw-agent",
		EnginePorts:       PortRange{From: 21000, To: 21099},
		HeartbeatInterval: 5 * time.Second,
		Fetch:             Fetch{StallAfter: time.Minute, GiveUpAfter: 10 * time.Minute},
		Declaration: spec.Declaration{
			Fabrics:   []spec.Fabric{{Name: "ib-a", Adapters: []string{"mlx5_0", "mlx5_1"}}},
			Engines:   map[string]string{"vllm": "/opt/venvs/vllm/bin/vllm", "sim": ""},
			Labels:    map[string]string{"rack": "r3"},
			ModelDirs: []string{"/var/lib/llmgw-models"},
			Discovery: spec.Discovery{NvidiaSMI: "/usr/bin/nvidia-smi"},
		},
	}
	if !reflect.DeepEqual(a, want) {
		t.Fatalf("Load =\n%+v\nwant\n%+v", a, want)
	}
	if a.EnginePorts.Size() != 100 {
		t.Errorf("Size = %d, want 100", a.EnginePorts.Size())
	}
}

func TestLoadDefaults(t *testing.T) {
	a, err := Load("testdata/minimal.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := Default()
	want.Server = "cp.internal:7443"
	want.TLS = TLS{CA: "ca.pem", Cert: "node.pem", Key: "node-key.pem"}
	if !reflect.DeepEqual(a, want) {
		t.Fatalf("Load =\n%+v\nwant\n%+v", a, want)
	}
	if a.Address != "127.0.0.1" || a.StateDir != "/var/lib/llmgw-agent" || a.EnginePorts != (PortRange{20000, 20999}) || a.HeartbeatInterval != 5*time.Second {
		t.Fatalf("defaults wrong: %+v", a)
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name string
		file string
		body string
		want []string
	}{
		{
			name: "adapter under two fabrics",
			file: "testdata/two-fabrics.yaml",
			want: []string{`testdata/two-fabrics.yaml: invalid node declaration: fabrics[1].adapters: mlx5_0 is already under fabric "ib-a"`},
		},
		{
			name: "unknown key",
			body: baseYAML + "fabric:\n  - name: ib-a\n",
			want: []string{`agent.yaml:3: unknown key "fabric" (did you mean fabrics?)`},
		},
		{
			name: "unknown key in a fabric",
			body: baseYAML + "fabrics:\n  - name: ib-a\n    adapter: [mlx5_0]\n",
			want: []string{`agent.yaml:5: unknown key "fabrics[0].adapter" (did you mean fabrics[0].adapters?)`},
		},
		{
			name: "wrong type",
			body: baseYAML + "engine_ports: {from: low, to: 2}\n",
			want: []string{`agent.yaml:3: engine_ports.from: cannot parse "low" as a whole number`},
		},
		{
			name: "bad duration",
			body: baseYAML + "heartbeat_interval: often\n",
			want: []string{`agent.yaml:3: heartbeat_interval: cannot parse "often" as a duration`},
		},
		{
			name: "server and tls required",
			body: "address: 10.0.0.1\n",
			want: []string{"agent.yaml: server: is required", "agent.yaml: tls.ca: is required", "agent.yaml: tls.cert: is required", "agent.yaml: tls.key: is required"},
		},
		{
			name: "server without port",
			body: "server: cp\ntls: {ca: a, cert: b, key: c}\n",
			want: []string{`agent.yaml: server: "cp" is not host:port`},
		},
		{
			name: "address with port",
			body: baseYAML + "address: 10.0.0.1:80\n",
			want: []string{`address: "10.0.0.1:80" must be a host name or IP address without a port`},
		},
		{
			name: "unspecified address",
			body: baseYAML + "address: 0.0.0.0\n",
			want: []string{`address: "0.0.0.0" cannot be reached by other nodes`},
		},
		{
			name: "port range reversed",
			body: baseYAML + "engine_ports: {from: 30000, to: 20000}\n",
			want: []string{"engine_ports: from 30000 to 20000 is not a port range"},
		},
		{
			name: "unknown engine",
			body: baseYAML + "engines: {tgi: /opt/tgi}\n",
			want: []string{"agent.yaml: invalid node declaration: engines.tgi: unknown engine"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.file
			if path == "" {
				path = writeConfig(t, tt.body)
			}
			_, err := Load(path)
			if err == nil {
				t.Fatalf("Load succeeded, want %q", tt.want)
			}
			msg := err.Error()
			if tt.file == "" {
				msg = strings.ReplaceAll(msg, path, "agent.yaml")
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error\n%s\ndoes not contain\n%s", msg, w)
				}
			}
		})
	}
}

func TestLoadEnv(t *testing.T) {
	t.Setenv("LLMGW_SERVER", "cp2:7443")
	t.Setenv("LLMGW_ENGINE_PORTS__FROM", "25000")
	t.Setenv("LLMGW_ENGINE_PORTS__TO", "25099")
	t.Setenv("LLMGW_MODEL_DIRS", "/a,/b")
	t.Setenv("LLMGW_LABELS__ZONE", "z1")
	a, err := Load(writeConfig(t, baseYAML+"labels: {rack: r1}\n"))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if a.Server != "cp2:7443" || a.EnginePorts != (PortRange{25000, 25099}) ||
		!reflect.DeepEqual(a.ModelDirs, []string{"/a", "/b"}) ||
		!reflect.DeepEqual(a.Labels, map[string]string{"rack": "r1", "zone": "z1"}) {
		t.Fatalf("environment not applied: %+v", a)
	}

	t.Setenv("LLMGW_STATEDIR", "/x")
	_, err = Load(writeConfig(t, baseYAML))
	if err == nil || !strings.Contains(err.Error(), `LLMGW_STATEDIR: unknown key "statedir" (did you mean state_dir?)`) {
		t.Fatalf("Load with unknown variable = %v", err)
	}
}
