package provider

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/testkit/pvefake"
	"github.com/llmgw/llmgw/testkit/testcluster"
	"github.com/llmgw/llmgw/testkit/tfacc"
)

const pveTemplateID = 9000

// newPVEFake skips the test without TF_ACC, else starts a Proxmox fake with
// a cloud-image template (9000, ubuntu-2404) on pve1.
func newPVEFake(t *testing.T) *pvefake.Server {
	t.Helper()
	tfacc.Require(t)
	for _, env := range []string{EnvPVEEndpoint, EnvPVEToken, EnvPVEInsecure} {
		t.Setenv(env, "")
	}
	s := pvefake.New(t)
	s.AddTemplate(pvefake.DefaultNode, pveTemplateID, "ubuntu-2404")
	return s
}

// pveBlock is the provider's proxmox attribute for the fake, trusting its
// certificate through ca_file.
func pveBlock(t *testing.T, s *pvefake.Server) string {
	return fmt.Sprintf(`  proxmox = {
    endpoint         = %q
    api_token_id     = %q
    api_token_secret = %q
    ca_file          = %q
  }
`, s.Endpoint(), pvefake.DefaultTokenID, pvefake.DefaultSecret, s.CAFile(t.TempDir()))
}

// pveOnlyProvider configures the provider for tests that never reach the
// control plane (wait_for_registration = false): its address is never
// dialled.
func pveOnlyProvider(proxmox string) string {
	return "provider \"llmgw\" {\n  endpoint = \"127.0.0.1:1\"\n  token    = \"unused\"\n" + proxmox + "}\n"
}

// vmHCL is an llmgw_proxmox_vm named gpu-142 at 10.0.0.142 cloned from the
// template; extra goes into the block.
func vmHCL(extra string) string {
	return fmt.Sprintf(`resource "llmgw_proxmox_vm" "n" {
  name        = "gpu-142"
  target_node = %q
  clone_from  = "ubuntu-2404"
  address     = "10.0.0.142/24"
  gateway     = "10.0.0.1"
  storage     = %q
  ssh_keys    = ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOps operator@laptop"]
  user_data   = "#cloud-config\nwrite_files:\n  - path: /etc/llmgw/node-key.pem\n    content: PRIVATE-KEY-OF-gpu-142\n"
%s
}
`, pvefake.DefaultNode, pvefake.DiskStorage, extra)
}

// checkVM checks the fake's VM 142 config against want (a key absent from
// the config is wanted as "").
func checkVM(s *pvefake.Server, want map[string]string) error {
	vm, ok := s.VM(142)
	if !ok {
		return fmt.Errorf("VM 142 does not exist in Proxmox")
	}
	for k, v := range want {
		if got := vm.Config[k]; got != v {
			return fmt.Errorf("VM 142 %s = %q, want %q (config %v)", k, got, v, vm.Config)
		}
	}
	return nil
}

