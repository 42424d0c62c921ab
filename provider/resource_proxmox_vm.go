package provider

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/boolplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	pveapi "github.com/luthermonson/go-proxmox"

	"github.com/llmgw/llmgw/provider/proxmox"
)

// Defaults of llmgw_proxmox_vm.
const (
	defaultPVECPUType          = "host"
	defaultPVECores            = 4
	defaultPVEMemoryMB         = 8192
	defaultPVEBridge           = "vmbr0"
	defaultPVEISOStorage       = "local"
	defaultRegistrationTimeout = "10m"
	defaultVMDrainTimeout      = "10m"
	pveCPUDefaultWhenUnset     = "kvm64" // qemu-server's model when a VM's config has no cpu key
	pveMinVMID                 = 100
)

var (
	_ resource.ResourceWithConfigure   = (*proxmoxVMResource)(nil)
	_ resource.ResourceWithImportState = (*proxmoxVMResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*proxmoxVMResource)(nil)
)

// proxmoxVMResource is llmgw_proxmox_vm: a node's virtual machine on
// Proxmox VE, cloned from a cloud-image template, configured with cpu =
// host and booted with a cloud-init ISO that is removed once the node has
// registered.
type proxmoxVMResource struct {
	client *Client
}

func newProxmoxVMResource() resource.Resource { return &proxmoxVMResource{} }

// proxmoxVMModel is llmgw_proxmox_vm's state.
type proxmoxVMModel struct {
	ID                  types.String `tfsdk:"id"`
	Name                types.String `tfsdk:"name"`
	TargetNode          types.String `tfsdk:"target_node"`
	VMID                types.Int64  `tfsdk:"vmid"`
	CloneFrom           types.String `tfsdk:"clone_from"`
	CPUType             types.String `tfsdk:"cpu_type"`
	Cores               types.Int64  `tfsdk:"cores"`
	MemoryMB            types.Int64  `tfsdk:"memory_mb"`
	DiskGB              types.Int64  `tfsdk:"disk_gb"`
	Storage             types.String `tfsdk:"storage"`
	ISOStorage          types.String `tfsdk:"iso_storage"`
	Bridge              types.String `tfsdk:"bridge"`
	Address             types.String `tfsdk:"address"`
	Gateway             types.String `tfsdk:"gateway"`
	SSHKeys             types.List   `tfsdk:"ssh_keys"`
	Nameservers         types.List   `tfsdk:"nameservers"`
	SearchDomains       types.List   `tfsdk:"search_domains"`
	UserData            types.String `tfsdk:"user_data"`
	UserDataWO          types.String `tfsdk:"user_data_wo"`
	UserDataWOVersion   types.String `tfsdk:"user_data_wo_version"`
	WaitForRegistration types.Bool   `tfsdk:"wait_for_registration"`
	RegistrationTimeout types.String `tfsdk:"registration_timeout"`
	DrainTimeout        types.String `tfsdk:"drain_timeout"`
	CloudInitISO        types.String `tfsdk:"cloud_init_iso"`
	CloudInitISORemoved types.Bool   `tfsdk:"cloud_init_iso_removed"`
}

func (r *proxmoxVMResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_proxmox_vm"
}

