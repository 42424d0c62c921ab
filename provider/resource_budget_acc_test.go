package provider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

func budgetHCL(period, body string) string {
	return fmt.Sprintf(`resource "llmgw_project" "p" {
  name = "team-b"
}

resource "llmgw_budget" "b" {
  project = llmgw_project.p.name
  period  = %q
%s}
`, period, body)
}

// aliasedModel is a catalog model known by an alias too.
const aliasedModel = `  - name: cheap
    aliases: [cheap-alias]
    source: sim://cheap
    scaling: { min: 0, max: 1 }
    profiles:
      - { name: cpu, engine: sim }
`

// TestAccBudget walks create → import by PROJECT/PERIOD with verify → a
// switch to fallback in place → an empty plan → a period change that
// replaces it, a fallback allowance and a fallback named by an alias
// (stored by the model's own name, no difference in the next plan), and
// checks at plan time that fallback_model goes with
// on_exhausted = "fallback" and that the control plane refuses a fallback
// model that is not in the catalog.
func TestAccBudget(t *testing.T) {
	c := newAccCluster(t, declaredModel+aliasedModel)
	p := c.providerBlock()
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				Config: p + budgetHCL("day", "  amount = 10\n"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("llmgw_budget.b", tfjsonpath.New("id"), knownvalue.StringExact("team-b/day")),
					statecheck.ExpectKnownValue("llmgw_budget.b", tfjsonpath.New("on_exhausted"), knownvalue.StringExact("refuse")),
					statecheck.ExpectKnownValue("llmgw_budget.b", tfjsonpath.New("fallback_model"), knownvalue.Null()),
				},
			},
			{
				ResourceName: "llmgw_budget.b", ImportState: true, ImportStateId: "team-b/day", ImportStateVerify: true,
			},
			{
				Config: p + budgetHCL("day", "  amount = 12.5\n  on_exhausted = \"fallback\"\n  fallback_model = \"from-config\"\n"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("llmgw_budget.b", plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("llmgw_budget.b", tfjsonpath.New("amount"), knownvalue.Float64Exact(12.5)),
					statecheck.ExpectKnownValue("llmgw_budget.b", tfjsonpath.New("fallback_model"), knownvalue.StringExact("from-config")),
				},
			},
			{
				Config:   p + budgetHCL("day", "  amount = 12.5\n  on_exhausted = \"fallback\"\n  fallback_model = \"from-config\"\n"),
				PlanOnly: true,
			},
			{
				Config: p + budgetHCL("day", "  amount = 12.5\n  on_exhausted = \"fallback\"\n  fallback_model = \"cheap-alias\"\n  fallback_allowance = 2.5\n"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("llmgw_budget.b", tfjsonpath.New("fallback_model"), knownvalue.StringExact("cheap-alias")),
					statecheck.ExpectKnownValue("llmgw_budget.b", tfjsonpath.New("fallback_allowance"), knownvalue.Float64Exact(2.5)),
				},
				Check: func(*terraform.State) error {
					b, err := c.ManageClient().GetBudget(context.Background(), &managev1.GetBudgetRequest{Project: "team-b", Period: "day"})
					if err != nil {
						return fmt.Errorf("reading budget team-b/day: %w", err)
					}
					if b.GetFallbackModel() != "cheap" || b.GetFallbackAllowance() != 2.5 {
						return fmt.Errorf("stored budget = %v; want fallback cheap (the alias resolved) and allowance 2.5", b)
					}
					return nil
				},
			},
			{
				Config:   p + budgetHCL("day", "  amount = 12.5\n  on_exhausted = \"fallback\"\n  fallback_model = \"cheap-alias\"\n  fallback_allowance = 2.5\n"),
				PlanOnly: true,
			},
			{
				Config:      p + budgetHCL("day", "  amount = 1\n  fallback_allowance = 1\n"),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`fallback_allowance needs on_exhausted = "fallback"`),
			},
			{
				Config:      p + budgetHCL("day", "  amount = 1\n  on_exhausted = \"fallback\"\n"),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`fallback_model is required`),
			},
			// Terraform has no NaN; an infinity (1/0, 1e999) is refused by the
			// framework's float conversion before the provider reads it.
			{
				Config:      p + budgetHCL("day", "  amount = 1e999\n"),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)amount.*cannot be represented as a 64-bit`),
			},
			{
				Config:      p + budgetHCL("week", "  amount = 1\n"),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`value must be one of`),
			},
			{
				Config:      p + budgetHCL("day", "  amount = 1\n  on_exhausted = \"fallback\"\n  fallback_model = \"no-such-model\"\n"),
				ExpectError: regexp.MustCompile(`fallback_model: model\s+"no-such-model"\s+is\s+not\s+in\s+the\s+catalog`),
			},
			{
				Config: p + budgetHCL("month", "  amount = 300\n"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("llmgw_budget.b", plancheck.ResourceActionReplace),
				}},
				Check: func(*terraform.State) error {
					list, err := c.ManageClient().ListBudgets(context.Background(), &managev1.ListBudgetsRequest{Project: "team-b"})
					if err != nil {
						return fmt.Errorf("listing budgets of team-b: %w", err)
					}
					if len(list.GetBudgets()) != 1 || list.GetBudgets()[0].GetPeriod() != "month" {
						return fmt.Errorf("budgets of team-b = %v; want only the month one", list.GetBudgets())
					}
					return nil
				},
			},
		},
	})
}

// TestAccBudgetWarning applies a budget with the real terraform CLI in a
// cluster where no model has a price and auth.default_price is unset: apply
// succeeds and prints the control plane's warning that the budget never
// binds.
func TestAccBudgetWarning(t *testing.T) {
	c := newAccCluster(t, declaredModel)
	tf := testcluster.NewTerraform(t, c.Cluster)
	main := "terraform {\n  required_providers {\n    llmgw = { source = \"llmgw/llmgw\" }\n  }\n}\n\nprovider \"llmgw\" {}\n\n" + budgetHCL("month", "  amount = 100\n")
	if err := os.WriteFile(filepath.Join(tf.Dir, "main.tf"), []byte(main), 0o600); err != nil {
		t.Fatal(err)
	}
	tf.Run(0, "init", "-input=false")
	out, _ := tf.Run(0, "apply", "-auto-approve", "-input=false", "-no-color")
	// Terraform wraps diagnostics; compare with the line breaks folded.
	flat := strings.Join(strings.Fields(out), " ")
	if !strings.Contains(flat, "Warning: llmgw: budget team-b/month") || !strings.Contains(flat, "this budget never binds") {
		t.Fatalf("apply did not warn that the budget never binds:\n%s", testcluster.Tail(out, 40))
	}
	tf.Run(0, "destroy", "-auto-approve", "-input=false")
}
