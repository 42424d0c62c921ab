package examples

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	agentconfig "github.com/llmgw/llmgw/agent/config"
	"github.com/llmgw/llmgw/runtime/config"
)

// TestDeployHA loads the two control planes and the agent of deploy/ha
// with the real loaders, and checks that they fit together and with the
// HAProxy configuration.
func TestDeployHA(t *testing.T) {
	clearEnv(t)
	var cps []config.Server
	for _, f := range []string{"deploy/ha/server-cp1.yaml", "deploy/ha/server-cp2.yaml"} {
		s, err := config.Load(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		cps = append(cps, s)
	}
	a, b := cps[0], cps[1]
	if a.HA.Name == b.HA.Name || a.HA.Name == "" {
		t.Errorf("ha.name %q and %q: each control plane needs its own", a.HA.Name, b.HA.Name)
	}
	if a.Auth.Store != b.Auth.Store {
		t.Errorf("auth.store %q and %q: both must use the one store", a.Auth.Store, b.Auth.Store)
	}
	if a.SharedLimits != b.SharedLimits || a.SharedLimits.SliceTTL < time.Minute {
		t.Errorf("shared_limits %+v and %+v: want the same on both, slice_ttl at least the one-minute window", a.SharedLimits, b.SharedLimits)
	}
	if bound := a.HA.Lease + a.HA.Retry; bound > 10*time.Second {
		t.Errorf("lease + retry = %s: docs/ha.md states at most 10s", bound)
	}
	agent, err := agentconfig.Load("deploy/ha/agent.yaml")
	if err != nil {
		t.Fatalf("deploy/ha/agent.yaml: %v", err)
	}
	servers := agent.ServerList()
	haproxy, err := os.ReadFile(filepath.Join("deploy", "ha", "haproxy.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, cp := range cps {
		if !strings.Contains(strings.Join(servers, " "), cp.HA.AdvertiseAgents) {
			t.Errorf("the agent lists %v, not %s's agent address %s", servers, cp.HA.Name, cp.HA.AdvertiseAgents)
		}
		if !strings.Contains(string(haproxy), cp.HA.AdvertiseClient) || !strings.Contains(string(haproxy), cp.HA.AdvertiseManage) {
			t.Errorf("haproxy.cfg does not send to %s at %s and %s", cp.HA.Name, cp.HA.AdvertiseClient, cp.HA.AdvertiseManage)
		}
	}
	if !strings.Contains(string(haproxy), "option httpchk GET /ready") || strings.Contains(string(haproxy), "GET /health") {
		t.Error("haproxy.cfg must check /ready (a standby's /health is 200 whether it can serve or not)")
	}
}
