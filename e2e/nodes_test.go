package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/pki"
	"github.com/llmgw/llmgw/sim/simhw"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

// TestDeclareDrainRevoke drives a node's life through the management API as
// Terraform will: its declaration from the control plane replaces the
// agent's file and reaches the running agent; a drain moves its replica
// (the replacement ready first); a revocation refuses its certificate.
func TestDeclareDrainRevoke(t *testing.T) {
	c := testcluster.New(t, binary, "10s", `  - name: sim-chat
    source: sim://chat
    scaling: { min: 1, max: 1 }
    profiles:
      - { name: h100, engine: sim, gpu_class: h100-80g, tp: 1, startup_timeout: 1m }
`)
	// node01's sysfs has an active adapter, but its local file declares no fabric.
	c.StartAgent(testcluster.NodeSpec{ID: "node01", Adapters: []simhw.SimAdapter{active("mlx5_0")}})
	c.StartAgent(testcluster.NodeSpec{ID: "node02"})
	mc := c.ManageClient()
	ctx := context.Background()

	if _, err := mc.CreateFabric(ctx, &managev1.CreateFabricRequest{Fabric: &managev1.Fabric{Name: "ib-a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := mc.DeclareNode(ctx, &managev1.DeclareNodeRequest{Node: &managev1.NodeDeclaration{Name: "node01", Declaration: &agentv1.Declaration{
		Fabrics:   []*agentv1.FabricDecl{{Name: "ib-a", Adapters: []string{"mlx5_0"}}},
		Discovery: &agentv1.Discovery{NvidiaSmi: c.NodeDirs["node01"] + "/nvidia-smi", IbRoot: c.NodeDirs["node01"] + "/infiniband"},
	}}}); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, "node01 in fabric ib-a by the control plane's declaration", 30*time.Second, func() (bool, string) {
		n, err := mc.GetNode(ctx, &managev1.GetNodeRequest{Id: "node01"})
		if err != nil {
			return false, err.Error()
		}
		fs := n.GetFabrics()
		return n.GetDeclared() && len(fs) == 1 && fs[0].GetName() == "ib-a" && fs[0].GetInService(), fmt.Sprintf("declared=%v fabrics=%v", n.GetDeclared(), fs)
	})

	var first string
	testcluster.WaitFor(t, "sim-chat ready", 60*time.Second, func() (bool, string) {
		n, why := testcluster.ReadyNode(ctx, mc, "sim-chat")
		first = n
		return n != "", why
	})
	other := map[string]string{"node01": "node02", "node02": "node01"}[first]
	// The drain needs the other node to take the replica: both connected.
	testcluster.WaitNodesReady(t, mc, 2, 30*time.Second)
	if _, err := mc.DrainNode(ctx, &managev1.DrainNodeRequest{Name: first}); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, "the replica moved off "+first, 60*time.Second, func() (bool, string) {
		n, err := mc.GetNode(ctx, &managev1.GetNodeRequest{Id: first})
		if err != nil {
			return false, err.Error()
		}
		on, _ := testcluster.ReadyNode(ctx, mc, "sim-chat")
		return n.GetState() == "draining" && n.GetReplicas() == 0 && on == other, fmt.Sprintf("%s %s with %d replicas; ready on %q", first, n.GetState(), n.GetReplicas(), on)
	})

	if _, err := mc.RemoveNode(ctx, &managev1.RemoveNodeRequest{Name: first, Revoke: true}); err != nil {
		t.Fatal(err)
	}
	agent := c.Nodes[first]
	testcluster.WaitFor(t, "the revoked node refused", 30*time.Second, func() (bool, string) {
		out := agent.Output()
		return strings.Contains(out, "refused by control plane") && strings.Contains(out, "revoked"), testcluster.Tail(out, 3)
	})
	if _, err := mc.GetNode(ctx, &managev1.GetNodeRequest{Id: first}); err == nil {
		t.Fatalf("the revoked node %s is still listed", first)
	}

	// The machine is rebuilt under the same name with a new certificate:
	// certificates issued after the revocation are accepted.
	agent.Stop(t)
	if _, _, err := pki.IssueNode(c.PKIDir, first, c.PKIDir, 0); err != nil {
		t.Fatal(err)
	}
	spec := testcluster.NodeSpec{ID: first}
	if first == "node01" {
		spec.Adapters = []simhw.SimAdapter{active("mlx5_0")}
	}
	c.StartAgent(spec)
	testcluster.WaitFor(t, first+" back with a new certificate", 30*time.Second, func() (bool, string) {
		n, err := mc.GetNode(ctx, &managev1.GetNodeRequest{Id: first})
		if err != nil {
			return false, err.Error()
		}
		return n.GetState() == "ready", n.GetState()
	})
}
