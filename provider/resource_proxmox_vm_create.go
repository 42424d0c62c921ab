package provider

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
	pveapi "github.com/luthermonson/go-proxmox"

	"github.com/llmgw/llmgw/provider/proxmox"
)

// Create clones, configures, grows, seeds and starts the VM, then waits for
// the node to register and removes the seed. From the clone on, the state
// is written after every step, so a failure leaves the VM tracked
// (tainted) rather than orphaned on the hypervisor.
func (r *proxmoxVMResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	ctx, flush := withTaskWarnings(ctx, &resp.Diagnostics)
	defer flush()
	var plan proxmoxVMModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	pve := r.client.proxmox(&resp.Diagnostics)
	if pve == nil {
		return
	}
	c := &vmCreation{r: r, pve: pve, plan: &plan, state: &resp.State, diags: &resp.Diagnostics, userData: plan.UserData.ValueString()}
	// user_data_wo is only in the configuration: the plan and the state
	// never hold it.
	var wo types.String
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("user_data_wo"), &wo)...)
	if !wo.IsNull() && !wo.IsUnknown() {
		c.userData = wo.ValueString()
	}
	for _, step := range []func(context.Context) bool{
		c.readInputs, c.checkTarget, c.checkVMID, c.findTemplate, c.checkDiskSize,
		c.clone, c.uploadSeed, c.configure, c.resizeDisk, c.start, c.waitRegistration,
	} {
		if !step(ctx) {
			return
		}
	}
}

// vmCreation is one Create of llmgw_proxmox_vm: its steps, in order, and
// what each finds out for the next. Every step returns whether Create goes
// on; a step that stops it has said why in diags (or, for start, the plan
// does not wait for registration).
type vmCreation struct {
	r     *proxmoxVMResource
	pve   *proxmox.Client
	plan  *proxmoxVMModel
	state stateSetter
	diags *diag.Diagnostics

	name, node        string
	userData          string // user_data or user_data_wo
	vmid              int
	keys, dns, search []string
	tmpl              *proxmox.VM            // the template (clone_from)
	vm                *pveapi.VirtualMachine // the clone, as read once cloned
	disk              string                 // the clone's boot disk
	size              int                    // its size in GiB, as cloned
	before            int64                  // the node's last session before start
}

// save writes the plan, as far as it is done, to the state.
func (c *vmCreation) save(ctx context.Context) {
	c.diags.Append(c.state.Set(ctx, *c.plan)...)
}

// failed records a Proxmox error of op and stops Create.
func (c *vmCreation) failed(op string, err error) bool {
	c.diags.Append(pveDiag(c.pve, op, err))
	return false
}

// readInputs reads the plan's names and its lists (SSH keys, DNS servers,
// search domains).
func (c *vmCreation) readInputs(ctx context.Context) bool {
	c.name, c.node, c.vmid = c.plan.Name.ValueString(), c.plan.TargetNode.ValueString(), int(c.plan.VMID.ValueInt64())
	var d diag.Diagnostics
	c.keys, d = c.plan.sshKeys(ctx)
	c.diags.Append(d...)
	c.dns, d = stringList(ctx, c.plan.Nameservers)
	c.diags.Append(d...)
	c.search, d = stringList(ctx, c.plan.SearchDomains)
	c.diags.Append(d...)
	return !c.diags.HasError()
}

// checkTarget checks that target_node is a node of the cluster.
func (c *vmCreation) checkTarget(ctx context.Context) bool {
	if err := c.pve.CheckNode(ctx, c.node); err != nil {
		return c.failed("reading Proxmox node "+c.node+" (target_node)", err)
	}
	return true
}

// checkVMID refuses a VMID that is taken anywhere in the cluster: create
// never adopts a machine (import does).
func (c *vmCreation) checkVMID(ctx context.Context) bool {
	taken, err := c.pve.FindVM(ctx, c.vmid)
	if err != nil {
		return c.failed("checking that VMID "+strconv.Itoa(c.vmid)+" is free", err)
	}
	if taken != nil {
		c.diags.AddAttributeError(path.Root("vmid"), fmt.Sprintf("VMID %d is taken", c.vmid),
			fmt.Sprintf("Proxmox already has VM %d (%q) on node %s. llmgw_proxmox_vm does not adopt a machine on create: to manage that VM, import it with "+
				"`terraform import <address> %s/%d`; to make a new one, set vmid to a free id.", c.vmid, taken.Name, taken.Node, taken.Node, c.vmid))
		return false
	}
	return true
}

// findTemplate resolves clone_from to a template of the cluster.
func (c *vmCreation) findTemplate(ctx context.Context) bool {
	tmpl, err := c.pve.FindTemplate(ctx, c.plan.CloneFrom.ValueString())
	if err != nil {
		c.diags.AddAttributeError(path.Root("clone_from"), "Template not found", err.Error())
		return false
	}
	c.tmpl = tmpl
	return true
}