func (r *proxmoxVMResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replaceString := func(desc string) []planmodifier.String {
		return []planmodifier.String{stringplanmodifier.RequiresReplaceIf(configSetAndDiffers, desc, desc)}
	}
	rebootNote := " Changing it on a running VM is held by Proxmox as a pending change until the VM restarts; the plan says so."
	resp.Schema = schema.Schema{
		MarkdownDescription: "A node's virtual machine on Proxmox VE, through the provider's `proxmox` block (API token; no SSH to the hypervisor). " +
			"Create refuses a VMID that is taken (adopt an existing VM with `terraform import`), full-clones the template, sets `cpu`, `cores`, `memory`, `net0`, `ipconfig0`, `sshkeys`, `nameserver` and `searchdomain`, grows the boot disk, " +
			"uploads a cloud-init ISO (user-data, meta-data, network-config) through the API and attaches it, starts the VM, and waits for each Proxmox task, failing with the task's own exit status. " +
			"Then, unless `wait_for_registration = false`, it waits until the node named `name` has connected to the control plane, detaches the ISO and deletes it from the storage, " +
			"since the user-data carries the node's private key. " +
			"Destroy first drains the node named `name` when the control plane knows it (each replica's replacement is ready elsewhere before the original stops) and waits until it holds no replica (`drain_timeout`), then stops and destroys the VM: " +
			"an `llmgw_node` destroyed in the same apply may still be moving the node's replicas when the VM's destroy starts.\n\n" +
			"The first-boot inputs (`clone_from`, `storage`, `address`, `gateway`, `ssh_keys`, `nameservers`, `search_domains`, `user_data`, `user_data_wo_version`) replace the VM when the configuration sets a value other than the state's; " +
			"one the configuration leaves unset or empty replaces nothing, so a VM imported into a configuration without them is kept.\n\n" +
			"`cpu_type` defaults to `host`: Proxmox's own default model (kvm64) hides AVX2 and inference on the CPU becomes several times slower while everything looks healthy.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "`NODE/VMID`, where the VM is now (the import id).",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"name": schema.StringAttribute{
				Required: true,
				MarkdownDescription: "The node id: the VM's name and hostname, and the common name of the node's certificate (`llmgw_node_certificate`); " +
					"registration is awaited under this name. Changing it replaces the VM.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Validators:    []validator.String{nodeNameValidator{}},
			},
			"target_node": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: "The Proxmox node the VM is created on. Changing it replaces the VM (a VM migrated by hand is followed: `id` says where it is).",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"vmid": schema.Int64Attribute{
				Optional: true, Computed: true,
				MarkdownDescription: "The VM's id. Defaults to the last octet of `address` (10.0.0.142/24 → 142), so `qm list` and `llmgw ctl nodes` sort alike; " +
					"Proxmox ids start at 100, so set it when the octet is lower. A VMID that is taken fails create (import the VM instead). Changing it replaces the VM; " +
					"left unset, a VM that exists (an imported one whose id is not the octet) keeps its id as long as `address` stays.",
				PlanModifiers: []planmodifier.Int64{vmidFromAddress{}, int64planmodifier.RequiresReplace()},
				Validators:    []validator.Int64{int64validator.AtLeast(pveMinVMID)},
			},
			"clone_from": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "The template to full-clone: its VMID or its name (a cloud image with cloud-init, e.g. Ubuntu 24.04). Required to create a VM; " +
					"an imported VM may leave it unset, since Proxmox keeps no record of the template a VM was cloned from (so `-generate-config-out` writes `clone_from = null`). " +
					"Changing it replaces the VM, but setting it on an imported VM does not.",
				PlanModifiers: replaceString("Changing the template replaces the VM."),
			},
			"cpu_type": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(defaultPVECPUType),
				MarkdownDescription: "The CPU model (`qm set --cpu`). Default `host`: the guest sees the host's instruction sets, AVX2 and AVX-512 included. " +
					"Any other model is allowed but planned with a warning: kvm64 and the x86-64-v2 models hide AVX2, and CPU inference runs several times slower. " +
					"A change made by hand in Proxmox shows as drift." + rebootNote,
			},
			"cores": schema.Int64Attribute{
				Optional: true, Computed: true, Default: int64default.StaticInt64(defaultPVECores),
				MarkdownDescription: fmt.Sprintf("vCPU cores (default %d).", defaultPVECores) + rebootNote,
				Validators:          []validator.Int64{int64validator.AtLeast(1)},
			},
			"memory_mb": schema.Int64Attribute{
				Optional: true, Computed: true, Default: int64default.StaticInt64(defaultPVEMemoryMB),
				MarkdownDescription: fmt.Sprintf("Memory in MiB (default %d).", defaultPVEMemoryMB) + rebootNote,
				Validators:          []validator.Int64{int64validator.AtLeast(16)},
			},
			"disk_gb": schema.Int64Attribute{
				Optional: true, Computed: true,
				MarkdownDescription: "Size of the boot disk in GiB; the clone's disk is grown to it (live). Proxmox cannot shrink a disk, so a smaller value fails the plan. Without it, the template's size is kept and read back.",
				PlanModifiers:       []planmodifier.Int64{int64planmodifier.UseStateForUnknown()},
				Validators:          []validator.Int64{int64validator.AtLeast(1)},
			},
			"storage": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "The storage for the clone's disks (e.g. `local-lvm`); default: the template's. Changing it replaces the VM.",
				PlanModifiers:       replaceString("Changing the storage replaces the VM."),
			},
			"iso_storage": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(defaultPVEISOStorage),
				MarkdownDescription: "The storage the cloud-init ISO is uploaded to; it must accept `iso` content (default `" + defaultPVEISOStorage + "`).",
			},
			"bridge": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(defaultPVEBridge),
				MarkdownDescription: "The bridge of the VM's network interface `net0` (default `" + defaultPVEBridge + "`). A change moves the interface (same MAC) without a reboot.",
			},
			"address": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: "The VM's address as CIDR (`10.0.0.142/24`), written to `ipconfig0` and the ISO's network-config. Changing it replaces the VM (cloud-init applies it once).",
				PlanModifiers:       replaceString("Changing the address replaces the VM."),
				Validators:          []validator.String{cidrValidator{}},
			},
			"gateway": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "The default gateway. Changing it replaces the VM.",
				PlanModifiers:       replaceString("Changing the gateway replaces the VM."),
			},
			"ssh_keys": schema.ListAttribute{
				Optional: true, ElementType: types.StringType,
				MarkdownDescription: "SSH public keys for the image's default user (`sshkeys` and the ISO's meta-data). Changing them replaces the VM.",
				PlanModifiers:       []planmodifier.List{listplanmodifier.RequiresReplaceIf(listConfigSetAndDiffers, "Changing the keys replaces the VM.", "Changing the keys replaces the VM.")},
			},
			"nameservers": schema.ListAttribute{
				Optional: true, ElementType: types.StringType,
				MarkdownDescription: "DNS servers of the VM (`[\"10.0.0.1\"]`), written to the ISO's network-config and the VM's `nameserver` option. " +
					"A static address brings no DNS with it: without nameservers the image resolves no name, and installing packages or the llmgw binary from a URL fails. Changing them replaces the VM.",
				PlanModifiers: []planmodifier.List{listplanmodifier.RequiresReplaceIf(listConfigSetAndDiffers, "Changing the DNS servers replaces the VM.", "Changing the DNS servers replaces the VM.")},
				Validators:    []validator.List{listvalidator.ValueStringsAre(ipValidator{})},
			},
			"search_domains": schema.ListAttribute{
				Optional: true, ElementType: types.StringType,
				MarkdownDescription: "DNS search domains of the VM (`[\"lab.example\"]`), written to the ISO's network-config and the VM's `searchdomain` option. Changing them replaces the VM.",
				PlanModifiers:       []planmodifier.List{listplanmodifier.RequiresReplaceIf(listConfigSetAndDiffers, "Changing the search domains replaces the VM.", "Changing the search domains replaces the VM.")},
			},
			"user_data": schema.StringAttribute{
				Optional: true, Sensitive: true,
				MarkdownDescription: "The cloud-init user-data (`#cloud-config …`), which installs the agent with its certificate and key; hence sensitive. " +
					"It reaches the VM on the uploaded ISO, which is deleted once the node has registered. Changing it replaces the VM. " +
					"**It is stored in the Terraform state**, private key included: prefer `user_data_wo`.",
				PlanModifiers: replaceString("Changing the user-data replaces the VM."),
				Validators:    []validator.String{stringvalidator.ConflictsWith(path.MatchRoot("user_data_wo"))},
			},
			"user_data_wo": schema.StringAttribute{
				Optional: true, Sensitive: true, WriteOnly: true,
				MarkdownDescription: "The cloud-init user-data as a write-only attribute (Terraform 1.11 or later): read only when the VM is created, never written to the plan or the state. " +
					"Feed it from the ephemeral resource `llmgw_node_certificate`, whose private key then exists only on the VM. " +
					"Requires `user_data_wo_version`; Terraform cannot compare a value it never stores, so a new user-data replaces the VM only when `user_data_wo_version` changes.",
				Validators: []validator.String{stringvalidator.AlsoRequires(path.MatchRoot("user_data_wo_version"))},
			},
			"user_data_wo_version": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "Any string that stands for `user_data_wo`, such as a hash of its non-secret parts and a certificate generation (stored). " +
					"Changing it replaces the VM with one booted with the current `user_data_wo`; setting it on an imported VM does not.",
				PlanModifiers: replaceString("Changing user_data_wo_version replaces the VM."),
				Validators:    []validator.String{stringvalidator.AlsoRequires(path.MatchRoot("user_data_wo"))},
			},
			"wait_for_registration": schema.BoolAttribute{
				Optional: true, Computed: true, Default: booldefault.StaticBool(true),
				MarkdownDescription: "Whether apply waits until the node named `name` has connected to the control plane and then removes the cloud-init ISO (default true). " +
					"With false the ISO stays on the hypervisor until this is set to true and applied again.",
			},
			"registration_timeout": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(defaultRegistrationTimeout),
				MarkdownDescription: "How long apply waits for the node to register, like `5m` (default `" + defaultRegistrationTimeout + "`).",
				Validators:          []validator.String{durationValidator{}},
			},
			"drain_timeout": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(defaultVMDrainTimeout),
				MarkdownDescription: "How long destroy waits for the node's replicas to move elsewhere before it stops the VM, like `10m` (default `" + defaultVMDrainTimeout + "`). " +
					"When it passes, destroy fails naming the replicas still on the node and the VM keeps running. `0s` skips the drain (a control plane that cannot be reached, a VM that is no node).",
				Validators: []validator.String{durationValidator{allowZero: true}},
			},
			"cloud_init_iso": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The cloud-init ISO's volume (`local:iso/llmgw-cidata-142.iso`) while it is on the hypervisor; empty once removed.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"cloud_init_iso_removed": schema.BoolAttribute{
				Computed:            true,
				MarkdownDescription: "True once the cloud-init ISO (and the private key in it) has been detached and deleted from Proxmox storage, or for an imported VM, which has none of ours.",
				PlanModifiers:       []planmodifier.Bool{boolplanmodifier.UseStateForUnknown()},
			},
		},
	}
}