// TestAccProxmoxVMLifecycle: create (cpu=host, VMID from the address, the
// seed ISO with the user-data as given), import, CPU drift detected and
// undone, an in-place change of cores, destroy.
func TestAccProxmoxVMLifecycle(t *testing.T) {
	s := newPVEFake(t)
	addr := "llmgw_proxmox_vm.n"
	cfg := func(extra string) string {
		return pveOnlyProvider(pveBlock(t, s)) + vmHCL("  wait_for_registration = false\n  drain_timeout = \"0s\"\n  disk_gb = 40\n"+
			"  nameservers = [\"10.0.0.1\", \"1.1.1.1\"]\n  search_domains = [\"lab.example\"]\n"+extra)
	}
	iso := "local:iso/llmgw-cidata-142.iso"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy: func(*terraform.State) error {
			if _, ok := s.VM(142); ok {
				return fmt.Errorf("VM 142 still exists after destroy")
			}
			if vols := s.Volumes(pvefake.DefaultNode); len(vols) > 0 {
				return fmt.Errorf("volumes left on pve1 after destroy: %v", vols)
			}
			return nil
		},
		Steps: []resource.TestStep{
			{
				Config: cfg(""),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("vmid"), knownvalue.Int64Exact(142)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("id"), knownvalue.StringExact("pve1/142")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("cpu_type"), knownvalue.StringExact("host")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("disk_gb"), knownvalue.Int64Exact(40)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("cloud_init_iso"), knownvalue.StringExact(iso)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("cloud_init_iso_removed"), knownvalue.Bool(false)),
				},
				Check: func(*terraform.State) error {
					if err := checkVM(s, map[string]string{
						"cpu": "host", "cores": "4", "memory": "8192", "name": "gpu-142",
						"ipconfig0": "ip=10.0.0.142/24,gw=10.0.0.1", "ide2": iso + ",media=cdrom",
						"scsi0": "local-lvm:vm-142-disk-0,size=40G", "net0": "virtio=BC:24:11:00:00:01,bridge=vmbr0",
						"sshkeys":    "ssh-ed25519%20AAAAC3NzaC1lZDI1NTE5AAAAIOps%20operator%40laptop",
						"nameserver": "10.0.0.1 1.1.1.1", "searchdomain": "lab.example",
					}); err != nil {
						return err
					}
					if vm, _ := s.VM(142); vm.Status != "running" {
						return fmt.Errorf("VM 142 is %s, want running", vm.Status)
					}
					clone := s.CallsMatching(http.MethodPost, `^/nodes/pve1/qemu/9000/clone$`)
					if len(clone) != 1 || clone[0].Form.Get("newid") != "142" || clone[0].Form.Get("full") != "1" || clone[0].Form.Get("storage") != "local-lvm" {
						return fmt.Errorf("clone calls %+v", clone)
					}
					conf := s.CallsMatching(http.MethodPost, `^/nodes/pve1/qemu/142/config$`)
					if len(conf) == 0 || conf[0].Form.Get("cpu") != "host" {
						return fmt.Errorf("the recorded config call does not set cpu=host: %+v", conf)
					}
					ud, err := s.ISOFile(pvefake.DefaultNode, iso, "user-data")
					if err != nil {
						return err
					}
					if !strings.Contains(ud, "PRIVATE-KEY-OF-gpu-142") {
						return fmt.Errorf("the ISO's user-data is not the configured one: %q", ud)
					}
					nc, err := s.ISOFile(pvefake.DefaultNode, iso, "network-config")
					if err != nil {
						return err
					}
					meta, err := s.ISOFile(pvefake.DefaultNode, iso, "meta-data")
					if err != nil {
						return err
					}
					dns := "    nameservers:\n      addresses: [\"10.0.0.1\", \"1.1.1.1\"]\n      search: [\"lab.example\"]\n"
					if !strings.Contains(nc, `"10.0.0.142/24"`) || !strings.Contains(nc, `via: "10.0.0.1"`) || !strings.Contains(nc, dns) || !strings.Contains(meta, "local-hostname: gpu-142") {
						return fmt.Errorf("ISO network-config %q / meta-data %q", nc, meta)
					}
					return nil
				},
			},
			{
				Config:            cfg(""),
				ResourceName:      addr,
				ImportState:       true,
				ImportStateId:     "pve1/142",
				ImportStateVerify: true,
				// Import cannot read what only the creating state knows; it
				// sees the seed ISO still attached (cloud_init_iso).
				ImportStateVerifyIgnore: []string{"clone_from", "storage", "user_data", "nameservers", "search_domains", "wait_for_registration", "drain_timeout"},
			},
			{
				PreConfig: func() { s.SetConfig(142, "cpu", "kvm64") },
				Config:    cfg(""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue(addr, tfjsonpath.New("cpu_type"), knownvalue.StringExact("host")),
				}},
				Check: func(*terraform.State) error { return checkVM(s, map[string]string{"cpu": "host"}) },
			},
			{
				Config: cfg("  cores = 8\n"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				Check: func(*terraform.State) error { return checkVM(s, map[string]string{"cores": "8", "cpu": "host"}) },
			},
			{
				Config:             cfg("  cores = 8\n"),
				PlanOnly:           true,
				ExpectNonEmptyPlan: false,
			},
		},
	})
}

