package provider

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/testkit/testcluster"
	"github.com/llmgw/llmgw/testkit/tfacc"
)

// declaredModel is in the acceptance clusters' server.yaml.
const declaredModel = `  - name: from-config
    source: sim://config
    scaling: { min: 0, max: 1 }
    profiles:
      - { name: cpu, engine: sim }
`

func twoNodes() []testcluster.NodeSpec {
	return []testcluster.NodeSpec{{ID: "node01", GPUs: 2}, {ID: "node02", GPUs: 2}}
}

// modelHCL is an llmgw_model named name with one sim profile on H100s; extra
// goes into the resource block, profileExtra into the profile.
func modelHCL(name, aliases, profileExtra, extra string) string {
	return fmt.Sprintf(`resource "llmgw_model" "m" {
  name    = %q
  aliases = %s
  source  = "sim://%s"
  scaling = { min = 1 }
  profiles = [{
    name            = "h100"
    engine          = "sim"
    gpu_class       = "h100-80g"
    tp              = 1
    startup_timeout = "1m"
    %s
  }]
  rollout_timeout = "90s"
  %s
}
`, name, aliases, name, profileExtra, extra)
}

var (
	statusState = tfjsonpath.New("status").AtMapKey("state")
	generation  = tfjsonpath.New("generation")
)

// TestAccModel walks create (waiting for the rollout) → import with verify →
// an alias change (same generation) → an args change (new generation, rolled)
// → an empty plan.
func TestAccModel(t *testing.T) {
	c := newAccCluster(t, declaredModel, twoNodes()...)
	sameGen := statecheck.CompareValue(compare.ValuesSame())
	newGen := statecheck.CompareValue(compare.ValuesDiffer())
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				Config: c.providerBlock() + modelHCL("tf-chat", `["chat"]`, `args = ["--decode-tps=1000"]`, ""),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("llmgw_model.m", statusState, knownvalue.StringExact("serving")),
					statecheck.ExpectKnownValue("llmgw_model.m", tfjsonpath.New("origin"), knownvalue.StringExact("api")),
					statecheck.ExpectKnownValue("llmgw_model.m", tfjsonpath.New("scaling").AtMapKey("max"), knownvalue.Int64Exact(1)),
					statecheck.ExpectKnownValue("llmgw_model.m", tfjsonpath.New("profiles").AtSliceIndex(0).AtMapKey("nodes"), knownvalue.Int64Exact(1)),
					sameGen.AddStateValue("llmgw_model.m", generation),
				},
			},
			{
				ResourceName:                         "llmgw_model.m",
				ImportState:                          true,
				ImportStateId:                        "tf-chat",
				ImportStateVerify:                    true,
				ImportStateVerifyIdentifierAttribute: "name",
				ImportStateVerifyIgnore:              []string{"placement_check", "wait_for_rollout", "rollout_timeout", "status", "rollout_plan"},
			},
			{
				Config: c.providerBlock() + modelHCL("tf-chat", `["chat", "talk"]`, `args = ["--decode-tps=1000"]`, ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("llmgw_model.m", plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue("llmgw_model.m", generation, knownvalue.NotNull()),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					sameGen.AddStateValue("llmgw_model.m", generation),
					newGen.AddStateValue("llmgw_model.m", generation),
					statecheck.ExpectKnownValue("llmgw_model.m", tfjsonpath.New("aliases"), knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact("chat"), knownvalue.StringExact("talk")})),
				},
			},
			{
				Config: c.providerBlock() + modelHCL("tf-chat", `["chat", "talk"]`, `args = ["--decode-tps=2000"]`, ""),
				ConfigStateChecks: []statecheck.StateCheck{
					newGen.AddStateValue("llmgw_model.m", generation),
					statecheck.ExpectKnownValue("llmgw_model.m", statusState, knownvalue.StringExact("serving")),
					expectReadyReplicaOfGeneration(c),
				},
			},
			{
				Config:             c.providerBlock() + modelHCL("tf-chat", `["chat", "talk"]`, `args = ["--decode-tps=2000"]`, ""),
				PlanOnly:           true,
				ExpectNonEmptyPlan: false,
			},
		},
	})
}