func (r *proxmoxVMResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.client = clientFrom(req.ProviderData, &resp.Diagnostics)
}

// ModifyPlan warns about a CPU model other than host and about changes that
// take effect only when the VM restarts, refuses to shrink the disk, and
// plans the removal of a cloud-init ISO left behind (wait_for_registration
// turned on, or a registration that timed out).
func (r *proxmoxVMResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return
	}
	var plan proxmoxVMModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if req.State.Raw.IsNull() && plan.CloneFrom.IsNull() {
		resp.Diagnostics.AddAttributeError(path.Root("clone_from"), "clone_from is required to create a VM",
			fmt.Sprintf("VM %s does not exist yet, so it is cloned from a template: set clone_from to the template's VMID or name. "+
				"Only an imported VM may leave clone_from unset (Proxmox does not record which template a VM came from).", plan.Name.ValueString()))
	}
	if !plan.CPUType.IsUnknown() {
		if w := cpuTypeWarning(plan.CPUType.ValueString()); w != "" {
			resp.Diagnostics.AddAttributeWarning(path.Root("cpu_type"), "cpu_type is not host: inference will be slow", w)
		}
	}
	if req.State.Raw.IsNull() {
		return
	}
	var state proxmoxVMModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if len(resp.RequiresReplace) == 0 {
		var changed []string
		if !plan.CPUType.Equal(state.CPUType) && !plan.CPUType.IsUnknown() {
			changed = append(changed, fmt.Sprintf("cpu_type %s → %s", state.CPUType.ValueString(), plan.CPUType.ValueString()))
		}
		if !plan.Cores.Equal(state.Cores) && !plan.Cores.IsUnknown() {
			changed = append(changed, fmt.Sprintf("cores %d → %d", state.Cores.ValueInt64(), plan.Cores.ValueInt64()))
		}
		if !plan.MemoryMB.Equal(state.MemoryMB) && !plan.MemoryMB.IsUnknown() {
			changed = append(changed, fmt.Sprintf("memory_mb %d → %d", state.MemoryMB.ValueInt64(), plan.MemoryMB.ValueInt64()))
		}
		if len(changed) > 0 {
			resp.Diagnostics.AddWarning(fmt.Sprintf("VM %s needs a reboot for this change", state.Name.ValueString()),
				fmt.Sprintf("%s: Proxmox keeps it pending on the running VM until it restarts (`qm reboot %d` on %s, after draining the node). Apply does not reboot it.",
					strings.Join(changed, ", "), state.VMID.ValueInt64(), strings.Split(state.ID.ValueString(), "/")[0]))
		}
	}
	if !plan.DiskGB.IsUnknown() && !plan.DiskGB.IsNull() && !state.DiskGB.IsNull() && plan.DiskGB.ValueInt64() < state.DiskGB.ValueInt64() {
		resp.Diagnostics.AddAttributeError(path.Root("disk_gb"), "Proxmox cannot shrink a disk",
			fmt.Sprintf("disk_gb = %d is smaller than the VM's disk, %d GiB. Set disk_gb to at least %d, or replace the VM (terraform apply -replace).",
				plan.DiskGB.ValueInt64(), state.DiskGB.ValueInt64(), state.DiskGB.ValueInt64()))
	}
	if len(resp.RequiresReplace) == 0 && plan.WaitForRegistration.ValueBool() && !state.CloudInitISORemoved.ValueBool() && state.CloudInitISO.ValueString() != "" {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("cloud_init_iso"), types.StringValue(""))...)
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("cloud_init_iso_removed"), types.BoolValue(true))...)
	}
}

