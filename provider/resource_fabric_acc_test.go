package provider

import (
	"context"
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	managev1 "github.com/llmgw/llmgw/api/managev1"
)

func fabricHCL(name, description string) string {
	return fmt.Sprintf(`resource "llmgw_fabric" "f" {
  name        = %q
  description = %q
}
`, name, description)
}

// TestAccFabric walks create → import with verify → a description change →
// an empty plan, then shows destroy refused while a declared node is in the
// fabric (the error names the node), and destroy once it is not.
func TestAccFabric(t *testing.T) {
	c := newAccCluster(t, "")
	declare := func() {
		_, err := c.ManageClient().DeclareNode(context.Background(), &managev1.DeclareNodeRequest{Node: &managev1.NodeDeclaration{
			Name:        "gpu-a1",
			Declaration: &agentv1.Declaration{Fabrics: []*agentv1.FabricDecl{{Name: "ib-a", Adapters: []string{"mlx5_0"}}}},
		}})
		if err != nil {
			t.Fatalf("declaring node gpu-a1 in fabric ib-a: %v", err)
		}
	}
	undeclare := func() {
		if _, err := c.ManageClient().RemoveNode(context.Background(), &managev1.RemoveNodeRequest{Name: "gpu-a1"}); err != nil {
			t.Fatalf("removing node gpu-a1: %v", err)
		}
	}
	nodes := tfjsonpath.New("nodes")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				Config: c.providerBlock() + fabricHCL("ib-a", "rack A"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("llmgw_fabric.f", tfjsonpath.New("description"), knownvalue.StringExact("rack A")),
					statecheck.ExpectKnownValue("llmgw_fabric.f", nodes, knownvalue.ListSizeExact(0)),
				},
			},
			{
				ResourceName:                         "llmgw_fabric.f",
				ImportState:                          true,
				ImportStateId:                        "ib-a",
				ImportStateVerify:                    true,
				ImportStateVerifyIdentifierAttribute: "name",
			},
			{
				Config: c.providerBlock() + fabricHCL("ib-a", "rack A, HDR"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("llmgw_fabric.f", plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("llmgw_fabric.f", tfjsonpath.New("description"), knownvalue.StringExact("rack A, HDR")),
				},
			},
			{
				Config:             c.providerBlock() + fabricHCL("ib-a", "rack A, HDR"),
				PlanOnly:           true,
				ExpectNonEmptyPlan: false,
			},
			{
				// A declared node now uses the fabric: refresh shows it, and
				// destroy is refused with the node named.
				PreConfig: declare,
				Config:    c.providerBlock() + fabricHCL("ib-a", "rack A, HDR"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("llmgw_fabric.f", nodes, knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact("gpu-a1")})),
				},
			},
			{
				Config:      c.providerBlock() + fabricHCL("ib-a", "rack A, HDR"),
				Destroy:     true,
				ExpectError: regexp.MustCompile(`(?s)still used by nodes.*gpu-a1`),
			},
			{
				PreConfig: undeclare,
				Config:    c.providerBlock() + fabricHCL("ib-a", "rack A, HDR"),
			},
		},
	})
}