// checkDiskSize refuses a disk_gb smaller than the template's boot disk,
// which Proxmox cannot shrink.
func (c *vmCreation) checkDiskSize(ctx context.Context) bool {
	want := c.plan.DiskGB
	if want.IsNull() || want.IsUnknown() {
		return true
	}
	t, err := c.pve.ReadVM(ctx, c.tmpl.Node, c.tmpl.VMID)
	if err != nil {
		return c.failed(fmt.Sprintf("reading template %d (clone_from)", c.tmpl.VMID), err)
	}
	if disk, size := proxmox.BootDisk(t.VirtualMachineConfig); disk != "" && want.ValueInt64() < int64(size) {
		c.diags.AddAttributeError(path.Root("disk_gb"), "disk_gb is smaller than the template's disk",
			fmt.Sprintf("disk_gb = %d, but the boot disk %s of template %d (%s) is %d GiB, and Proxmox cannot shrink a disk. Set disk_gb to %d or more, or leave it unset to keep the template's size.",
				want.ValueInt64(), disk, c.tmpl.VMID, c.tmpl.Name, size, size))
		return false
	}
	return true
}

// clone full-clones the template to the new VM on target_node, records
// the VM in state as soon as the clone task exists, waits for the task and
// reads the clone.
func (c *vmCreation) clone(ctx context.Context) bool {
	opts := &pveapi.VirtualMachineCloneOptions{NewID: c.vmid, Name: c.name, Full: true, Storage: c.plan.Storage.ValueString()}
	if c.tmpl.Node != c.node {
		opts.Target = c.node
	}
	_, task, err := c.pve.VM(c.tmpl.Node, c.tmpl.VMID).Clone(ctx, opts)
	if err != nil {
		return c.failed(fmt.Sprintf("creating VM %d (%s)", c.vmid, c.name), fmt.Errorf("cloning template %d to VM %d: %w", c.tmpl.VMID, c.vmid, err))
	}
	// The VM exists from here, even when waiting for the clone fails: state
	// it now, so a later failure leaves it in state (tainted) rather than
	// orphaned on the hypervisor. A clone that failed and took its VM with
	// it is dropped from state by the next refresh.
	c.plan.ID = types.StringValue(fmt.Sprintf("%s/%d", c.node, c.vmid))
	c.plan.CloudInitISO = types.StringValue("")
	c.plan.CloudInitISORemoved = types.BoolValue(true)
	if c.plan.DiskGB.IsUnknown() {
		c.plan.DiskGB = types.Int64Null()
	}
	c.save(ctx)
	if err := c.pve.Wait(ctx, fmt.Sprintf("cloning template %d to VM %d", c.tmpl.VMID, c.vmid), task, nil); err != nil {
		return c.failed(fmt.Sprintf("creating VM %d (%s)", c.vmid, c.name), err)
	}
	vm, err := c.pve.ReadVM(ctx, c.node, c.vmid)
	if err != nil {
		return c.failed("reading the clone", err)
	}
	c.vm = vm
	c.disk, c.size = proxmox.BootDisk(vm.VirtualMachineConfig)
	return true
}

// uploadSeed builds the cloud-init ISO (user-data, meta-data,
// network-config), uploads it to iso_storage and records it in state.
func (c *vmCreation) uploadSeed(ctx context.Context) bool {
	seed := proxmox.Seed{Hostname: c.name, VMID: c.vmid, UserData: c.userData, SSHKeys: c.keys,
		Address: c.plan.Address.ValueString(), Gateway: c.plan.Gateway.ValueString(), Nameservers: c.dns, SearchDomains: c.search}
	iso, err := seed.ISO()
	if err != nil {
		c.diags.AddError("Cannot build the cloud-init ISO", err.Error())
		return false
	}
	isoStorage := c.plan.ISOStorage.ValueString()
	volid := isoStorage + ":iso/" + proxmox.ISOName(c.vmid)
	if err := c.pve.UploadISO(ctx, c.node, isoStorage, proxmox.ISOName(c.vmid), iso); err != nil {
		return c.failed(fmt.Sprintf("uploading the cloud-init ISO of VM %d", c.vmid), err)
	}
	c.plan.CloudInitISO = types.StringValue(volid)
	c.plan.CloudInitISORemoved = types.BoolValue(false)
	c.save(ctx)
	return true
}

