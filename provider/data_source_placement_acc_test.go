package provider

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

func regexpMust(re string) *regexp.Regexp { return regexp.MustCompile(re) }

// waitNodes waits until n nodes are ready.
func waitNodes(t *testing.T, c accCluster, n int) {
	t.Helper()
	mc := c.ManageClient()
	testcluster.WaitFor(t, fmt.Sprintf("%d nodes ready", n), 30*time.Second, func() (bool, string) {
		resp, err := mc.ListNodes(context.Background(), &managev1.ListNodesRequest{})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, nd := range resp.GetNodes() {
			if nd.GetState() == "ready" {
				ready++
			}
		}
		return ready == n, fmt.Sprintf("%d ready", ready)
	})
}

// TestAccPlacementDataSource explains the server.yaml model: its GPU
// profile fits no node (wrong class), its CPU profile places.
func TestAccPlacementDataSource(t *testing.T) {
	c := newAccCluster(t, `  - name: explained
    scaling: { min: 0, max: 1 }
    profiles:
      - { name: a100, engine: sim, gpu_class: a100-40g, tp: 1, priority: 10 }
      - { name: h100, engine: sim, gpu_class: h100-80g, tp: 1 }
`, twoNodes()...)
	waitNodes(t, c, 2)
	prof := func(i int) tfjsonpath.Path { return tfjsonpath.New("profiles").AtSliceIndex(i) }
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				Config: c.providerBlock() + `data "llmgw_placement" "p" { model = "explained" }`,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.llmgw_placement.p", tfjsonpath.New("placed"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue("data.llmgw_placement.p", tfjsonpath.New("profile"), knownvalue.StringExact("h100")),
					statecheck.ExpectKnownValue("data.llmgw_placement.p", tfjsonpath.New("text"), knownvalue.StringRegexp(regexpMust(`wrong GPU class`))),
					statecheck.ExpectKnownValue("data.llmgw_placement.p", prof(0).AtMapKey("profile"), knownvalue.StringExact("a100")),
					statecheck.ExpectKnownValue("data.llmgw_placement.p", prof(0).AtMapKey("placed"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue("data.llmgw_placement.p", prof(0).AtMapKey("nodes"), knownvalue.ListSizeExact(2)),
					statecheck.ExpectKnownValue("data.llmgw_placement.p", prof(0).AtMapKey("nodes").AtSliceIndex(0).AtMapKey("feasible"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue("data.llmgw_placement.p", prof(0).AtMapKey("nodes").AtSliceIndex(0).AtMapKey("reason"), knownvalue.StringRegexp(regexpMust(`wrong GPU class`))),
				},
			},
			{
				Config:      c.providerBlock() + `data "llmgw_placement" "p" { model = "no-such-model" }`,
				ExpectError: regexp.MustCompile(`(?s)Not found.*no-such-model`),
			},
		},
	})
}
