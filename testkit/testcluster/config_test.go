package testcluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/config"
)

// TestServerConfig: the options' YAML fragments and Configure reach the
// written server.yaml, which the control plane's loader reads; a fragment
// the loader would refuse is refused here.
func TestServerConfig(t *testing.T) {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, config.EnvPrefix) {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
	dir := t.TempDir()
	c := &Cluster{PKIDir: filepath.Join(dir, "pki"), Manage: "127.0.0.1:9001", AgentAddr: "127.0.0.1:9002", StoreDSN: filepath.Join(dir, "llmgw.db")}
	opts := Options{
		Grace:    "10s",
		AuthYAML: "  login_ttl: 1h\n",
		Models:   "  - name: sim-chat\n    profiles: [{name: p, engine: sim}]\n",
		Configure: func(s *config.Server) {
			s.Agents.RequireDeclared = true
		},
	}
	s, err := serverConfig(c, []int{9000, 9001, 9002, 9003}, opts)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "server.yaml")
	if err := s.WriteFile(path, "Written by testcluster."); err != nil {
		t.Fatal(err)
	}
	got, err := config.Load(path)
	if err != nil {
		b, _ := os.ReadFile(path)
		t.Fatalf("server.yaml does not load: %v\n%s", err, b)
	}
	if got.Agents.Grace != 10*time.Second || got.Agents.HeartbeatInterval != time.Second || !got.Agents.RequireDeclared ||
		got.Auth.LoginTTL != time.Hour || got.PprofListen != "" || got.Auth.Store != c.StoreDSN ||
		len(got.Models) != 1 || got.Models[0].Profiles[0].Engine != "sim" {
		t.Errorf("server.yaml loads as %+v", got)
	}

	if s, err := serverConfig(c, []int{9000, 9001, 9002, 9003}, Options{Grace: "3s"}); err != nil || s.Models != nil || s.Agents.Grace != 3*time.Second {
		t.Errorf("options without fragments: %+v, %v", s, err)
	}
	opts.AuthYAML = "  login_tll: 1h\n"
	if _, err := serverConfig(c, []int{9000, 9001, 9002, 9003}, opts); err == nil || !strings.Contains(err.Error(), "auth.login_tll") {
		t.Errorf("a misspelt auth key: err = %v, want it named", err)
	}
	opts.AuthYAML, opts.Grace = "", "10s\n  require_declared: true"
	if _, err := serverConfig(c, []int{9000, 9001, 9002, 9003}, opts); err == nil {
		t.Errorf("a grace carrying another key was accepted")
	}
}