// TestAccProxmoxVMCPUTypeWithOptions: a cpu_type with options is kept
// whole (not read back as its model alone), and the plan stays empty.
func TestAccProxmoxVMCPUTypeWithOptions(t *testing.T) {
	s := newPVEFake(t)
	cfg := pveOnlyProvider(pveBlock(t, s)) + vmHCL("  wait_for_registration = false\n  drain_timeout = \"0s\"\n  cpu_type = \"host,flags=+aes\"\n")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{Config: cfg, Check: func(*terraform.State) error { return checkVM(s, map[string]string{"cpu": "host,flags=+aes"}) }},
			{Config: cfg, PlanOnly: true, ExpectNonEmptyPlan: false},
		},
	})
}

// TestAccProxmoxVMCPUDriftPlan: a CPU type changed by hand makes the plan
// non-empty.
func TestAccProxmoxVMCPUDriftPlan(t *testing.T) {
	s := newPVEFake(t)
	cfg := pveOnlyProvider(pveBlock(t, s)) + vmHCL("  wait_for_registration = false\n  drain_timeout = \"0s\"\n")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{Config: cfg},
			{Config: cfg, PlanOnly: true, ExpectNonEmptyPlan: false},
			{PreConfig: func() { s.SetConfig(142, "cpu", "x86-64-v2-AES") }, Config: cfg, PlanOnly: true, ExpectNonEmptyPlan: true},
		},
	})
}

// TestAccProxmoxVMErrors: a taken VMID, a wrong token, an untrusted
// certificate, a failed task and a missing proxmox block each fail with a
// message that says what to do; the environment alone configures Proxmox.
func TestAccProxmoxVMErrors(t *testing.T) {
	s := newPVEFake(t)
	noWait := "  wait_for_registration = false\n  drain_timeout = \"0s\"\n"
	tests := []struct {
		name  string
		setup func()
		hcl   string
		want  string
	}{
		{
			name:  "existing VMID refused",
			setup: func() { s.AddVM(pvefake.DefaultNode, 142, false, map[string]string{"name": "someone-else"}) },
			hcl:   pveOnlyProvider(pveBlock(t, s)) + vmHCL(noWait),
			want:  `(?s)VMID 142 is taken.*"someone-else".*terraform\s+import\s+<address>\s+pve1/142`,
		},
		{
			name: "wrong token",
			hcl: pveOnlyProvider(strings.Replace(pveBlock(t, s), pvefake.DefaultSecret, "not-the-secret", 1)) +
				vmHCL(noWait+"  vmid = 143\n"),
			want: `(?s)Proxmox VE refused the API token.*api_token_secret.*PROXMOX_VE_API_TOKEN`,
		},
		{
			name: "untrusted certificate",
			hcl: pveOnlyProvider(fmt.Sprintf("  proxmox = {\n    endpoint = %q\n    api_token_id = %q\n    api_token_secret = %q\n  }\n",
				s.Endpoint(), pvefake.DefaultTokenID, pvefake.DefaultSecret)) + vmHCL(noWait+"  vmid = 143\n"),
			want: `(?s)Cannot verify the Proxmox VE API's TLS certificate.*ca_file.*insecure`,
		},
		{
			name:  "failed start reports the task's exit status",
			setup: func() { s.FailNextTask("qmstart", "start failed: QEMU exited with code 1") },
			hcl:   pveOnlyProvider(pveBlock(t, s)) + vmHCL(noWait+"  vmid = 144\n"),
			want:  `(?s)A Proxmox VE task failed.*starting VM 144: Proxmox\s+task\s+UPID:pve1:[0-9A-F:]+:qmstart:144:.*failed:\s+start\s+failed:\s+QEMU\s+exited\s+with\s+code\s+1`,
		},
		{
			name: "disk smaller than the template's",
			hcl:  pveOnlyProvider(pveBlock(t, s)) + vmHCL(noWait+"  vmid = 147\n  disk_gb = 2\n"),
			want: `(?s)disk_gb is smaller than the template's disk.*disk_gb = 2.*template 9000 \(ubuntu-2404\) is 4 GiB.*cannot\s+shrink`,
		},
		{
			name: "no proxmox block",
			hcl:  pveOnlyProvider("") + vmHCL(noWait+"  vmid = 145\n"),
			want: `(?s)proxmox block is not configured.*PROXMOX_VE_ENDPOINT.*PROXMOX_VE_API_TOKEN`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resource.Test(t, resource.TestCase{
				ProtoV6ProviderFactories: factories,
				Steps: []resource.TestStep{{
					PreConfig:   func() { setupIf(tt.setup) },
					Config:      tt.hcl,
					ExpectError: regexp.MustCompile(tt.want),
				}},
			})
		})
	}
	t.Run("environment only, insecure", func(t *testing.T) {
		t.Setenv(EnvPVEEndpoint, s.URL) // without /api2/json, as bpg takes it
		t.Setenv(EnvPVEToken, pvefake.DefaultTokenID+"="+pvefake.DefaultSecret)
		t.Setenv(EnvPVEInsecure, "true")
		resource.Test(t, resource.TestCase{
			ProtoV6ProviderFactories: factories,
			Steps: []resource.TestStep{{
				Config: pveOnlyProvider("") + vmHCL(noWait+"  vmid = 146\n"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("llmgw_proxmox_vm.n", tfjsonpath.New("id"), knownvalue.StringExact("pve1/146")),
				},
			}},
		})
	})
}

