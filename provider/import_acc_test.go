package provider

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/llmgw/llmgw/testkit/pvefake"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

// generatedImport is the import step a Terraform user takes: an import {}
// block for addr with id, and `terraform plan -generate-config-out` writing
// the resource block. The plan made with the generated configuration must be
// a no-op import (terraform-plugin-testing fails the step otherwise, or when
// the generated configuration does not plan at all).
func generatedImport(addr, id string) resource.TestStep {
	return resource.TestStep{
		ResourceName:    addr,
		ImportState:     true,
		ImportStateKind: resource.ImportBlockWithID,
		ImportStateId:   id,
		GenerateConfig:  true,
	}
}

// TestAccImportGeneratesConfig imports every importable resource the way
// Terraform 1.11 users do (import {} + -generate-config-out) and requires
// the generated configuration to plan with no changes.
func TestAccImportGeneratesConfig(t *testing.T) {
	c := newAccCluster(t, declaredModel, testcluster.NodeSpec{ID: "node01", GPUs: 2})
	p := c.providerBlock()
	cases := []struct {
		name, config, addr, id string
	}{
		{"fabric", fabricHCL("ib-g", "rack G"), "llmgw_fabric.f", "ib-g"},
		{"project", `resource "llmgw_project" "p" {
  name = "team-g"
}
`, "llmgw_project.p", "team-g"},
		{"budget", budgetHCL("month", "  amount = 10\n"), "llmgw_budget.b", "team-b/month"},
		{"api_key", apiKeyHCL(60), "llmgw_api_key.k", ""},
		{"model", modelHCL("imp-g", "[\"g\"]", "", ""), "llmgw_model.m", "imp-g"},
		{"node", c.nodeHCL("n", "node01", ""), "llmgw_node.n", "node01"},
	}
	pve := newPVEFake(t)
	cases = append(cases, struct{ name, config, addr, id string }{
		"proxmox_vm", vmHCL("  wait_for_registration = false\n  drain_timeout = \"0s\"\n"), "llmgw_proxmox_vm.n", "pve1/142",
	})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			step := generatedImport(tc.addr, tc.id)
			prov := p
			if tc.name == "proxmox_vm" {
				prov = pveOnlyProvider(pveBlock(t, pve))
			}
			resource.Test(t, resource.TestCase{
				ProtoV6ProviderFactories: factories,
				Steps:                    []resource.TestStep{{Config: prov + tc.config}, step},
			})
		})
	}
}

// TestAccProxmoxVMGeneratedImport is the case: a VM made by hand in
// Proxmox, imported with import {} and -generate-config-out, plans with no
// changes (clone_from = null is allowed for it); a VM without a static
// address is refused at import naming address and what to do; and a new VM
// without clone_from is refused at plan naming clone_from.
func TestAccProxmoxVMGeneratedImport(t *testing.T) {
	s := newPVEFake(t)
	vm := func(vmid int, ipconfig string) map[string]string {
		return map[string]string{
			"name": fmt.Sprintf("gpu-%d", vmid), "cpu": "host", "cores": "8", "memory": "16384", "scsihw": "virtio-scsi-single",
			"scsi0": fmt.Sprintf("local-lvm:vm-%d-disk-0,size=40G", vmid), "boot": "order=scsi0", "net0": "virtio=BC:24:11:00:01:50,bridge=vmbr0",
			"ipconfig0": ipconfig,
		}
	}
	s.AddVM(pvefake.DefaultNode, 150, false, vm(150, "ip=10.0.0.150/24,gw=10.0.0.1"))
	s.AddVM(pvefake.DefaultNode, 151, false, vm(151, "ip=dhcp"))
	prov := pveOnlyProvider(pveBlock(t, s))
	step := generatedImport("llmgw_proxmox_vm.v", "pve1/150")
	step.Config = prov
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps:                    []resource.TestStep{step},
	})

	dhcp := generatedImport("llmgw_proxmox_vm.v", "pve1/151")
	dhcp.Config = prov
	dhcp.ExpectError = regexp.MustCompile(`(?s)VM 151 has no static address.*needs address.*ipconfig0 = "ip=dhcp"`)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps:                    []resource.TestStep{dhcp},
	})

	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{{
			Config:      prov + strings.Replace(vmHCL(""), `  clone_from  = "ubuntu-2404"`+"\n", "", 1),
			PlanOnly:    true,
			ExpectError: regexp.MustCompile(`(?s)clone_from is required to create a VM.*Only an imported VM`),
		}},
	})
}
