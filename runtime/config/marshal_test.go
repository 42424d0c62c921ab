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
func everyKey() Server {
	s := Default()
	s.Listen, s.AgentListen, s.ManageListen, s.MetricsListen, s.PprofListen = "127.0.0.1:8000", "127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003", ""
	s.AgentTLS = TLS{CA: "/pki/ca.pem", Cert: "/pki/server.pem", Key: "/pki/server-key.pem"}
	s.ManageTLS = CertKey{Cert: "/pki/manage.pem", Key: "/pki/manage-key.pem"}
	s.Auth = Auth{Enabled: false, Store: "@/etc/llmgw/store", DefaultRPM: 60, DefaultTPM: 6000, DefaultMaxTokens: 512,
		DefaultPrice: &spec.Pricing{PromptPer1K: 0.01, CompletionPer1K: 0.5}, KeyCacheTTL: 2 * time.Second, LoginTTL: 90 * time.Minute}
	s.Agents = Agents{HeartbeatInterval: time.Second, Grace: 15 * time.Second, Settle: 0, RequireDeclared: true}
	s.Limits = Limits{MaxBodyBytes: 1 << 20, MaxUnauthenticatedConns: 64, MaxNotesPerAgent: 50, MaxNotesPerProject: 500}
	s.Timeouts = Timeouts{ClientHeader: 3 * time.Second, ClientBody: 20 * time.Second, ClientIdle: 30 * time.Second,
		ResponseHeader: 5 * time.Second, Generation: 90 * time.Second, StreamIdle: time.Minute, ColdStartWait: 0}
	s.Autoscale = Autoscale{UpLoad: 0.9, UpAfter: time.Minute, DownLoad: 0.1, DownAfter: 10 * time.Minute, EvictAfter: 5 * time.Minute}
	s.HA = HA{Name: "cp1", AdvertiseAgents: "cp1.internal:7443", AdvertiseManage: "cp1.internal:9090", AdvertiseClient: "cp1.internal:8080",
		Lease: 9 * time.Second, Renew: 3 * time.Second, Retry: 2 * time.Second, ManageCA: "/pki/ca.pem"}
	s.SharedLimits = SharedLimits{BudgetSlice: 0.2, RateSlice: 0.05, SliceTTL: 90 * time.Second, IdleReturn: 5 * time.Second}
	s.Models = []spec.Model{{
		Name: "sim-chat", Aliases: []string{"chat"}, Source: "sim://chat", RoutingProfile: "chat", ContextLength: 8192, MaxOutput: 1024,
		Pricing: &spec.Pricing{PromptPer1K: 1, CompletionPer1K: 2},
		Scaling: spec.Scaling{Min: 0, Max: 2, IdleTimeout: spec.Duration(5 * time.Minute)},
		Profiles: []spec.Profile{{
			Name: "h100", Engine: "vllm", GPUClass: "h100-80g", TP: 4, Nodes: 2, Weight: 3, Priority: 1,
			StartupTimeout: spec.Duration(time.Minute), MinMemoryGB: 64, MinDiskGB: 100, Labels: map[string]string{"rack": "r1"},
			Args: []string{"--max-num-seqs", "8"}, Env: map[string]string{"NCCL_DEBUG": "INFO"}, LaunchMode: "ray",
		}},
	}}
	return s
}

// TestMarshalRoundTrip writes configurations with Marshal and reads them
// with Load, the daemon's own strict loader: the same values come back.
func TestMarshalRoundTrip(t *testing.T) {
	minimal := Default()
	minimal.AgentTLS = TLS{CA: "ca.pem", Cert: "s.pem", Key: "s-key.pem"}
	for name, s := range map[string]Server{"every key": everyKey(), "minimal": minimal} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "server.yaml")
			if err := s.WriteFile(path, "Written by a test."); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(path)
			got, err := Load(path)
			if err != nil {
				t.Fatalf("Load of what Marshal wrote: %v\n%s", err, b)
			}
			want := s
			want.Normalize()
			if !reflect.DeepEqual(got, want) {
				t.Errorf("round trip =\n%+v\nwant\n%+v\nfile:\n%s", got, want, b)
			}
		})
	}
}

// TestMarshalLeavesDefaultsToTheLoader: keys at their default are not
// written, so the loader's defaults still apply; an empty string that is
// not the default is.
func TestMarshalLeavesDefaultsToTheLoader(t *testing.T) {
	s := Default()
	s.AgentTLS = TLS{CA: "ca.pem", Cert: "s.pem", Key: "s-key.pem"}
	s.PprofListen = ""
	s.Agents.Grace = 15 * time.Second
	b, err := s.Marshal("Written by a test.")
	if err != nil {
		t.Fatal(err)
	}
	want := "# Written by a test.\npprof_listen: \"\"\nagent_tls:\n  ca: ca.pem\n  cert: s.pem\n  key: s-key.pem\nagents:\n  grace: 15s\n"
	if string(b) != want {
		t.Errorf("Marshal =\n%s\nwant\n%s", b, want)
	}
}

// TestEveryKeyDiffers keeps everyKey honest: a field added to Server is
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