// startAgentOnBoot starts, in the background, an agent standing in for VM
// vmid once Proxmox has started it the boot-th time: an agent that was
// running before the VM started cannot be the VM's, and create waits for a
// newer session. It returns the agent's process once started.
func startAgentOnBoot(t *testing.T, c accCluster, s *pvefake.Server, vmid, boot int, spec testcluster.NodeSpec) <-chan *testcluster.Proc {
	started := make(chan *testcluster.Proc, 1)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	startPath := fmt.Sprintf(`^/nodes/%s/qemu/%d/status/start$`, pvefake.DefaultNode, vmid)
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if vm, ok := s.VM(vmid); ok && vm.Status == "running" && len(s.CallsMatching(http.MethodPost, startPath)) >= boot {
				started <- c.StartAgent(spec)
				return
			}
		}
	}()
	return started
}

func setupIf(f func()) {
	if f != nil {
		f()
	}
}

// TestAccProxmoxVMRegistration: with no agent, create ends after
// registration_timeout with a warning, the VM kept (not tainted) and the
// seed ISO attached; once an agent with the node's identity runs, the next
// apply updates the VM in place (no second clone): it sees the node
// register, detaches the ISO and deletes it from the storage.
func TestAccProxmoxVMRegistration(t *testing.T) {
	c := newAccCluster(t, "")
	s := newPVEFake(t)
	cfg := c.providerBlock()
	cfg = strings.TrimSuffix(cfg, "}\n") + pveBlock(t, s) + "}\n" + vmHCL(`  registration_timeout = "3s"`)
	addr := "llmgw_proxmox_vm.n"
	iso := "local:iso/llmgw-cidata-142.iso"
	clones := func() int { return len(s.CallsMatching(http.MethodPost, `^/nodes/pve1/qemu/9000/clone$`)) }
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				Config: cfg,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("cloud_init_iso_removed"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("cloud_init_iso"), knownvalue.StringExact(iso)),
				},
				Check: func(*terraform.State) error { return checkVM(s, map[string]string{"ide2": iso + ",media=cdrom"}) },
				// The next plan removes the ISO.
				ExpectNonEmptyPlan: true,
			},
			{
				PreConfig: func() {
					// The agent stands in for the booted VM: the identity it
					// presents is the one the user-data carried.
					ud, err := s.ISOFile(pvefake.DefaultNode, iso, "user-data")
					if err != nil || !strings.Contains(ud, "PRIVATE-KEY-OF-gpu-142") {
						t.Fatalf("user-data the fake received: %q, %v", ud, err)
					}
					c.StartAgent(testcluster.NodeSpec{ID: "gpu-142", GPUs: 1})
				},
				Config: cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("cloud_init_iso_removed"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("cloud_init_iso"), knownvalue.StringExact("")),
				},
				Check: func(*terraform.State) error {
					if n := clones(); n != 1 {
						return fmt.Errorf("%d clones, want 1: the VM that registered late was replaced", n)
					}
					if err := checkVM(s, map[string]string{"ide2": "none,media=cdrom"}); err != nil {
						return err
					}
					if vols := s.Volumes(pvefake.DefaultNode); len(vols) > 0 {
						return fmt.Errorf("volumes left on pve1 after registration: %v", vols)
					}
					if del := s.CallsMatching(http.MethodDelete, `^/nodes/pve1/storage/local/content/`+regexp.QuoteMeta(iso)+`$`); len(del) == 0 {
						return fmt.Errorf("no DELETE of %s was recorded", iso)
					}
					return nil
				},
			},
			{Config: cfg, PlanOnly: true, ExpectNonEmptyPlan: false},
		},
	})
}

