package provider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/sim/simhw"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

func activeAdapter(name string) simhw.SimAdapter {
	return simhw.SimAdapter{Name: name, Ports: []simhw.SimPort{{State: "ACTIVE", RateGbps: 200}}}
}

// nodeHCL declares node id of the cluster with its simulated hardware paths;
// extra goes into the resource block.
func (c accCluster) nodeHCL(res, id, extra string) string {
	nd := filepath.Join(c.Dir, "nodes", id)
	return fmt.Sprintf(`resource "llmgw_node" %q {
  name      = %q
  discovery = { nvidia_smi = %q, ib_root = %q }
  ready_timeout = "90s"
  %s
}
`, res, id, filepath.Join(nd, "nvidia-smi"), filepath.Join(nd, "infiniband"), extra)
}

const fabricIBA = `resource "llmgw_fabric" "f" {
  name = "ib-a"
}
`

// waitNode waits until the control plane reports node id ready.
func (c accCluster) waitNode(t *testing.T, id string) {
	testcluster.WaitFor(t, id+" ready", 60*time.Second, func() (bool, string) {
		n, err := c.ManageClient().GetNode(context.Background(), &managev1.GetNodeRequest{Id: id})
		if err != nil {
			return false, err.Error()
		}
		return n.GetState() == "ready", n.GetState() + " " + n.GetReason()
	})
}

// TestAccNodeImport adopts an agent running on its local declaration:
// import reads it (declared = false), the next apply declares it, a label
// change is applied, and the plan is then empty.
func TestAccNodeImport(t *testing.T) {
	c := newAccCluster(t, "", testcluster.NodeSpec{ID: "node01", GPUs: 2, Adapters: []simhw.SimAdapter{activeAdapter("mlx5_0")},
		Fabrics: "fabrics:\n  - name: ib-a\n    adapters: [mlx5_0]\nlabels:\n  rack: a\n"})
	addr := "llmgw_node.n"
	fabric := `fabric = { name = llmgw_fabric.f.name, adapters = ["mlx5_0"] }`
	withLabels := func(labels string) string {
		return c.providerBlock() + fabricIBA + c.nodeHCL("n", "node01", fabric+"\n  labels = "+labels)
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				PreConfig: func() { c.waitNode(t, "node01") },
				Config:    c.providerBlock() + fabricIBA,
			},
			{
				Config:             withLabels(`{ rack = "a" }`),
				ResourceName:       addr,
				ImportState:        true,
				ImportStateId:      "node01",
				ImportStatePersist: true,
				ImportStateCheck: func(s []*terraform.InstanceState) error {
					var a map[string]string
					for _, is := range s {
						if is.Attributes["name"] == "node01" {
							a = is.Attributes
						}
					}
					want := map[string]string{"declared": "false", "labels.rack": "a", "fabric.name": "ib-a", "fabric.adapters.0": "mlx5_0", "state": "ready", "gpus": "2"}
					for k, v := range want {
						if a[k] != v {
							return fmt.Errorf("imported %s = %q, want %q (state %v)", k, a[k], v, a)
						}
					}
					return nil
				},
			},
			{
				Config: withLabels(`{ rack = "a" }`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("declared"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("state"), knownvalue.StringExact("ready")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("fabrics_in_service").AtSliceIndex(0).AtMapKey("in_service"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("gpu_classes"), knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact("h100-80g")})),
				},
				Check: func(*terraform.State) error {
					n, err := c.ManageClient().GetNode(context.Background(), &managev1.GetNodeRequest{Id: "node01"})
					if err != nil {
						return err
					}
					if !n.GetDeclared() {
						return fmt.Errorf("node01 is not declared to the control plane after apply")
					}
					return nil
				},
			},
			{
				Config: withLabels(`{ rack = "a", tier = "gold" }`),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("labels"), knownvalue.MapExact(map[string]knownvalue.Check{
						"rack": knownvalue.StringExact("a"), "tier": knownvalue.StringExact("gold"),
					})),
				},
				Check: func(*terraform.State) error {
					n, err := c.ManageClient().GetNode(context.Background(), &managev1.GetNodeRequest{Id: "node01"})
					if err != nil {
						return err
					}
					if n.GetLabels()["tier"] != "gold" {
						return fmt.Errorf("node01 labels = %v, want tier=gold", n.GetLabels())
					}
					return nil
				},
			},
			{
				Config:             withLabels(`{ rack = "a", tier = "gold" }`),
				PlanOnly:           true,
				ExpectNonEmptyPlan: false,
			},
		},
	})
}

// TestAccNodeFabricMissing: a declared adapter the node does not have fails
// create with the fabric's reason.
func TestAccNodeFabricMissing(t *testing.T) {
	c := newAccCluster(t, "", testcluster.NodeSpec{ID: "node02", GPUs: 1, Adapters: []simhw.SimAdapter{activeAdapter("mlx5_0")}})
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				PreConfig:   func() { c.waitNode(t, "node02") },
				Config:      c.providerBlock() + fabricIBA + c.nodeHCL("n", "node02", `fabric = { name = llmgw_fabric.f.name, adapters = ["mlx5_1"] }`),
				ExpectError: regexp.MustCompile(`(?s)Node node02 is not ready.*fabric ib-a out of service:.*mlx5_1`),
			},
		},
	})
}