func (r *proxmoxVMResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	node, id, ok := strings.Cut(req.ID, "/")
	vmid, err := strconv.Atoi(id)
	if !ok || node == "" || err != nil {
		resp.Diagnostics.AddError("Invalid import id",
			fmt.Sprintf("%q is not NODE/VMID: import a Proxmox VM as `terraform import llmgw_proxmox_vm.NAME pve1/142`.", req.ID))
		return
	}
	for name, v := range map[string]any{"id": node + "/" + id, "target_node": node, "vmid": int64(vmid)} {
		resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root(name), v)...)
	}
}

// sshKeys is the plan's ssh_keys.
func (m proxmoxVMModel) sshKeys(ctx context.Context) ([]string, diag.Diagnostics) {
	return stringList(ctx, m.SSHKeys)
}

// stringList is a list attribute's strings; nil when null or unknown.
func stringList(ctx context.Context, l types.List) ([]string, diag.Diagnostics) {
	var out []string
	if l.IsNull() || l.IsUnknown() {
		return nil, nil
	}
	d := l.ElementsAs(ctx, &out, false)
	return out, d
}

// ipconfig0 is the VM's ipconfig0 value.
func (m proxmoxVMModel) ipconfig0() string {
	v := "ip=" + m.Address.ValueString()
	if gw := m.Gateway.ValueString(); gw != "" {
		v += ",gw=" + gw
	}
	return v
}

