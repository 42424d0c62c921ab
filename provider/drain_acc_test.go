package provider

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

// TestAccNodeDestroyCannotDrain is issue 18's undestroyable quickstart on
// one node: the only node holds sim-chat's replica, which no other node can
// take. Destroy fails at once (not after ready_timeout) naming the replica
// and why, and stops nothing; with drain_on_destroy = false the destroy
// completes and the replica stops with the node.
func TestAccNodeDestroyCannotDrain(t *testing.T) {
	c := newAccCluster(t, `  - name: sim-chat
    source: sim://chat
    scaling: { min: 1, max: 1 }
    profiles:
      - { name: h100, engine: sim, gpu_class: h100-80g, tp: 1, startup_timeout: 1m }
`, testcluster.NodeSpec{ID: "node03", GPUs: 1})
	ctx := context.Background()
	readyOn := func() string {
		rs, err := c.ManageClient().ListReplicas(ctx, &managev1.ListReplicasRequest{Model: "sim-chat"})
		if err != nil {
			return ""
		}
		for _, r := range rs.GetReplicas() {
			if r.GetState() == "ready" {
				return r.GetShards()[0].GetNode()
			}
		}
		return ""
	}
	var destroyStarted time.Time
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				PreConfig: func() { c.waitNode(t, "node03") },
				// ready_timeout is 90s: a destroy that waited for it would
				// fail the time check below.
				Config: c.providerBlock() + c.nodeHCL("n", "node03", ""),
				Check: func(*terraform.State) error {
					testcluster.WaitFor(t, "sim-chat ready on node03", 60*time.Second, func() (bool, string) {
						on := readyOn()
						return on == "node03", "ready on " + on
					})
					destroyStarted = time.Now()
					return nil
				},
			},
			{
				Config:      c.providerBlock(),
				ExpectError: regexp.MustCompile(`(?s)Node node03 cannot be drained.*replica r-\w+ of model sim-chat\s+\(on node03\)\s+cannot\s+move:.*no node can hold profile h100.*node03: not ready: draining.*drain_on_destroy = false`),
			},
			{
				PreConfig: func() {
					if took := time.Since(destroyStarted); took > 30*time.Second {
						t.Errorf("the destroy that cannot drain took %s (with its plan and refresh), want it to fail at once", took)
					}
					n, err := c.ManageClient().GetNode(ctx, &managev1.GetNodeRequest{Id: "node03"})
					if err != nil || n.GetDraining() {
						t.Errorf("after the refused destroy node03 = %v, %v; want it serving, not draining", n, err)
					}
					if on := readyOn(); on != "node03" {
						t.Errorf("after the refused destroy sim-chat is ready on %q, want node03 (nothing stopped)", on)
					}
				},
				Config: c.providerBlock() + c.nodeHCL("n", "node03", `drain_on_destroy = false`),
			},
			{
				Config: c.providerBlock(),
				Check: func(*terraform.State) error {
					if on := readyOn(); on != "" {
						return fmt.Errorf("after destroying node03 without a drain sim-chat is ready on %q, want nowhere", on)
					}
					return nil
				},
			},
		},
	})
}

// TestAccNodeDestroyWithItsModel: destroying a configuration that holds a
// node and the model whose only replica runs on it succeeds with the
// default drain: the model (which depends on the node) goes first, and a
// replica of a model leaving the catalog is not moved, so the drain has
// nothing to wait for.
func TestAccNodeDestroyWithItsModel(t *testing.T) {
	c := newAccCluster(t, "", testcluster.NodeSpec{ID: "node05", GPUs: 1})
	model := `resource "llmgw_model" "m" {
  name     = "tf-alone"
  source   = "sim://alone"
  scaling  = { min = 1 }
  profiles = [{ name = "h100", engine = "sim", gpu_class = "h100-80g", tp = 1, startup_timeout = "1m" }]
  depends_on = [llmgw_node.n]
}
`
	var start time.Time
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				PreConfig: func() { c.waitNode(t, "node05") },
				Config:    c.providerBlock() + c.nodeHCL("n", "node05", "") + model,
				Check:     func(*terraform.State) error { start = time.Now(); return nil },
			},
			{
				Config: c.providerBlock(),
				Check: func(*terraform.State) error {
					if took := time.Since(start); took > 45*time.Second {
						return fmt.Errorf("destroying the node with its model took %s", took)
					}
					return nil
				},
			},
		},
	})
}
