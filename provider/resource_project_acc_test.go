package provider

import (
	"context"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	managev1 "github.com/llmgw/llmgw/api/managev1"
)

// TestAccProject walks create → import with verify → a limits and models
// change in place → an empty plan → destroy (checked gone), after refusing the
// reserved name "default" at plan time.
func TestAccProject(t *testing.T) {
	c := newAccCluster(t, declaredModel)
	cfg := func(body string) string {
		return c.providerBlock() + "resource \"llmgw_project\" \"p\" {\n  name = \"team-a\"\n" + body + "}\n"
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy: func(*terraform.State) error {
			_, err := c.ManageClient().GetProject(context.Background(), &managev1.GetProjectRequest{Name: "team-a"})
			if !IsNotFound(err) {
				t.Errorf("project team-a after destroy: %v, want NotFound", err)
			}
			return nil
		},
		Steps: []resource.TestStep{
			{
				Config:      c.providerBlock() + "resource \"llmgw_project\" \"d\" {\n  name = \"default\"\n}\n",
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`value must be none of`),
			},
			{
				Config: cfg("  rpm = 60\n"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("llmgw_project.p", tfjsonpath.New("rpm"), knownvalue.Int64Exact(60)),
					statecheck.ExpectKnownValue("llmgw_project.p", tfjsonpath.New("tpm"), knownvalue.Int64Exact(0)),
					statecheck.ExpectKnownValue("llmgw_project.p", tfjsonpath.New("allowed_models"), knownvalue.SetSizeExact(0)),
					statecheck.ExpectKnownValue("llmgw_project.p", tfjsonpath.New("threads_retain_hours"), knownvalue.Int64Exact(0)),
				},
			},
			{
				ResourceName: "llmgw_project.p", ImportState: true, ImportStateId: "team-a",
				ImportStateVerify: true, ImportStateVerifyIdentifierAttribute: "name",
			},
			{
				Config: cfg("  rpm = 120\n  tpm = 50000\n  allowed_models = [\"from-config\"]\n  threads_retain_hours = 24\n  memory_retain_hours = 720\n"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("llmgw_project.p", plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("llmgw_project.p", tfjsonpath.New("tpm"), knownvalue.Int64Exact(50000)),
					statecheck.ExpectKnownValue("llmgw_project.p", tfjsonpath.New("allowed_models"),
						knownvalue.SetExact([]knownvalue.Check{knownvalue.StringExact("from-config")})),
					statecheck.ExpectKnownValue("llmgw_project.p", tfjsonpath.New("threads_retain_hours"), knownvalue.Int64Exact(24)),
					statecheck.ExpectKnownValue("llmgw_project.p", tfjsonpath.New("memory_retain_hours"), knownvalue.Int64Exact(720)),
				},
				Check: func(*terraform.State) error {
					p, err := c.ManageClient().GetProject(context.Background(), &managev1.GetProjectRequest{Name: "team-a"})
					if err != nil || p.GetThreadsRetainHours() != 24 || p.GetMemoryRetainHours() != 720 {
						t.Errorf("project on the control plane: %v, %v; want threads 24h, memory 720h", p, err)
					}
					return nil
				},
			},
			{
				Config:   cfg("  rpm = 120\n  tpm = 50000\n  allowed_models = [\"from-config\"]\n  threads_retain_hours = 24\n  memory_retain_hours = 720\n"),
				PlanOnly: true,
			},
		},
	})
}