// expectReadyReplicaOfGeneration checks through the management API that a
// replica built from the stored generation (not stale) is ready when apply
// returns.
func expectReadyReplicaOfGeneration(c accCluster) statecheck.StateCheck {
	return stateCheckFunc(func(ctx context.Context, gen string) error {
		reps, err := c.ManageClient().ListReplicas(ctx, &managev1.ListReplicasRequest{Model: "tf-chat"})
		if err != nil {
			return err
		}
		for _, r := range reps.GetReplicas() {
			if !r.GetStale() && r.GetState() == "ready" {
				return nil
			}
		}
		return fmt.Errorf("no ready replica of generation %s when apply returned: %v", gen, reps.GetReplicas())
	})
}

// TestAccModelPlacementCheck: "error" fails the plan with the nodes'
// reasons; "warn" applies (without waiting) and the model is stored.
func TestAccModelPlacementCheck(t *testing.T) {
	c := newAccCluster(t, declaredModel, twoNodes()...)
	impossible := func(check string) string {
		return c.providerBlock() + fmt.Sprintf(`resource "llmgw_model" "m" {
  name            = "tf-a100"
  scaling         = { min = 1 }
  profiles        = [{ name = "a100", engine = "sim", gpu_class = "a100-40g", tp = 1 }]
  placement_check = %q
  wait_for_rollout = false
}
`, check)
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				Config:      impossible("error"),
				ExpectError: regexp.MustCompile(`(?s)No node can hold model tf-a100.*node01.*wrong GPU class`),
			},
			{
				Config: impossible("warn"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("llmgw_model.m", tfjsonpath.New("origin"), knownvalue.StringExact("api")),
				},
			},
		},
	})
}

// TestAccModelDrift: a change made with the management API behind
// Terraform's back shows in the next plan, and apply puts it back.
func TestAccModelDrift(t *testing.T) {
	c := newAccCluster(t, declaredModel, twoNodes()...)
	cfg := c.providerBlock() + modelHCL("tf-drift", `["drift"]`, "", "")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{Config: cfg},
			{
				PreConfig: func() {
					mc := c.ManageClient()
					m, err := mc.GetModel(context.Background(), &managev1.GetModelRequest{Name: "tf-drift"})
					if err != nil {
						t.Fatal(err)
					}
					m.Aliases = []string{"drifted"}
					m.ContextLength = 2048
					if _, err := mc.UpdateModel(context.Background(), &managev1.UpdateModelRequest{Model: m}); err != nil {
						t.Fatal(err)
					}
				},
				Config:             cfg,
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
			},
			{
				Config: cfg,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("llmgw_model.m", tfjsonpath.New("aliases"), knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact("drift")})),
					statecheck.ExpectKnownValue("llmgw_model.m", tfjsonpath.New("context_length"), knownvalue.Int64Exact(0)),
				},
			},
		},
	})
}

// TestAccModelRolloutFails: a profile whose engine no node has fails apply
// with the control plane's reason.
func TestAccModelRolloutFails(t *testing.T) {
	c := newAccCluster(t, declaredModel, twoNodes()...)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{{
			Config: c.providerBlock() + `resource "llmgw_model" "m" {
  name            = "tf-llama"
  source          = "/models/llama.gguf"
  scaling         = { min = 1 }
  profiles        = [{ name = "cpu", engine = "llamacpp" }]
  rollout_timeout = "60s"
}
`,
			ExpectError: regexp.MustCompile(`(?s)Rollout of model tf-llama.*engine llamacpp not available`),
		}},
	})
}

// TestAccModelFetchFails: a model whose weights cannot be fetched fails
// apply with the shard's reason: the source and what its server answered.
func TestAccModelFetchFails(t *testing.T) {
	// The control plane's source check (a HEAD) finds the file; the node's
	// fetch (a GET) does not, as when it goes away between plan and apply.
	mirror := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			return
		}
		http.NotFound(w, r)
	}))
	defer mirror.Close()
	c := newAccCluster(t, declaredModel, twoNodes()...)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{{
			Config: c.providerBlock() + fmt.Sprintf(`resource "llmgw_model" "m" {
  name            = "tf-fetch"
  source          = "%s/m/v/missing.gguf"
  scaling         = { min = 1 }
  profiles        = [{ name = "h100", engine = "sim", gpu_class = "h100-80g", tp = 1 }]
  rollout_timeout = "60s"
}
`, mirror.URL),
			ExpectError: regexp.MustCompile(`(?s)Rollout of model tf-fetch.*missing\.gguf.*404\s+Not\s+Found.*Fix\s+the\s+model's\s+source`),
		}},
	})
}