// refresh reads the VM into m: where it is, what matters of its
// configuration (CPU model, cores, memory, disk size, bridge), whether the
// cloud-init ISO is still attached, and, for an imported VM, the name and
// network settings import could not know. It returns found = false in m.ID
// = "" when the VM is gone.
func (r *proxmoxVMResource) refresh(ctx context.Context, pve *proxmox.Client, m *proxmoxVMModel) diag.Diagnostics {
	var diags diag.Diagnostics
	vmid := int(m.VMID.ValueInt64())
	where, err := pve.FindVM(ctx, vmid)
	if err != nil {
		diags.Append(pveDiag(pve, fmt.Sprintf("reading VM %d", vmid), err))
		return diags
	}
	if where == nil {
		m.ID = types.StringValue("")
		return diags
	}
	vm, err := pve.ReadVM(ctx, where.Node, vmid)
	if err != nil {
		diags.Append(pveDiag(pve, fmt.Sprintf("reading VM %d", vmid), err))
		return diags
	}
	cfg := vm.VirtualMachineConfig
	m.ID = types.StringValue(fmt.Sprintf("%s/%d", where.Node, vmid))
	cpu := cfg.CPU // the whole value: "host,flags=+aes" is what was set
	if cpu == "" {
		cpu = pveCPUDefaultWhenUnset
	}
	m.CPUType = types.StringValue(cpu)
	cores := 1
	if cfg.Cores != nil {
		cores = *cfg.Cores
	}
	m.Cores = types.Int64Value(int64(cores))
	mem := int64(cfg.Memory)
	if mem == 0 {
		mem = 512
	}
	m.MemoryMB = types.Int64Value(mem)
	if _, size := proxmox.BootDisk(cfg); size > 0 {
		m.DiskGB = types.Int64Value(int64(size))
	}
	if net0 := cfg.Nets["net0"]; net0 != "" {
		m.Bridge = types.StringValue(proxmox.BridgeOf(net0))
	}
	if m.Name.IsNull() {
		m.Name = types.StringValue(cfg.Name)
	}
	if m.TargetNode.IsNull() {
		m.TargetNode = types.StringValue(where.Node)
	}
	if ip := cfg.IPConfigs["ipconfig0"]; ip != "" && m.Address.IsNull() {
		for _, kv := range strings.Split(ip, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "ip":
				m.Address = types.StringValue(v)
			case "gw":
				m.Gateway = types.StringValue(v)
			}
		}
	}
	if m.Address.IsNull() || m.Address.ValueString() == "dhcp" {
		// address is required and is the node's address: an imported VM
		// without a static one would generate a configuration that cannot
		// plan, so say here what to fix.
		diags.AddAttributeError(path.Root("address"), fmt.Sprintf("VM %d has no static address", vmid),
			fmt.Sprintf("llmgw_proxmox_vm needs address, the VM's static address as CIDR, and Proxmox has none for VM %d (ipconfig0 = %q). "+
				"Give the VM its address in Proxmox (`qm set %d --ipconfig0 ip=CIDR,gw=GATEWAY`) and import it again.",
				vmid, cfg.IPConfigs["ipconfig0"], vmid))
		return diags
	}
	if m.SSHKeys.IsNull() && cfg.SSHKeys != "" && m.CloneFrom.IsNull() {
		if dec, err := url.PathUnescape(cfg.SSHKeys); err == nil {
			var keys []string
			for _, k := range strings.Split(strings.TrimSpace(dec), "\n") {
				if k = strings.TrimSpace(k); k != "" {
					keys = append(keys, k)
				}
			}
			v, d := types.ListValueFrom(ctx, types.StringType, keys)
			diags.Append(d...)
			m.SSHKeys = v
		}
	}
	if m.CloudInitISO.IsNull() {
		// Imported: a seed ISO of ours still attached (a VM whose node
		// never registered) is recorded, and removed once it does when
		// wait_for_registration is true. Import reads it as false then, so
		// that the configuration -generate-config-out writes changes
		// nothing; a configuration that says true removes the ISO.
		m.CloudInitISO = types.StringValue("")
		m.CloudInitISORemoved = types.BoolValue(true)
		if v := proxmox.SeedISOOf(cfg); v != "" {
			m.CloudInitISO = types.StringValue(v)
			m.CloudInitISORemoved = types.BoolValue(false)
			if m.WaitForRegistration.IsNull() {
				m.WaitForRegistration = types.BoolValue(false)
			}
		}
	}
	if m.WaitForRegistration.IsNull() {
		m.WaitForRegistration = types.BoolValue(true)
	}
	if m.RegistrationTimeout.IsNull() {
		m.RegistrationTimeout = types.StringValue(defaultRegistrationTimeout)
	}
	if m.DrainTimeout.IsNull() {
		m.DrainTimeout = types.StringValue(defaultVMDrainTimeout)
	}
	if m.ISOStorage.IsNull() {
		m.ISOStorage = types.StringValue(defaultPVEISOStorage)
	}
	return diags
}

