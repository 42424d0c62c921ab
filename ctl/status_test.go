package ctl

import (
	"testing"

	"github.com/llmgw/llmgw/api/managev1"
)

// TestStatusOfTwoControlPlanes: ctl status names the leader, its token and
// lease, and every control plane with its role.
func TestStatusOfTwoControlPlanes(t *testing.T) {
	ms := func(agoMs int64) int64 { return testNow.UnixMilli() - agoMs }
	f := cannedManage()
	f.status.Ha = &managev1.HAStatus{
		AnsweredBy: "cp-1", Leader: "cp-1", Token: 3,
		LeaseAcquiredUnixMs: ms(5 * 60_000), LeaseExpiresUnixMs: testNow.UnixMilli() + 4_200,
		LeaseTtlMs: 6000, RenewMs: 2000,
		ControlPlanes: []*managev1.ControlPlane{
			{Name: "cp-1", Role: "leader", AgentAddr: "10.0.0.1:7443", ManageAddr: "10.0.0.1:9090", ClientAddr: "10.0.0.1:8080", Version: "0.4.0", LastSeenUnixMs: ms(1_500)},
			{Name: "cp-2", Role: "standby", AgentAddr: "10.0.0.2:7443", ManageAddr: "10.0.0.2:9090", ClientAddr: "10.0.0.2:8080", Version: "0.4.0", LastSeenUnixMs: ms(300)},
			{Name: "cp-3", Role: "gone", AgentAddr: "10.0.0.3:7443", ManageAddr: "10.0.0.3:9090", ClientAddr: "10.0.0.3:8080", Version: "0.3.0", LastSeenUnixMs: ms(2 * 3600_000)},
		},
	}
	env := startServer(t, f)
	code, out, errOut := runCtl(t, env, "status")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	want := `version:      0.4.0
nodes:        2/3 ready, 1 lost
models:       2
replicas:     1/2 ready
gpus:         2/16 used
leader:       cp-1 (token 3, since 5m ago, lease ends in 4s; 6s lease renewed every 2s)
answered by:  cp-1

CONTROL PLANE  ROLE     AGENTS         MANAGE         CLIENT         VERSION  LAST SEEN
cp-1           leader   10.0.0.1:7443  10.0.0.1:9090  10.0.0.1:8080  0.4.0    1s
cp-2           standby  10.0.0.2:7443  10.0.0.2:9090  10.0.0.2:8080  0.4.0    0s
cp-3           gone     10.0.0.3:7443  10.0.0.3:9090  10.0.0.3:8080  0.3.0    2h
`
	if out != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out, want)
	}
}