// TestAccModelSourceMissing: the plan of a model whose source answers 404
// fails, naming the source and the answer, before anything is created.
func TestAccModelSourceMissing(t *testing.T) {
	mirror := httptest.NewServer(http.NotFoundHandler())
	defer mirror.Close()
	c := newAccCluster(t, declaredModel, twoNodes()...)
	hcl := func(source string) string {
		return c.providerBlock() + fmt.Sprintf(`resource "llmgw_model" "m" {
  name             = "tf-typo"
  source           = %q
  scaling          = { min = 0, max = 1 }
  profiles         = [{ name = "h100", engine = "sim", gpu_class = "h100-80g", tp = 1 }]
  wait_for_rollout = false
}
`, source)
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{{
			Config:      hcl(mirror.URL + "/m/v/typo.gguf"),
			PlanOnly:    true,
			ExpectError: regexp.MustCompile(`(?s)planning placement of model tf-typo.*typo\.gguf.*HEAD.*404\s+Not\s+Found`),
		}},
	})
	if _, err := c.ManageClient().GetModel(context.Background(), &managev1.GetModelRequest{Name: "tf-typo"}); err == nil {
		t.Fatal("the refused model is in the catalog")
	}
}

// TestAccModelDeclaredInServerYAML: a model of server.yaml cannot be created.
func TestAccModelDeclaredInServerYAML(t *testing.T) {
	c := newAccCluster(t, declaredModel)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{{
			Config: c.providerBlock() + `resource "llmgw_model" "m" {
  name     = "from-config"
  profiles = [{ name = "cpu", engine = "sim" }]
}
`,
			ExpectError: regexp.MustCompile(`(?s)declared in the control plane's server.yaml.*manage it in\s+server.yaml, or remove it there first`),
		}},
	})
}

// TestAccModelEngineCannotStart: the engine is installed but cannot start
// (a missing shared library, as a llama-server without libgomp1 does).
// When its engine check shows it, the model does not place and apply fails
// with the check's reason; when the engine passes its check and fails only
// once launched, apply fails with the shard's error and the engine's own
// last output.
func TestAccModelEngineCannotStart(t *testing.T) {
	tfacc.Require(t)
	const loader = "echo 'llama-server: error while loading shared libraries: libgomp.so.1: cannot open shared object file: No such file or directory' >&2\nexit 127\n"
	tests := []struct {
		name   string
		script string
		want   string
	}{
		{"caught by the engine check", loader,
			`(?s)Rollout of model tf-llama.*unplaced.*node01: engine check failed:\s+llama-server cannot start: libgomp\.so\.1: cannot open shared object file`},
		{"fails once launched", "[ \"$1\" = --version ] && { echo 'version: 1 (test)'; exit 0; }\n" + loader,
			`(?s)Rollout of model tf-llama.*exit status 127.*libgomp\.so\.1: cannot open shared object file`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			server := filepath.Join(t.TempDir(), "llama-server")
			if err := os.WriteFile(server, []byte("#!/bin/sh\n"+tt.script), 0o755); err != nil {
				t.Fatal(err)
			}
			// Weights that exist on the node, so that what fails is the
			// engine, not the agent's check of a local source.
			weights := filepath.Join(t.TempDir(), "llama.gguf")
			if err := os.WriteFile(weights, []byte("GGUF"), 0o644); err != nil {
				t.Fatal(err)
			}
			c := newAccCluster(t, declaredModel, testcluster.NodeSpec{ID: "node01", GPUs: 1, Engines: map[string]string{"llamacpp": server}})
			resource.Test(t, resource.TestCase{
				ProtoV6ProviderFactories: factories,
				Steps: []resource.TestStep{{
					Config: c.providerBlock() + `resource "llmgw_model" "m" {
  name            = "tf-llama"
  source          = "` + weights + `"
  scaling         = { min = 1 }
  profiles        = [{ name = "cpu", engine = "llamacpp", startup_timeout = "30s" }]
  rollout_timeout = "60s"
}
`,
					ExpectError: regexp.MustCompile(tt.want),
				}},
			})
		})
	}
}