func (r *proxmoxVMResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	ctx, flush := withTaskWarnings(ctx, &resp.Diagnostics)
	defer flush()
	var state proxmoxVMModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	pve := r.client.proxmox(&resp.Diagnostics)
	if pve == nil {
		return
	}
	resp.Diagnostics.Append(r.refresh(ctx, pve, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if state.ID.ValueString() == "" {
		resp.State.RemoveResource(ctx)
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

// Update applies the changes that need no new VM: CPU model, cores and
// memory (pending until a restart on a running VM), the bridge, a larger
// disk, and the removal of a cloud-init ISO left behind.
func (r *proxmoxVMResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	ctx, flush := withTaskWarnings(ctx, &resp.Diagnostics)
	defer flush()
	var plan, state proxmoxVMModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	pve := r.client.proxmox(&resp.Diagnostics)
	if pve == nil {
		return
	}
	name, vmid := state.Name.ValueString(), int(state.VMID.ValueInt64())
	node, _, _ := strings.Cut(state.ID.ValueString(), "/")
	vm, err := pve.ReadVM(ctx, node, vmid)
	if err != nil {
		resp.Diagnostics.Append(pveDiag(pve, fmt.Sprintf("updating VM %d (%s)", vmid, name), err))
		return
	}
	var set []pveapi.VirtualMachineOption
	if !plan.CPUType.Equal(state.CPUType) {
		set = append(set, pveapi.VirtualMachineOption{Name: "cpu", Value: plan.CPUType.ValueString()})
	}
	if !plan.Cores.Equal(state.Cores) {
		set = append(set, pveapi.VirtualMachineOption{Name: "cores", Value: plan.Cores.ValueInt64()})
	}
	if !plan.MemoryMB.Equal(state.MemoryMB) {
		set = append(set, pveapi.VirtualMachineOption{Name: "memory", Value: plan.MemoryMB.ValueInt64()})
	}
	if !plan.Bridge.Equal(state.Bridge) {
		set = append(set, pveapi.VirtualMachineOption{Name: "net0", Value: proxmox.WithBridge(vm.VirtualMachineConfig.Nets["net0"], plan.Bridge.ValueString())})
	}
	if len(set) > 0 {
		task, err := vm.Config(ctx, set...)
		if err := pve.Wait(ctx, fmt.Sprintf("configuring VM %d", vmid), task, err); err != nil {
			resp.Diagnostics.Append(pveDiag(pve, fmt.Sprintf("updating VM %d (%s)", vmid, name), err))
			return
		}
	}
	if disk, size := proxmox.BootDisk(vm.VirtualMachineConfig); !plan.DiskGB.IsNull() && !plan.DiskGB.IsUnknown() && disk != "" && plan.DiskGB.ValueInt64() > int64(size) {
		task, err := vm.ResizeDisk(ctx, disk, fmt.Sprintf("%dG", plan.DiskGB.ValueInt64()))
		if err := pve.Wait(ctx, fmt.Sprintf("growing %s of VM %d to %d GiB", disk, vmid, plan.DiskGB.ValueInt64()), task, err); err != nil {
			resp.Diagnostics.Append(pveDiag(pve, fmt.Sprintf("resizing the disk of VM %d (%s)", vmid, name), err))
			return
		}
	}
	plan.ID = state.ID
	plan.CloudInitISO, plan.CloudInitISORemoved = state.CloudInitISO, state.CloudInitISORemoved
	resp.Diagnostics.Append(r.refresh(ctx, pve, &plan)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
	if resp.Diagnostics.HasError() || !plan.WaitForRegistration.ValueBool() || plan.CloudInitISORemoved.ValueBool() || plan.CloudInitISO.ValueString() == "" {
		return
	}
	// The plan promised the ISO's removal: a node that still has not
	// registered fails the apply, with the ISO kept in state. Any session
	// counts here: the machine this VM replaced is long gone.
	_, timedOut, d := r.removeSeedAfterRegistration(ctx, pve, &plan, 0)
	resp.Diagnostics.Append(d...)
	if timedOut {
		resp.Diagnostics.AddError(registrationTimedOut(&plan, node, plan.registrationTimeout(),
			"it is removed by the next apply once the node has registered, or destroy the VM."))
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

// Delete drains the node the VM runs (when the control plane knows it),
// stops the VM, destroys it with its disks, and deletes a cloud-init ISO
// still on the storage.
func (r *proxmoxVMResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	ctx, flush := withTaskWarnings(ctx, &resp.Diagnostics)
	defer flush()
	var state proxmoxVMModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	pve := r.client.proxmox(&resp.Diagnostics)
	if pve == nil {
		return
	}
	name, vmid := state.Name.ValueString(), int(state.VMID.ValueInt64())
	drainTimeout, err := time.ParseDuration(state.DrainTimeout.ValueString())
	if err != nil {
		drainTimeout, _ = time.ParseDuration(defaultVMDrainTimeout)
	}
	if drainTimeout > 0 {
		resp.Diagnostics.Append(drainBeforeStop(ctx, r.client, name, vmid, drainTimeout)...)
		if resp.Diagnostics.HasError() {
			return
		}
	}
	op := fmt.Sprintf("destroying VM %d (%s)", vmid, name)
	where, err := pve.FindVM(ctx, vmid)
	if err != nil {
		resp.Diagnostics.Append(pveDiag(pve, op, err))
		return
	}
	if where != nil {
		vm, err := pve.ReadVM(ctx, where.Node, vmid)
		if err != nil {
			resp.Diagnostics.Append(pveDiag(pve, op, err))
			return
		}
		if vm.Status != pveapi.StatusVirtualMachineStopped {
			task, err := vm.Stop(ctx)
			if err := pve.Wait(ctx, fmt.Sprintf("stopping VM %d", vmid), task, err); err != nil {
				resp.Diagnostics.Append(pveDiag(pve, op, err))
				return
			}
		}
		task, err := vm.Delete(ctx, &pveapi.VirtualMachineDeleteOptions{Purge: true, DestroyUnreferencedDisks: true})
		if err := pve.Wait(ctx, fmt.Sprintf("destroying VM %d", vmid), task, err); err != nil {
			resp.Diagnostics.Append(pveDiag(pve, op, err))
			return
		}
	}
	if volid := state.CloudInitISO.ValueString(); volid != "" && !state.CloudInitISORemoved.ValueBool() {
		node, _, _ := strings.Cut(state.ID.ValueString(), "/")
		if where != nil {
			node = where.Node
		}
		if err := pve.DeleteVolume(ctx, node, volid); err != nil {
			// The VM is gone: an error would keep it in state for good.
			resp.Diagnostics.Append(isoLeftWarning(pve, node, volid, fmt.Sprintf("deleting the cloud-init ISO of destroyed VM %d (%s)", vmid, name), err))
		}
	}
}