// TestAccProxmoxVMCPUTypeWarning: a cpu_type other than host plans with a
// warning that names the cost, as the real terraform prints it.
func TestAccProxmoxVMCPUTypeWarning(t *testing.T) {
	c := newAccCluster(t, "")
	s := newPVEFake(t)
	tf := testcluster.NewTerraform(t, c.Cluster)
	main := `terraform {
  required_providers {
    llmgw = { source = "llmgw/llmgw" }
  }
}
` + "provider \"llmgw\" {\n" + pveBlock(t, s) + "}\n" + vmHCL("  wait_for_registration = false\n  drain_timeout = \"0s\"\n  cpu_type = \"kvm64\"\n")
	if err := os.WriteFile(filepath.Join(tf.Dir, "main.tf"), []byte(main), 0o600); err != nil {
		t.Fatal(err)
	}
	tf.Run(0, "init", "-no-color")
	out, _ := tf.Run(0, "plan", "-no-color")
	for _, want := range []string{"Warning: cpu_type is not host: inference will be slow", "AVX2", "several times slower"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q:\n%s", want, out)
		}
	}
}

// TestAccProxmoxVMDestroyDrains: destroying a VM whose node holds a replica
// drains the node before the VM is stopped. With nowhere to move the
// replica, destroy fails at once (the control plane refuses the drain)
// naming it and why, and the VM keeps running; once another node can take
// it, destroy waits until the replica is ready there, then stops and
// destroys the VM.
func TestAccProxmoxVMDestroyDrains(t *testing.T) {
	c := newAccCluster(t, `  - name: sim-chat
    source: sim://chat
    scaling: { min: 1, max: 1 }
    profiles:
      - { name: h100, engine: sim, gpu_class: h100-80g, tp: 1, startup_timeout: 1m }
`)
	s := newPVEFake(t)
	withVM := strings.TrimSuffix(c.providerBlock(), "}\n") + pveBlock(t, s) + "}\n" + vmHCL(`  drain_timeout = "3s"`)
	withoutVM := strings.TrimSuffix(c.providerBlock(), "}\n") + pveBlock(t, s) + "}\n"
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
	stops := func() int { return len(s.CallsMatching(http.MethodPost, `^/nodes/pve1/qemu/142/status/stop$`)) }
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				// The agent stands in for the booted VM.
				PreConfig: func() { startAgentOnBoot(t, c, s, 142, 1, testcluster.NodeSpec{ID: "gpu-142", GPUs: 1}) },
				Config:    withVM,
				Check: func(*terraform.State) error {
					testcluster.WaitFor(t, "sim-chat ready on gpu-142", 60*time.Second, func() (bool, string) {
						on := readyOn()
						return on == "gpu-142", "ready on " + on
					})
					return nil
				},
			},
			{
				Config:      withoutVM,
				ExpectError: regexp.MustCompile(`(?s)Node gpu-142 cannot be drained.*draining node gpu-142 before stopping VM 142.*replica\s+\S+\s+of\s+model\s+sim-chat\s+\(on\s+gpu-142\)\s+cannot\s+move.*Nothing\s+was\s+stopped`),
			},
			{
				PreConfig: func() {
					if vm, ok := s.VM(142); !ok || vm.Status != "running" || stops() != 0 {
						t.Fatalf("after the refused drain: VM 142 exists %v, status %q, %d stop calls; want it running, never stopped", ok, vm.Status, stops())
					}
					c.StartAgent(testcluster.NodeSpec{ID: "gpu-143", GPUs: 1})
				},
				Config: withoutVM,
				Check: func(*terraform.State) error {
					if on := readyOn(); on != "gpu-143" {
						return fmt.Errorf("after destroying VM 142 sim-chat is ready on %q, want gpu-143 (drained before the VM stopped)", on)
					}
					if _, ok := s.VM(142); ok || stops() != 1 {
						return fmt.Errorf("VM 142 exists %v after destroy, %d stop calls", ok, stops())
					}
					return nil
				},
			},
		},
	})
}

