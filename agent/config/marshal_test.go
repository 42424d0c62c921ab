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

// everyKey is a configuration in which every key differs from its default,
// so the round trip reads each one through its yaml and koanf tags.
func everyKey() Agent {
	a := Default()
	a.NodeID = "gpu-07"
	a.Server = "cp.internal:7443"
	a.Servers = []string{"cp2.internal:7443"}
	a.ServerName = "llmgw-cp"
	a.TLS = TLS{CA: "/etc/llmgw/ca.pem", Cert: "/etc/llmgw/gpu-07.pem", Key: "/etc/llmgw/gpu-07-key.pem"}
	a.Address = "10.0.3.7"
	a.StateDir = "/srv/llmgw-agent"
	a.EnginePorts = PortRange{From: 21000, To: 21099}
	a.HeartbeatInterval = 2 * time.Second
	a.WeightsDir = "/srv/weights"
	a.Fetch = Fetch{StallAfter: 30 * time.Second, GiveUpAfter: time.Hour, HFEndpoint: "http://hub.internal", HFTokenFile: "/etc/llmgw/hf-token", S3Endpoint: "http://minio.internal:9000", S3Region: "eu-1"}
	a.PeerListen = ":7444"
	a.Declaration = spec.Declaration{
		Fabrics:   []spec.Fabric{{Name: "ib-a", Adapters: []string{"mlx5_0", "mlx5_1"}}},
		Engines:   map[string]string{"vllm": "/opt/venvs/vllm/bin/vllm", "sim": ""},
		Labels:    map[string]string{"rack": "r3", "dev": "true"},
		ModelDirs: []string{"/var/lib/llmgw-models"},
		Discovery: spec.Discovery{NvidiaSMI: "/usr/bin/nvidia-smi", IBRoot: "/sys/class/infiniband", CPUInfo: "/proc/cpuinfo"},
	}
	return a
}

// TestMarshalRoundTrip writes configurations with Marshal and reads them
// with Load, the agent's own strict loader: the same values come back.
func TestMarshalRoundTrip(t *testing.T) {
	minimal := Default()
	minimal.Server = "cp:7443"
	minimal.TLS = TLS{CA: "ca.pem", Cert: "n.pem", Key: "n-key.pem"}
	for name, a := range map[string]Agent{"every key": everyKey(), "minimal": minimal} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "agent.yaml")
			if err := a.WriteFile(path, "Written by a test."); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(path)
			got, err := Load(path)
			if err != nil {
				t.Fatalf("Load of what Marshal wrote: %v\n%s", err, b)
			}
			if !reflect.DeepEqual(got, a) {
				t.Errorf("round trip =\n%+v\nwant\n%+v\nfile:\n%s", got, a, b)
			}
		})
	}
}

// TestMarshalLeavesDefaultsToTheLoader: keys at their default are not
// written, so the loader's defaults still apply.
func TestMarshalLeavesDefaultsToTheLoader(t *testing.T) {
	a := Default()
	a.Server = "cp:7443"
	a.TLS = TLS{CA: "ca.pem", Cert: "n.pem", Key: "n-key.pem"}
	a.Labels = map[string]string{"dev": "true"}
	b, err := a.Marshal("")
	if err != nil {
		t.Fatal(err)
	}
	want := "server: cp:7443\ntls:\n  ca: ca.pem\n  cert: n.pem\n  key: n-key.pem\nlabels:\n  dev: \"true\"\n"
	if string(b) != want {
		t.Errorf("Marshal =\n%s\nwant\n%s", b, want)
	}
}

// TestEveryKeyDiffers keeps everyKey honest: a field added to Agent is
// added there too, or the round trip would not read it.
func TestEveryKeyDiffers(t *testing.T) {
	var walk func(path string, v, d reflect.Value)
	walk = func(path string, v, d reflect.Value) {
		if v.Kind() == reflect.Struct {
			for i := 0; i < v.NumField(); i++ {
				walk(path+"."+v.Type().Field(i).Name, v.Field(i), d.Field(i))
			}
			return
		}
		if reflect.DeepEqual(v.Interface(), d.Interface()) {
			t.Errorf("everyKey leaves %s at its default", strings.TrimPrefix(path, "."))
		}
	}
	walk("", reflect.ValueOf(everyKey()), reflect.ValueOf(Default()))
}