// TestAccNodeDestroyDrains: destroying the node that holds the model's
// replica drains it first (the replica ends on the other node and stays
// served), then revokes its identity (the agent is refused).
func TestAccNodeDestroyDrains(t *testing.T) {
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
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				PreConfig: func() { c.waitNode(t, "node03") },
				Config:    c.providerBlock() + c.nodeHCL("n", "node03", ""),
				Check: func(*terraform.State) error {
					testcluster.WaitFor(t, "sim-chat ready on node03", 60*time.Second, func() (bool, string) {
						on := readyOn()
						return on == "node03", "ready on " + on
					})
					return nil
				},
			},
			{
				PreConfig: func() {
					c.StartAgent(testcluster.NodeSpec{ID: "node04", GPUs: 1})
					c.waitNode(t, "node04")
				},
				Config: c.providerBlock(),
				Check: func(*terraform.State) error {
					if on := readyOn(); on != "node04" {
						return fmt.Errorf("after destroying node03 sim-chat is ready on %q, want node04 (drained before removal)", on)
					}
					testcluster.WaitFor(t, "node03 refused as revoked", 30*time.Second, func() (bool, string) {
						out := c.Nodes["node03"].Output()
						return strings.Contains(out, "refused by control plane") && strings.Contains(out, "revoked"), testcluster.Tail(out, 3)
					})
					return nil
				},
			},
		},
	})
}

// Engine scripts for the engine-check tests: one fails like a llama-server
// built against a libgomp the node lacks, one answers --version.
const (
	libgompEngine = "#!/bin/sh\necho \"$0: error while loading shared libraries: libgomp.so.1: cannot open shared object file: No such file or directory\" >&2\nexit 127\n"
	workingEngine = "#!/bin/sh\necho 'version: 4567 (abcdef0)'\n"
)

// writeEngine replaces the engine script at path, as an operator fixing (or
// breaking) the engine on the machine.
func writeEngine(t *testing.T, path, script string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestAccNodeEngineFixed: apply fails on the engine check and leaves the
// node tainted; the engine is fixed on the machine and the same apply
// replaces the node, which does not revoke it: it is ready with the same
// certificate and agent session. Broken and fixed again (CheckNodeEngines
// sees the failure), the unchanged configuration plans an update that runs
// the checks again. Destroying the node, which was ready, revokes it.
func TestAccNodeEngineFixed(t *testing.T) {
	c := newAccCluster(t, "", testcluster.NodeSpec{ID: "cpu05", GPUs: 1})
	ctx := context.Background()
	addr := "llmgw_node.n"
	llama := filepath.Join(c.Dir, "llama-server")
	writeEngine(t, llama, libgompEngine)
	config := c.providerBlock() + c.nodeHCL("n", "cpu05", fmt.Sprintf("engines = { llamacpp = %q }", llama))
	ready := func(*terraform.State) error {
		n, err := c.ManageClient().GetNode(ctx, &managev1.GetNodeRequest{Id: "cpu05"})
		if err != nil {
			return err
		}
		if n.GetState() != "ready" || !n.GetDeclared() || strings.Contains(n.GetReason(), "libgomp") {
			return fmt.Errorf("cpu05 is %s (declared %v): %s", n.GetState(), n.GetDeclared(), n.GetReason())
		}
		if out := c.Nodes["cpu05"].Output(); strings.Contains(out, "revoked") || strings.Contains(out, "refused") {
			return fmt.Errorf("cpu05's agent was refused:\n%s", testcluster.Tail(out, 5))
		}
		return nil
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy: func(*terraform.State) error {
			testcluster.WaitFor(t, "cpu05 refused as revoked", 30*time.Second, func() (bool, string) {
				out := c.Nodes["cpu05"].Output()
				return strings.Contains(out, "refused by control plane") && strings.Contains(out, "revoked"), testcluster.Tail(out, 3)
			})
			return nil
		},
		Steps: []resource.TestStep{
			{
				PreConfig:   func() { c.waitNode(t, "cpu05") },
				Config:      config,
				ExpectError: regexp.MustCompile(`(?s)Node cpu05 is not ready.*llama-server cannot start: libgomp.so.1`),
			},
			{
				PreConfig: func() { writeEngine(t, llama, workingEngine) },
				Config:    config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionReplace),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("state"), knownvalue.StringExact("ready")),
				},
				Check: ready,
			},
			{
				PreConfig: func() {
					writeEngine(t, llama, libgompEngine)
					resp, err := c.ManageClient().CheckNodeEngines(ctx, &managev1.CheckNodeEnginesRequest{Name: "cpu05", TimeoutMs: 30_000})
					if err != nil {
						t.Fatalf("CheckNodeEngines: %v", err)
					}
					if r := resp.GetNode().GetReason(); !strings.Contains(r, "libgomp.so.1") {
						t.Fatalf("after breaking the engine, CheckNodeEngines says %q", r)
					}
					writeEngine(t, llama, workingEngine)
				},
				Config: config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("state"), knownvalue.StringExact("ready")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("reason"), knownvalue.StringExact("")),
				},
				Check: ready,
			},
			{
				Config:             config,
				PlanOnly:           true,
				ExpectNonEmptyPlan: false,
			},
		},
	})
}