// TestAccProxmoxVMLocked: a change to a VM Proxmox has locked (a backup
// running) fails with Proxmox's own message and what to do about it, and
// goes through once the lock is gone.
func TestAccProxmoxVMLocked(t *testing.T) {
	s := newPVEFake(t)
	base := pveOnlyProvider(pveBlock(t, s))
	extra := "  wait_for_registration = false\n  drain_timeout = \"0s\"\n"
	cfg := base + vmHCL(extra)
	more := base + vmHCL(extra+"  cores = 8\n")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{Config: cfg},
			{PreConfig: func() { s.SetLock(142, "backup") }, Config: more,
				ExpectError: regexp.MustCompile(`(?s)VM 142 is locked \(backup\).*qm unlock`)},
			{PreConfig: func() { s.SetLock(142, "") }, Config: more,
				Check: func(*terraform.State) error { return checkVM(s, map[string]string{"cores": "8"}) }},
		},
	})
}

// TestAccProxmoxVMReplaceCancelsDrain: a change of user_data replaces the
// VM; the destroy drains node gpu-142 before stopping the old VM, and once
// the new VM's agent has registered the node takes work again instead of
// staying drained forever. The old agent still running when the new VM
// starts is not taken for the new one's registration.
func TestAccProxmoxVMReplaceCancelsDrain(t *testing.T) {
	c := newAccCluster(t, "")
	s := newPVEFake(t)
	base := strings.TrimSuffix(c.providerBlock(), "}\n") + pveBlock(t, s) + "}\n"
	cfg := base + vmHCL(`  drain_timeout = "30s"`)
	changed := strings.Replace(cfg, "PRIVATE-KEY-OF-gpu-142", "RENEWED-KEY-OF-gpu-142", 1)
	ctx := context.Background()
	var first <-chan *testcluster.Proc
	node := func() (*managev1.Node, error) {
		return c.ManageClient().GetNode(ctx, &managev1.GetNodeRequest{Id: "gpu-142"})
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				PreConfig: func() { first = startAgentOnBoot(t, c, s, 142, 1, testcluster.NodeSpec{ID: "gpu-142", GPUs: 1}) },
				Config:    cfg,
			},
			{
				PreConfig: func() {
					old := <-first
					// The old agent goes when its VM stops; the new VM's
					// agent comes when the new VM starts.
					stopPath := `^/nodes/pve1/qemu/142/status/stop$`
					go func() {
						for len(s.CallsMatching(http.MethodPost, stopPath)) == 0 {
							select {
							case <-old.Done:
								return
							case <-time.After(50 * time.Millisecond):
							}
						}
						_ = old.Cmd.Process.Signal(syscall.SIGTERM)
					}()
					startAgentOnBoot(t, c, s, 142, 2, testcluster.NodeSpec{ID: "gpu-142", GPUs: 1})
				},
				Config: changed,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction("llmgw_proxmox_vm.n", plancheck.ResourceActionDestroyBeforeCreate)},
				},
				Check: func(*terraform.State) error {
					if n := len(s.CallsMatching(http.MethodPost, `^/nodes/pve1/qemu/9000/clone$`)); n != 2 {
						return fmt.Errorf("%d clones, want 2 (a replacement)", n)
					}
					n, err := node()
					if err != nil {
						return err
					}
					if n.GetDraining() || n.GetState() == "draining" || !n.GetConnected() {
						return fmt.Errorf("after the replacement node gpu-142 is %s (draining %v, connected %v), want it in service", n.GetState(), n.GetDraining(), n.GetConnected())
					}
					return nil
				},
			},
		},
	})
}

