package provider

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	managev1 "github.com/llmgw/llmgw/api/managev1"
)

// TestAccModelPricing: pricing is stored and imported; changing it, and
// removing it, updates the model in place with the same generation and the
// same running replica; so does changing a profile's weight and priority.
func TestAccModelPricing(t *testing.T) {
	c := newAccCluster(t, "", twoNodes()...)
	sameGen := statecheck.CompareValue(compare.ValuesSame())
	pricing := func(prompt, completion string) string {
		return fmt.Sprintf("pricing = { prompt_per_1k = %s, completion_per_1k = %s }", prompt, completion)
	}
	var replica string
	sameReplica := func(*terraform.State) error {
		reps, err := c.ManageClient().ListReplicas(context.Background(), &managev1.ListReplicasRequest{Model: "tf-priced"})
		if err != nil {
			return err
		}
		var ready []string
		for _, r := range reps.GetReplicas() {
			if r.GetState() == "ready" {
				ready = append(ready, r.GetId())
			}
		}
		got := strings.Join(ready, ",")
		if replica == "" {
			replica = got
		}
		if got == "" || got != replica {
			return fmt.Errorf("ready replicas = %q, want %q throughout (pricing, weight and priority must not restart replicas)", got, replica)
		}
		return nil
	}
	price := tfjsonpath.New("pricing")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				Config: c.providerBlock() + modelHCL("tf-priced", `[]`, "", pricing("0.5", "1.5")),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("llmgw_model.m", price.AtMapKey("completion_per_1k"), knownvalue.Float64Exact(1.5)),
					sameGen.AddStateValue("llmgw_model.m", generation),
				},
				Check: sameReplica,
			},
			{
				ResourceName: "llmgw_model.m", ImportState: true, ImportStateId: "tf-priced", ImportStateVerify: true,
				ImportStateVerifyIdentifierAttribute: "name",
				ImportStateVerifyIgnore:              []string{"placement_check", "wait_for_rollout", "rollout_timeout", "status", "rollout_plan"},
			},
			{
				Config: c.providerBlock() + modelHCL("tf-priced", `[]`, "", pricing("0.25", "2")),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("llmgw_model.m", plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue("llmgw_model.m", generation, knownvalue.NotNull()),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("llmgw_model.m", price.AtMapKey("prompt_per_1k"), knownvalue.Float64Exact(0.25)),
					sameGen.AddStateValue("llmgw_model.m", generation),
				},
				Check: sameReplica,
			},
			{
				Config: c.providerBlock() + modelHCL("tf-priced", `[]`, "", ""),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("llmgw_model.m", price, knownvalue.Null()),
					sameGen.AddStateValue("llmgw_model.m", generation),
				},
				Check: sameReplica,
			},
			{Config: c.providerBlock() + modelHCL("tf-priced", `[]`, "", ""), PlanOnly: true},
			{
				// A profile's routing weight and priority are not what the
				// replica is built from: the plan keeps the generation (no
				// replica restarts) and the same replica keeps serving.
				Config: c.providerBlock() + modelHCL("tf-priced", `[]`, "weight = 3\n    priority = 50", ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("llmgw_model.m", plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue("llmgw_model.m", generation, knownvalue.NotNull()),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("llmgw_model.m", tfjsonpath.New("profiles").AtSliceIndex(0).AtMapKey("weight"), knownvalue.Int64Exact(3)),
					sameGen.AddStateValue("llmgw_model.m", generation),
				},
				Check: sameReplica,
			},
		},
	})
}
