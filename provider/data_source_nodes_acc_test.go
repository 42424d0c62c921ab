package provider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/llmgw/llmgw/sim/simhw"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

// TestAccNodesDataSource lists two agents: one with a fabric in service, one
// whose declared adapter is missing.
func TestAccNodesDataSource(t *testing.T) {
	active := simhw.SimAdapter{Name: "mlx5_0", Ports: []simhw.SimPort{{State: "ACTIVE", RateGbps: 200}}}
	c := newAccCluster(t, "",
		testcluster.NodeSpec{ID: "node01", GPUs: 2, Fabrics: "fabrics: [{name: ib-a, adapters: [mlx5_0]}]", Adapters: []simhw.SimAdapter{active}},
		testcluster.NodeSpec{ID: "node02", GPUs: 4, Fabrics: "fabrics: [{name: ib-b, adapters: [mlx5_1]}]"},
	)
	waitNodes(t, c, 2)
	node := func(i int) tfjsonpath.Path { return tfjsonpath.New("nodes").AtSliceIndex(i) }
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{{
			Config: c.providerBlock() + `data "llmgw_nodes" "all" {}`,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("data.llmgw_nodes.all", tfjsonpath.New("nodes"), knownvalue.ListSizeExact(2)),
				statecheck.ExpectKnownValue("data.llmgw_nodes.all", node(0).AtMapKey("id"), knownvalue.StringExact("node01")),
				statecheck.ExpectKnownValue("data.llmgw_nodes.all", node(0).AtMapKey("state"), knownvalue.StringExact("ready")),
				statecheck.ExpectKnownValue("data.llmgw_nodes.all", node(0).AtMapKey("gpus"), knownvalue.Int64Exact(2)),
				// Both agents run on their own declaration files.
				statecheck.ExpectKnownValue("data.llmgw_nodes.all", node(0).AtMapKey("declared"), knownvalue.Bool(false)),
				statecheck.ExpectKnownValue("data.llmgw_nodes.all", node(1).AtMapKey("declared"), knownvalue.Bool(false)),
				statecheck.ExpectKnownValue("data.llmgw_nodes.all", node(0).AtMapKey("gpu_classes"), knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact("h100-80g")})),
				statecheck.ExpectKnownValue("data.llmgw_nodes.all", node(0).AtMapKey("fabrics").AtSliceIndex(0).AtMapKey("in_service"), knownvalue.Bool(true)),
				statecheck.ExpectKnownValue("data.llmgw_nodes.all", node(0).AtMapKey("fabrics").AtSliceIndex(0).AtMapKey("rate_gbps"), knownvalue.Float64Exact(200)),
				statecheck.ExpectKnownValue("data.llmgw_nodes.all", node(1).AtMapKey("gpus"), knownvalue.Int64Exact(4)),
				statecheck.ExpectKnownValue("data.llmgw_nodes.all", node(1).AtMapKey("fabrics").AtSliceIndex(0).AtMapKey("in_service"), knownvalue.Bool(false)),
				statecheck.ExpectKnownValue("data.llmgw_nodes.all", node(1).AtMapKey("last_seen"), knownvalue.StringRegexp(regexpMust(`^\d{4}-\d\d-\d\dT`))),
			},
		}},
	})
}