// TestAccProxmoxVMDestroyISOLeft: when the cloud-init ISO cannot be deleted
// on destroy (a token without Datastore.Allocate), destroy still succeeds —
// the VM is gone, so an error would keep it in state for good — and the
// volume stays for the operator to delete by hand.
func TestAccProxmoxVMDestroyISOLeft(t *testing.T) {
	s := newPVEFake(t)
	cfg := pveOnlyProvider(pveBlock(t, s)) + vmHCL("  wait_for_registration = false\n  drain_timeout = \"0s\"\n")
	iso := "local:iso/llmgw-cidata-142.iso"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy: func(*terraform.State) error {
			if _, ok := s.VM(142); ok {
				return fmt.Errorf("VM 142 still exists after destroy")
			}
			if vols := s.Volumes(pvefake.DefaultNode); !slices.Contains(vols, iso) {
				return fmt.Errorf("volumes on pve1 after destroy: %v, want %s left (its delete failed)", vols, iso)
			}
			return nil
		},
		Steps: []resource.TestStep{
			{Config: cfg},
			{
				PreConfig: func() { s.FailNextTask("imgdel", "Permission check failed (/storage/local, Datastore.Allocate)") },
				Config:    cfg,
				Destroy:   true,
			},
		},
	})
}

// TestAccProxmoxVMTaskWarnings: a Proxmox task that ends with "WARNINGS: n"
// did its work: apply succeeds, and the real terraform prints a warning
// naming the task.
func TestAccProxmoxVMTaskWarnings(t *testing.T) {
	c := newAccCluster(t, "")
	s := newPVEFake(t)
	tf := testcluster.NewTerraform(t, c.Cluster)
	main := `terraform {
  required_providers {
    llmgw = { source = "llmgw/llmgw" }
  }
}
` + "provider \"llmgw\" {\n" + pveBlock(t, s) + "}\n" + vmHCL("  wait_for_registration = false\n  drain_timeout = \"0s\"\n")
	if err := os.WriteFile(filepath.Join(tf.Dir, "main.tf"), []byte(main), 0o600); err != nil {
		t.Fatal(err)
	}
	tf.Run(0, "init", "-no-color")
	s.FailNextTask("qmstart", "WARNINGS: 1")
	out, _ := tf.Run(0, "apply", "-no-color", "-auto-approve")
	for _, want := range []string{"Warning: A Proxmox VE task ended with warnings", "starting VM 142", "WARNINGS: 1", "qmstart"} {
		if !strings.Contains(out, want) {
			t.Errorf("apply output lacks %q:\n%s", want, out)
		}
	}
	if vm, ok := s.VM(142); !ok || vm.Status != "running" {
		t.Errorf("VM 142 exists %v, status %q; want it running", ok, vm.Status)
	}
	tf.Run(0, "destroy", "-no-color", "-auto-approve")
}