// configure sets the VM's CPU model, cores, memory, network, address,
// SSH keys and DNS, attaches the seed ISO, and deletes the template's own
// cloud-init drives.
func (c *vmCreation) configure(ctx context.Context) bool {
	plan, cfg := c.plan, c.vm.VirtualMachineConfig
	net0 := "virtio,bridge=" + plan.Bridge.ValueString()
	if cur := cfg.Nets["net0"]; cur != "" {
		net0 = proxmox.WithBridge(cur, plan.Bridge.ValueString())
	}
	set := []pveapi.VirtualMachineOption{
		{Name: "cpu", Value: plan.CPUType.ValueString()},
		{Name: "cores", Value: plan.Cores.ValueInt64()},
		{Name: "memory", Value: plan.MemoryMB.ValueInt64()},
		{Name: "net0", Value: net0},
		{Name: "ipconfig0", Value: plan.ipconfig0()},
		{Name: proxmox.ISODevice, Value: plan.CloudInitISO.ValueString() + ",media=cdrom"},
	}
	if len(c.keys) > 0 {
		set = append(set, pveapi.VirtualMachineOption{Name: "sshkeys", Value: pveapi.EncodeSSHKeys(c.keys...)})
	}
	if len(c.dns) > 0 {
		set = append(set, pveapi.VirtualMachineOption{Name: "nameserver", Value: strings.Join(c.dns, " ")})
	}
	if len(c.search) > 0 {
		set = append(set, pveapi.VirtualMachineOption{Name: "searchdomain", Value: strings.Join(c.search, " ")})
	}
	if drives := proxmox.CloudInitDrives(cfg); len(drives) > 0 {
		// The template's own cloud-init drive would be a second cidata
		// volume, which NoCloud may read instead of the seed.
		set = append(set, pveapi.VirtualMachineOption{Name: "delete", Value: strings.Join(drives, ",")})
	}
	task, err := c.vm.Config(ctx, set...)
	if err := c.pve.Wait(ctx, fmt.Sprintf("configuring VM %d", c.vmid), task, err); err != nil {
		return c.failed(fmt.Sprintf("configuring VM %d (%s)", c.vmid, c.name), err)
	}
	return true
}

// resizeDisk grows the clone's boot disk to disk_gb when that is larger.
func (c *vmCreation) resizeDisk(ctx context.Context) bool {
	want := c.plan.DiskGB.ValueInt64()
	if c.plan.DiskGB.IsNull() || c.disk == "" || want <= int64(c.size) {
		return true
	}
	task, err := c.vm.ResizeDisk(ctx, c.disk, fmt.Sprintf("%dG", want))
	if err := c.pve.Wait(ctx, fmt.Sprintf("growing %s of VM %d to %d GiB", c.disk, c.vmid, want), task, err); err != nil {
		return c.failed(fmt.Sprintf("resizing the disk of VM %d (%s)", c.vmid, c.name), err)
	}
	return true
}

// start notes the node's last session (when registration is awaited),
// starts the VM and records it as read back. It goes on only when the plan
// waits for registration.
func (c *vmCreation) start(ctx context.Context) bool {
	if c.plan.WaitForRegistration.ValueBool() {
		var err error
		if c.before, err = sessionBefore(ctx, c.r.client, c.name); err != nil {
			c.diags.Append(c.r.client.Diag("reading node "+c.name+" before starting VM "+strconv.Itoa(c.vmid), err))
			return false
		}
	}
	task, err := c.vm.Start(ctx)
	if err := c.pve.Wait(ctx, fmt.Sprintf("starting VM %d", c.vmid), task, err); err != nil {
		return c.failed(fmt.Sprintf("starting VM %d (%s)", c.vmid, c.name), err)
	}
	c.diags.Append(c.r.refresh(ctx, c.pve, c.plan)...)
	c.save(ctx)
	return !c.diags.HasError() && c.plan.WaitForRegistration.ValueBool()
}

// waitRegistration waits for the VM's agent to register as the node,
// removes the seed ISO, and cancels the drain a replaced machine's destroy
// left on the node. Nothing here fails the apply: the VM is made and
// running, and an error would taint it.
func (c *vmCreation) waitRegistration(ctx context.Context) bool {
	n, timedOut, d := c.r.removeSeedAfterRegistration(ctx, c.pve, c.plan, c.before)
	// A failure to remove the ISO (a token without Datastore.Allocate, say)
	// must not taint the VM. The state keeps the ISO and the next plan
	// removes it again.
	c.diags.Append(asWarnings(d)...)
	c.save(ctx)
	switch {
	case timedOut:
		// Not an error: that would taint the VM and the next apply would
		// replace a machine that may only be slow to boot. The next plan
		// removes the ISO instead (ModifyPlan), once the node registered.
		then := "the next `terraform apply` removes it once the node has registered (the VM is kept), or destroy the VM."
		if n.GetDraining() {
			then += fmt.Sprintf(" Node %s is still draining (from the machine this VM replaces): once it serves again, `llmgw ctl drain %s --cancel`.", c.name, c.name)
		}
		c.diags.AddWarning(registrationTimedOut(c.plan, c.node, c.plan.registrationTimeout(), then))
	case !c.diags.HasError() && n.GetDraining():
		// A replacement: the destroy of the machine before drained the
		// node, and this VM's agent is the node now.
		if _, err := c.r.client.CancelDrain(ctx, c.name); err != nil && !IsNotFound(err) {
			c.diags.AddWarning(fmt.Sprintf("Node %s is still draining", c.name),
				fmt.Sprintf("VM %d registered as node %s, which was drained when the machine it replaces was destroyed, but cancelling the drain failed: %v. "+
					"Run `llmgw ctl drain %s --cancel` so that it takes work again.", c.vmid, c.name, err, c.name))
		}
	}
	return true
}