// TestAccProxmoxVMImportKeepsVM: a VM made by hand (VMID 150, not the
// address's last octet, with a gateway and SSH keys in its cloud-init
// settings) imported into a configuration that, like modules/proxmox-node
// by default, leaves vmid, gateway and ssh_keys unset plans an in-place
// update, never its replacement; after that apply the plan is empty.
func TestAccProxmoxVMImportKeepsVM(t *testing.T) {
	s := newPVEFake(t)
	s.AddVM(pvefake.DefaultNode, 150, false, map[string]string{
		"name": "gpu-142", "cpu": "host", "cores": "4", "memory": "8192", "scsihw": "virtio-scsi-single",
		"scsi0": "local-lvm:vm-150-disk-0,size=40G", "boot": "order=scsi0", "net0": "virtio=BC:24:11:00:01:50,bridge=vmbr0",
		"ipconfig0": "ip=10.0.0.142/24,gw=10.0.0.1", "sshkeys": "ssh-ed25519%20AAAAC3NzaC1lZDI1NTE5AAAAIOps%20operator%40laptop",
	})
	addr := "llmgw_proxmox_vm.n"
	cfg := pveOnlyProvider(pveBlock(t, s)) + fmt.Sprintf(`resource "llmgw_proxmox_vm" "n" {
  name                  = "gpu-142"
  target_node           = %q
  clone_from            = "ubuntu-2404"
  address               = "10.0.0.142/24"
  user_data             = "#cloud-config\n"
  wait_for_registration = false
  drain_timeout         = "0s"
}
`, pvefake.DefaultNode)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				Config: cfg, ResourceName: addr, ImportState: true, ImportStateId: "pve1/150", ImportStatePersist: true,
				ImportStateCheck: func(is []*terraform.InstanceState) error {
					if len(is) != 1 || is[0].Attributes["vmid"] != "150" || is[0].Attributes["gateway"] != "10.0.0.1" || is[0].Attributes["ssh_keys.#"] != "1" {
						return fmt.Errorf("imported state %+v", is)
					}
					return nil
				},
			},
			{
				Config: cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue(addr, tfjsonpath.New("vmid"), knownvalue.Int64Exact(150)),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("vmid"), knownvalue.Int64Exact(150)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("id"), knownvalue.StringExact("pve1/150")),
				},
				Check: func(*terraform.State) error {
					if _, ok := s.VM(150); !ok {
						return fmt.Errorf("VM 150 is gone after the apply that follows its import")
					}
					if clones := s.CallsMatching(http.MethodPost, `/clone$`); len(clones) > 0 {
						return fmt.Errorf("the apply after the import cloned a new VM: %+v", clones)
					}
					return nil
				},
			},
			{Config: cfg, PlanOnly: true, ExpectNonEmptyPlan: false},
		},
	})
}

// TestAccProxmoxVMTemplateCloudInitDrive: a template whose own Proxmox
// cloud-init drive is not on ide2 (where the seed goes) leaves no second
// cidata volume on the clone, which NoCloud could read instead of ours:
// create deletes that drive in its config call, and ide2 holds our ISO.
func TestAccProxmoxVMTemplateCloudInitDrive(t *testing.T) {
	for _, drive := range []string{"scsi1", "ide0", "sata1"} {
		t.Run(drive, func(t *testing.T) {
			s := newPVEFake(t)
			s.SetConfig(pveTemplateID, drive, fmt.Sprintf("%s:vm-%d-cloudinit,media=cdrom", pvefake.DiskStorage, pveTemplateID))
			cfg := pveOnlyProvider(pveBlock(t, s)) + vmHCL("  wait_for_registration = false\n  drain_timeout = \"0s\"\n")
			resource.Test(t, resource.TestCase{
				ProtoV6ProviderFactories: factories,
				Steps: []resource.TestStep{
					{
						Config: cfg,
						Check: func(*terraform.State) error {
							if err := checkVM(s, map[string]string{drive: "", "ide2": "local:iso/llmgw-cidata-142.iso,media=cdrom"}); err != nil {
								return err
							}
							vm, _ := s.VM(142)
							for k, v := range vm.Config {
								if strings.Contains(v, "cloudinit") {
									return fmt.Errorf("VM 142 still has a Proxmox cloud-init drive: %s = %q", k, v)
								}
							}
							conf := s.CallsMatching(http.MethodPost, `^/nodes/pve1/qemu/142/config$`)
							if len(conf) == 0 || conf[0].Form.Get("delete") != drive {
								return fmt.Errorf("the config call does not delete %s: %+v", drive, conf)
							}
							return nil
						},
					},
					{Config: cfg, PlanOnly: true, ExpectNonEmptyPlan: false},
				},
			})
		})
	}
}
