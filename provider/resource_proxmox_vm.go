package provider

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
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
	proxmox "github.com/luthermonson/go-proxmox"

	managev1 "github.com/llmgw/llmgw/api/managev1"
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
	pveISODevice               = "ide2"
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
	WaitForRegistration types.Bool   `tfsdk:"wait_for_registration"`
	RegistrationTimeout types.String `tfsdk:"registration_timeout"`
	DrainTimeout        types.String `tfsdk:"drain_timeout"`
	CloudInitISO        types.String `tfsdk:"cloud_init_iso"`
	CloudInitISORemoved types.Bool   `tfsdk:"cloud_init_iso_removed"`
}

func (r *proxmoxVMResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_proxmox_vm"
}

// configSetAndDiffers is the replace condition of first-boot inputs: the
// configuration sets a value (not null, not empty) and the prior state has
// another. An imported VM's first apply thus records what import could not
// read (the template, the user-data) without rebuilding it, and a value
// import did read (the gateway) that the configuration leaves unset is
// dropped from state, not a reason to rebuild the VM.
func configSetAndDiffers(_ context.Context, req planmodifier.StringRequest, resp *stringplanmodifier.RequiresReplaceIfFuncResponse) {
	set := req.ConfigValue.IsUnknown() || (!req.ConfigValue.IsNull() && req.ConfigValue.ValueString() != "")
	resp.RequiresReplace = set && !req.StateValue.IsNull()
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
			"The first-boot inputs (`clone_from`, `storage`, `address`, `gateway`, `ssh_keys`, `nameservers`, `search_domains`, `user_data`) replace the VM when the configuration sets a value other than the state's; " +
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
				Required:            true,
				MarkdownDescription: "The template to full-clone: its VMID or its name (a cloud image with cloud-init, e.g. Ubuntu 24.04). Changing it replaces the VM.",
				PlanModifiers:       replaceString("Changing the template replaces the VM."),
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
					"It reaches the VM on the uploaded ISO, which is deleted once the node has registered. Changing it replaces the VM.",
				PlanModifiers: replaceString("Changing the user-data replaces the VM."),
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

// listConfigSetAndDiffers is configSetAndDiffers for lists: an empty or
// unset list in the configuration replaces nothing.
func listConfigSetAndDiffers(_ context.Context, req planmodifier.ListRequest, resp *listplanmodifier.RequiresReplaceIfFuncResponse) {
	set := req.ConfigValue.IsUnknown() || (!req.ConfigValue.IsNull() && len(req.ConfigValue.Elements()) > 0)
	resp.RequiresReplace = set && !req.StateValue.IsNull()
}

func (r *proxmoxVMResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.client = clientFrom(req.ProviderData, &resp.Diagnostics)
}

// vmidFromAddress plans vmid as the last octet of address when it is not
// configured. An existing VM keeps its VMID while its address stays: an
// imported VM whose id is not the octet (made by hand, or with vmid set
// before) is not replaced for it.
type vmidFromAddress struct{}

func (vmidFromAddress) Description(context.Context) string {
	return "defaults to the last octet of address; an existing VM keeps its own while the address stays"
}

func (m vmidFromAddress) MarkdownDescription(ctx context.Context) string { return m.Description(ctx) }

func (vmidFromAddress) PlanModifyInt64(ctx context.Context, req planmodifier.Int64Request, resp *planmodifier.Int64Response) {
	if !req.ConfigValue.IsNull() {
		return
	}
	var addr types.String
	if d := req.Plan.GetAttribute(ctx, path.Root("address"), &addr); d.HasError() || addr.IsUnknown() || addr.IsNull() {
		return
	}
	if !req.StateValue.IsNull() && !req.StateValue.IsUnknown() {
		var was types.String
		if d := req.State.GetAttribute(ctx, path.Root("address"), &was); !d.HasError() && (was.IsNull() || was.Equal(addr)) {
			// The address does not replace the VM (an import that read
			// none replaces nothing for it either): keep the VM's id.
			resp.PlanValue = req.StateValue
			return
		}
	}
	id, err := vmidOf(addr.ValueString())
	if err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "No default vmid", err.Error())
		return
	}
	resp.PlanValue = types.Int64Value(int64(id))
}

// vmidOf is the default VMID of an address: its last octet.
func vmidOf(cidr string) (int, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil || !p.Addr().Is4() {
		return 0, fmt.Errorf("vmid defaults to the last octet of address, but address %q is not an IPv4 CIDR: set vmid", cidr)
	}
	last := int(p.Addr().As4()[3])
	if last < pveMinVMID {
		return 0, fmt.Errorf("vmid defaults to the last octet of address %s, %d, but Proxmox VMIDs start at %d: set vmid explicitly (e.g. %d)", cidr, last, pveMinVMID, 1000+last)
	}
	return last, nil
}

// cidrValidator checks an address/prefix.
type cidrValidator struct{}

func (cidrValidator) Description(context.Context) string {
	return "an address with its prefix, like 10.0.0.142/24"
}

func (v cidrValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (cidrValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if _, err := netip.ParsePrefix(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid address",
			fmt.Sprintf("%s: %q is not an address with its prefix; write it like \"10.0.0.142/24\".", req.Path, req.ConfigValue.ValueString()))
	}
}

// ipValidator checks an IP address (no prefix).
type ipValidator struct{}

func (ipValidator) Description(context.Context) string { return "an IP address, like 10.0.0.1" }

func (v ipValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (ipValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if _, err := netip.ParseAddr(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid IP address",
			fmt.Sprintf("%s: %q is not an IP address; write it like \"10.0.0.1\".", req.Path, req.ConfigValue.ValueString()))
	}
}

// cpuTypeWarning is the plan's warning for a CPU model other than host, or
// "" for host.
func cpuTypeWarning(cpu string) string {
	if model, _, _ := strings.Cut(cpu, ","); model == "" || model == defaultPVECPUType {
		return ""
	}
	return fmt.Sprintf("cpu_type = %q hides host CPU features from the guest: with kvm64, qemu64 or the x86-64-v2 models AVX2 is not visible, "+
		"and llama.cpp and other CPU inference run several times slower (7x was measured) while the node looks healthy. "+
		"Use cpu_type = \"host\" unless the VM must live-migrate between different CPUs.", cpu)
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

// isoName is the file name of a VM's cloud-init ISO.
func isoName(vmid int) string { return fmt.Sprintf("llmgw-cidata-%d.iso", vmid) }

// Create clones, configures, grows, seeds and starts the VM, then waits for
// the node to register and removes the seed. From the clone on, the state
// is written after every step, so a failure leaves the VM tracked
// (tainted) rather than orphaned on the hypervisor.
func (r *proxmoxVMResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	ctx, warns := withTaskWarnings(ctx)
	defer func() { resp.Diagnostics.Append(warns.Diagnostics()...) }()
	var plan proxmoxVMModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	pve := r.client.proxmox(&resp.Diagnostics)
	if pve == nil {
		return
	}
	name, node, vmid := plan.Name.ValueString(), plan.TargetNode.ValueString(), int(plan.VMID.ValueInt64())
	keys, d := plan.sshKeys(ctx)
	resp.Diagnostics.Append(d...)
	dns, d := stringList(ctx, plan.Nameservers)
	resp.Diagnostics.Append(d...)
	search, d := stringList(ctx, plan.SearchDomains)
	resp.Diagnostics.Append(d...)
	if resp.Diagnostics.HasError() {
		return
	}
	if _, err := pve.api.Node(ctx, node); err != nil {
		resp.Diagnostics.Append(pve.pveDiag("reading Proxmox node "+node+" (target_node)", err))
		return
	}
	taken, err := pve.findVM(ctx, vmid)
	if err != nil {
		resp.Diagnostics.Append(pve.pveDiag("checking that VMID "+strconv.Itoa(vmid)+" is free", err))
		return
	}
	if taken != nil {
		resp.Diagnostics.AddAttributeError(path.Root("vmid"), fmt.Sprintf("VMID %d is taken", vmid),
			fmt.Sprintf("Proxmox already has VM %d (%q) on node %s. llmgw_proxmox_vm does not adopt a machine on create: to manage that VM, import it with "+
				"`terraform import <address> %s/%d`; to make a new one, set vmid to a free id.", vmid, taken.Name, taken.Node, taken.Node, vmid))
		return
	}
	tmpl, err := pve.findTemplate(ctx, plan.CloneFrom.ValueString())
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("clone_from"), "Template not found", err.Error())
		return
	}
	if want := plan.DiskGB; !want.IsNull() && !want.IsUnknown() {
		t, err := pve.readVM(ctx, tmpl.Node, tmpl.VMID)
		if err != nil {
			resp.Diagnostics.Append(pve.pveDiag(fmt.Sprintf("reading template %d (clone_from)", tmpl.VMID), err))
			return
		}
		if disk, size := bootDisk(t.VirtualMachineConfig); disk != "" && want.ValueInt64() < int64(size) {
			resp.Diagnostics.AddAttributeError(path.Root("disk_gb"), "disk_gb is smaller than the template's disk",
				fmt.Sprintf("disk_gb = %d, but the boot disk %s of template %d (%s) is %d GiB, and Proxmox cannot shrink a disk. Set disk_gb to %d or more, or leave it unset to keep the template's size.",
					want.ValueInt64(), disk, tmpl.VMID, tmpl.Name, size, size))
			return
		}
	}
	opts := &proxmox.VirtualMachineCloneOptions{NewID: vmid, Name: name, Full: true, Storage: plan.Storage.ValueString()}
	if tmpl.Node != node {
		opts.Target = node
	}
	_, task, err := pve.vm(tmpl.Node, tmpl.VMID).Clone(ctx, opts)
	if err != nil {
		resp.Diagnostics.Append(pve.pveDiag(fmt.Sprintf("creating VM %d (%s)", vmid, name), fmt.Errorf("cloning template %d to VM %d: %w", tmpl.VMID, vmid, err)))
		return
	}
	// The VM exists from here, even when waiting for the clone fails: state
	// it now, so a later failure leaves it in state (tainted) rather than
	// orphaned on the hypervisor. A clone that failed and took its VM with
	// it is dropped from state by the next refresh.
	plan.ID = types.StringValue(fmt.Sprintf("%s/%d", node, vmid))
	plan.CloudInitISO = types.StringValue("")
	plan.CloudInitISORemoved = types.BoolValue(true)
	if plan.DiskGB.IsUnknown() {
		plan.DiskGB = types.Int64Null()
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
	if err := pve.wait(ctx, fmt.Sprintf("cloning template %d to VM %d", tmpl.VMID, vmid), task, nil); err != nil {
		resp.Diagnostics.Append(pve.pveDiag(fmt.Sprintf("creating VM %d (%s)", vmid, name), err))
		return
	}

	vm, err := pve.readVM(ctx, node, vmid)
	if err != nil {
		resp.Diagnostics.Append(pve.pveDiag("reading the clone", err))
		return
	}
	disk, size := bootDisk(vm.VirtualMachineConfig)
	seed := cloudInit{Hostname: name, VMID: vmid, UserData: plan.UserData.ValueString(), SSHKeys: keys, Address: plan.Address.ValueString(), Gateway: plan.Gateway.ValueString(),
		Nameservers: dns, SearchDomains: search}
	iso, err := seed.iso()
	if err != nil {
		resp.Diagnostics.AddError("Cannot build the cloud-init ISO", err.Error())
		return
	}
	isoStorage := plan.ISOStorage.ValueString()
	volid := isoStorage + ":iso/" + isoName(vmid)
	if err := pve.uploadISO(ctx, node, isoStorage, isoName(vmid), iso); err != nil {
		resp.Diagnostics.Append(pve.pveDiag(fmt.Sprintf("uploading the cloud-init ISO of VM %d", vmid), err))
		return
	}
	plan.CloudInitISO = types.StringValue(volid)
	plan.CloudInitISORemoved = types.BoolValue(false)
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)

	net0 := "virtio,bridge=" + plan.Bridge.ValueString()
	if cur := vm.VirtualMachineConfig.Nets["net0"]; cur != "" {
		net0 = withBridge(cur, plan.Bridge.ValueString())
	}
	set := []proxmox.VirtualMachineOption{
		{Name: "cpu", Value: plan.CPUType.ValueString()},
		{Name: "cores", Value: plan.Cores.ValueInt64()},
		{Name: "memory", Value: plan.MemoryMB.ValueInt64()},
		{Name: "net0", Value: net0},
		{Name: "ipconfig0", Value: plan.ipconfig0()},
		{Name: pveISODevice, Value: volid + ",media=cdrom"},
	}
	if len(keys) > 0 {
		set = append(set, proxmox.VirtualMachineOption{Name: "sshkeys", Value: proxmox.EncodeSSHKeys(keys...)})
	}
	if len(dns) > 0 {
		set = append(set, proxmox.VirtualMachineOption{Name: "nameserver", Value: strings.Join(dns, " ")})
	}
	if len(search) > 0 {
		set = append(set, proxmox.VirtualMachineOption{Name: "searchdomain", Value: strings.Join(search, " ")})
	}
	if drives := cloudInitDrives(vm.VirtualMachineConfig); len(drives) > 0 {
		// The template's own cloud-init drive would be a second cidata
		// volume, which NoCloud may read instead of the seed.
		set = append(set, proxmox.VirtualMachineOption{Name: "delete", Value: strings.Join(drives, ",")})
	}
	task, err = vm.Config(ctx, set...)
	if err := pve.wait(ctx, fmt.Sprintf("configuring VM %d", vmid), task, err); err != nil {
		resp.Diagnostics.Append(pve.pveDiag(fmt.Sprintf("configuring VM %d (%s)", vmid, name), err))
		return
	}
	if want := plan.DiskGB.ValueInt64(); !plan.DiskGB.IsNull() && disk != "" && want > int64(size) {
		task, err := vm.ResizeDisk(ctx, disk, fmt.Sprintf("%dG", want))
		if err := pve.wait(ctx, fmt.Sprintf("growing %s of VM %d to %d GiB", disk, vmid, want), task, err); err != nil {
			resp.Diagnostics.Append(pve.pveDiag(fmt.Sprintf("resizing the disk of VM %d (%s)", vmid, name), err))
			return
		}
	}
	var before int64
	if plan.WaitForRegistration.ValueBool() {
		if before, err = sessionBefore(ctx, r.client, name); err != nil {
			resp.Diagnostics.Append(r.client.Diag("reading node "+name+" before starting VM "+strconv.Itoa(vmid), err))
			return
		}
	}
	task, err = vm.Start(ctx)
	if err := pve.wait(ctx, fmt.Sprintf("starting VM %d", vmid), task, err); err != nil {
		resp.Diagnostics.Append(pve.pveDiag(fmt.Sprintf("starting VM %d (%s)", vmid, name), err))
		return
	}
	resp.Diagnostics.Append(r.refresh(ctx, pve, &plan)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
	if resp.Diagnostics.HasError() || !plan.WaitForRegistration.ValueBool() {
		return
	}
	n, timedOut, d := r.removeSeedAfterRegistration(ctx, pve, &plan, before)
	// The VM is made and running: a failure to remove its ISO (a token
	// without Datastore.Allocate, say) must not taint it. The state keeps
	// the ISO and the next plan removes it again.
	resp.Diagnostics.Append(asWarnings(d)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
	switch {
	case timedOut:
		// Not an error: that would taint the VM and the next apply would
		// replace a machine that may only be slow to boot. The next plan
		// removes the ISO instead (ModifyPlan), once the node registered.
		then := "the next `terraform apply` removes it once the node has registered (the VM is kept), or destroy the VM."
		if n.GetDraining() {
			then += fmt.Sprintf(" Node %s is still draining (from the machine this VM replaces): once it serves again, `llmgw ctl drain %s --cancel`.", name, name)
		}
		resp.Diagnostics.AddWarning(registrationTimedOut(&plan, node, plan.registrationTimeout(), then))
	case !resp.Diagnostics.HasError() && n.GetDraining():
		// A replacement: the destroy of the machine before drained the
		// node, and this VM's agent is the node now.
		if _, err := r.client.CancelDrain(ctx, name); err != nil && !IsNotFound(err) {
			resp.Diagnostics.AddWarning(fmt.Sprintf("Node %s is still draining", name),
				fmt.Sprintf("VM %d registered as node %s, which was drained when the machine it replaces was destroyed, but cancelling the drain failed: %v. "+
					"Run `llmgw ctl drain %s --cancel` so that it takes work again.", vmid, name, err, name))
		}
	}
}

// bootDisk is the VM's boot disk (the first disk of boot order, else the
// first of scsi0, virtio0, sata0, ide0) and its size in GiB.
func bootDisk(cfg *proxmox.VirtualMachineConfig) (string, int) {
	disks := map[string]string{}
	for _, m := range []map[string]string{cfg.SCSIs, cfg.VirtIOs, cfg.SATAs, cfg.IDEs} {
		for k, v := range m {
			if !strings.Contains(v, "media=cdrom") && !strings.Contains(v, "cloudinit") {
				disks[k] = v
			}
		}
	}
	var order []string
	if o, ok := strings.CutPrefix(cfg.Boot, "order="); ok {
		order = strings.Split(o, ";")
	}
	order = append(order, "scsi0", "virtio0", "sata0", "ide0")
	for _, d := range order {
		if v, ok := disks[d]; ok {
			return d, diskSizeGiB(v)
		}
	}
	return "", 0
}

var diskSizeRE = regexp.MustCompile(`(?:^|,)size=(\d+(?:\.\d+)?)([KMGT]?)`)

// diskSizeGiB reads size= of a disk's configuration, in whole GiB.
func diskSizeGiB(v string) int {
	m := diskSizeRE.FindStringSubmatch(v)
	if m == nil {
		return 0
	}
	f, _ := strconv.ParseFloat(m[1], 64)
	switch m[2] {
	case "T":
		f *= 1024
	case "M":
		f /= 1024
	case "K":
		f /= 1024 * 1024
	case "":
		f /= 1024 * 1024 * 1024
	}
	return int(f)
}

// cloudInitDrives are the VM's Proxmox cloud-init drives (a value naming a
// …-cloudinit volume) other than on ide2, where the seed replaces one,
// sorted.
func cloudInitDrives(cfg *proxmox.VirtualMachineConfig) []string {
	var out []string
	for k, v := range cfg.MergeDisks() {
		if k != pveISODevice && strings.Contains(v, "cloudinit") {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// seedISOOf is the volume of an llmgw cloud-init ISO (llmgw-cidata-*.iso)
// attached to the VM, or "".
func seedISOOf(cfg *proxmox.VirtualMachineConfig) string {
	for _, m := range []map[string]string{cfg.IDEs, cfg.SATAs, cfg.SCSIs} {
		for _, v := range m {
			vol, _, _ := strings.Cut(v, ",")
			if _, file, ok := strings.Cut(vol, ":iso/"); ok && strings.HasPrefix(file, "llmgw-cidata-") && strings.HasSuffix(file, ".iso") {
				return vol
			}
		}
	}
	return ""
}

// withBridge is a net0 value with its bridge replaced (model and MAC kept).
func withBridge(net0, bridge string) string {
	parts := strings.Split(net0, ",")
	found := false
	for i, p := range parts {
		if strings.HasPrefix(p, "bridge=") {
			parts[i], found = "bridge="+bridge, true
		}
	}
	if !found {
		parts = append(parts, "bridge="+bridge)
	}
	return strings.Join(parts, ",")
}

// bridgeOf is the bridge of a net0 value.
func bridgeOf(net0 string) string {
	for _, p := range strings.Split(net0, ",") {
		if b, ok := strings.CutPrefix(p, "bridge="); ok {
			return b
		}
	}
	return ""
}

// refresh reads the VM into m: where it is, what matters of its
// configuration (CPU model, cores, memory, disk size, bridge), whether the
// cloud-init ISO is still attached, and, for an imported VM, the name and
// network settings import could not know. It returns found = false in m.ID
// = "" when the VM is gone.
func (r *proxmoxVMResource) refresh(ctx context.Context, pve *PVE, m *proxmoxVMModel) diag.Diagnostics {
	var diags diag.Diagnostics
	vmid := int(m.VMID.ValueInt64())
	where, err := pve.findVM(ctx, vmid)
	if err != nil {
		diags.Append(pve.pveDiag(fmt.Sprintf("reading VM %d", vmid), err))
		return diags
	}
	if where == nil {
		m.ID = types.StringValue("")
		return diags
	}
	vm, err := pve.readVM(ctx, where.Node, vmid)
	if err != nil {
		diags.Append(pve.pveDiag(fmt.Sprintf("reading VM %d", vmid), err))
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
	if _, size := bootDisk(cfg); size > 0 {
		m.DiskGB = types.Int64Value(int64(size))
	}
	if net0 := cfg.Nets["net0"]; net0 != "" {
		m.Bridge = types.StringValue(bridgeOf(net0))
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
		// never registered) is recorded, and removed once it does.
		m.CloudInitISO = types.StringValue("")
		m.CloudInitISORemoved = types.BoolValue(true)
		if v := seedISOOf(cfg); v != "" {
			m.CloudInitISO = types.StringValue(v)
			m.CloudInitISORemoved = types.BoolValue(false)
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

// sessionAfter reports whether n's agent has a session now that started
// after the session seen before the VM was started (after, Unix ms of the
// control plane's clock; 0 when none was seen). An entry of the machine
// the VM replaces, still ready or draining within its grace period, does
// not count: its session is the old one, or none.
func sessionAfter(n *managev1.Node, after int64) bool {
	return n != nil && n.GetConnected() && n.GetConnectedSinceUnixMs() > after
}

// sessionBefore is the start of node name's latest session as the control
// plane knows it now (0 when it knows none): read just before the VM
// starts, it is what the VM's own agent's session must be newer than.
func sessionBefore(ctx context.Context, c *Client, name string) (int64, error) {
	n, err := c.GetNode(ctx, name)
	if IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return n.GetConnectedSinceUnixMs(), nil
}

// registrationTimedOut is the message of a node that did not register
// within timeout: what to look at, and what becomes of the ISO.
func registrationTimedOut(m *proxmoxVMModel, node string, timeout time.Duration, then string) (summary, detail string) {
	name, vmid := m.Name.ValueString(), m.VMID.ValueInt64()
	return fmt.Sprintf("Node %s did not register", name),
		fmt.Sprintf("VM %d (%s) is running, but no new agent session with the identity %s reached the control plane within %s. "+
			"Look at the VM's console or `cloud-init status --long` and the agent's journal (`journalctl -u llmgw-agent`). "+
			"The cloud-init ISO %s, which holds the node's private key, is still attached; %s "+
			"Raise registration_timeout for slow first boots, or set wait_for_registration = false.",
			vmid, node, name, timeout, m.CloudInitISO.ValueString(), then)
}

// removeSeedAfterRegistration waits until the node named m.Name has a
// session newer than after (sessionAfter), then detaches the cloud-init ISO
// and deletes it, recording that in m. It returns the node as last read;
// timedOut (with no diagnostics) when registration_timeout passed first,
// the ISO left attached.
func (r *proxmoxVMResource) removeSeedAfterRegistration(ctx context.Context, pve *PVE, m *proxmoxVMModel, after int64) (n *managev1.Node, timedOut bool, diags diag.Diagnostics) {
	name, vmid := m.Name.ValueString(), int(m.VMID.ValueInt64())
	node, _, _ := strings.Cut(m.ID.ValueString(), "/")
	volid := m.CloudInitISO.ValueString()
	deadline := time.Now().Add(m.registrationTimeout())
	tick := time.NewTicker(nodePollInterval)
	defer tick.Stop()
	for {
		var err error
		n, err = r.client.GetNode(ctx, name)
		if err == nil && sessionAfter(n, after) {
			break
		}
		if err != nil && !IsNotFound(err) {
			diags.Append(r.client.Diag("waiting for node "+name+" to register", err))
			return n, false, diags
		}
		if time.Now().After(deadline) {
			return n, true, diags
		}
		select {
		case <-ctx.Done():
			diags.AddError(fmt.Sprintf("Interrupted while waiting for node %s to register", name), ctx.Err().Error())
			return n, false, diags
		case <-tick.C:
		}
	}
	vm := pve.vm(node, vmid)
	task, err := vm.Config(ctx, proxmox.VirtualMachineOption{Name: pveISODevice, Value: "none,media=cdrom"})
	if err := pve.wait(ctx, fmt.Sprintf("detaching %s from VM %d", volid, vmid), task, err); err != nil {
		diags.Append(pve.pveDiag(fmt.Sprintf("removing the cloud-init ISO of VM %d (%s)", vmid, name), err))
		return n, false, diags
	}
	if err := pve.deleteVolume(ctx, node, volid); err != nil {
		diags.Append(pve.pveDiag(fmt.Sprintf("removing the cloud-init ISO of VM %d (%s)", vmid, name), err))
		return n, false, diags
	}
	m.CloudInitISO = types.StringValue("")
	m.CloudInitISORemoved = types.BoolValue(true)
	return n, false, diags
}

// registrationTimeout is registration_timeout, or its default.
func (m proxmoxVMModel) registrationTimeout() time.Duration {
	timeout, err := time.ParseDuration(m.RegistrationTimeout.ValueString())
	if err != nil {
		timeout, _ = time.ParseDuration(defaultRegistrationTimeout)
	}
	return timeout
}

func (r *proxmoxVMResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	ctx, warns := withTaskWarnings(ctx)
	defer func() { resp.Diagnostics.Append(warns.Diagnostics()...) }()
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
	ctx, warns := withTaskWarnings(ctx)
	defer func() { resp.Diagnostics.Append(warns.Diagnostics()...) }()
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
	vm, err := pve.readVM(ctx, node, vmid)
	if err != nil {
		resp.Diagnostics.Append(pve.pveDiag(fmt.Sprintf("updating VM %d (%s)", vmid, name), err))
		return
	}
	var set []proxmox.VirtualMachineOption
	if !plan.CPUType.Equal(state.CPUType) {
		set = append(set, proxmox.VirtualMachineOption{Name: "cpu", Value: plan.CPUType.ValueString()})
	}
	if !plan.Cores.Equal(state.Cores) {
		set = append(set, proxmox.VirtualMachineOption{Name: "cores", Value: plan.Cores.ValueInt64()})
	}
	if !plan.MemoryMB.Equal(state.MemoryMB) {
		set = append(set, proxmox.VirtualMachineOption{Name: "memory", Value: plan.MemoryMB.ValueInt64()})
	}
	if !plan.Bridge.Equal(state.Bridge) {
		set = append(set, proxmox.VirtualMachineOption{Name: "net0", Value: withBridge(vm.VirtualMachineConfig.Nets["net0"], plan.Bridge.ValueString())})
	}
	if len(set) > 0 {
		task, err := vm.Config(ctx, set...)
		if err := pve.wait(ctx, fmt.Sprintf("configuring VM %d", vmid), task, err); err != nil {
			resp.Diagnostics.Append(pve.pveDiag(fmt.Sprintf("updating VM %d (%s)", vmid, name), err))
			return
		}
	}
	if disk, size := bootDisk(vm.VirtualMachineConfig); !plan.DiskGB.IsNull() && !plan.DiskGB.IsUnknown() && disk != "" && plan.DiskGB.ValueInt64() > int64(size) {
		task, err := vm.ResizeDisk(ctx, disk, fmt.Sprintf("%dG", plan.DiskGB.ValueInt64()))
		if err := pve.wait(ctx, fmt.Sprintf("growing %s of VM %d to %d GiB", disk, vmid, plan.DiskGB.ValueInt64()), task, err); err != nil {
			resp.Diagnostics.Append(pve.pveDiag(fmt.Sprintf("resizing the disk of VM %d (%s)", vmid, name), err))
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
	ctx, warns := withTaskWarnings(ctx)
	defer func() { resp.Diagnostics.Append(warns.Diagnostics()...) }()
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
	where, err := pve.findVM(ctx, vmid)
	if err != nil {
		resp.Diagnostics.Append(pve.pveDiag(op, err))
		return
	}
	if where != nil {
		vm, err := pve.readVM(ctx, where.Node, vmid)
		if err != nil {
			resp.Diagnostics.Append(pve.pveDiag(op, err))
			return
		}
		if vm.Status != proxmox.StatusVirtualMachineStopped {
			task, err := vm.Stop(ctx)
			if err := pve.wait(ctx, fmt.Sprintf("stopping VM %d", vmid), task, err); err != nil {
				resp.Diagnostics.Append(pve.pveDiag(op, err))
				return
			}
		}
		task, err := vm.Delete(ctx, &proxmox.VirtualMachineDeleteOptions{Purge: true, DestroyUnreferencedDisks: true})
		if err := pve.wait(ctx, fmt.Sprintf("destroying VM %d", vmid), task, err); err != nil {
			resp.Diagnostics.Append(pve.pveDiag(op, err))
			return
		}
	}
	if volid := state.CloudInitISO.ValueString(); volid != "" && !state.CloudInitISORemoved.ValueBool() {
		node, _, _ := strings.Cut(state.ID.ValueString(), "/")
		if where != nil {
			node = where.Node
		}
		if err := pve.deleteVolume(ctx, node, volid); err != nil {
			// The VM is gone: an error would keep it in state for good.
			resp.Diagnostics.Append(isoLeftWarning(pve, node, volid, fmt.Sprintf("deleting the cloud-init ISO of destroyed VM %d (%s)", vmid, name), err))
		}
	}
}

// asWarnings is diags with every error made a warning.
func asWarnings(diags diag.Diagnostics) diag.Diagnostics {
	out := make(diag.Diagnostics, 0, len(diags))
	for _, d := range diags {
		if d.Severity() == diag.SeverityError {
			d = diag.NewWarningDiagnostic(d.Summary(), d.Detail()+"\n\nThe VM is kept; the next apply removes its cloud-init ISO again.")
		}
		out = append(out, d)
	}
	return out
}

// isoLeftWarning is the warning for a cloud-init ISO that could not be
// deleted: Proxmox's reason, and how to delete it by hand, since it holds
// the node's private key.
func isoLeftWarning(pve *PVE, node, volid, op string, err error) diag.Diagnostic {
	summary, detail := explainPVE(pve.endpoint, op, err)
	return diag.NewWarningDiagnostic("The cloud-init ISO "+volid+" is still on the hypervisor",
		fmt.Sprintf("%s: %s\n\n%s\n\nIt holds the node's private key: delete it by hand on %s with `pvesm free %s` "+
			"(the API token needs Datastore.Allocate on the storage to delete volumes).", summary, detail, node, node, volid))
}

// drainBeforeStop drains node name, which VM vmid runs, and waits until it
// holds no replica; a node the control plane does not know (never
// registered, or already removed by llmgw_node's destroy) has nothing to
// move. On timeout it names the replicas still on the node.
func drainBeforeStop(ctx context.Context, c *Client, name string, vmid int, timeout time.Duration) diag.Diagnostics {
	var diags diag.Diagnostics
	if _, err := c.DrainNode(ctx, name); IsNotFound(err) {
		return nil
	} else if err != nil {
		diags.Append(c.Diag(fmt.Sprintf("draining node %s before stopping VM %d", name, vmid), err))
		return diags
	}
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(nodePollInterval)
	defer tick.Stop()
	for {
		n, err := c.GetNode(ctx, name)
		if IsNotFound(err) || (err == nil && n.GetReplicas() == 0) {
			return nil
		}
		if err != nil {
			diags.Append(c.Diag(fmt.Sprintf("waiting for the drain of node %s before stopping VM %d", name, vmid), err))
			return diags
		}
		if time.Now().After(deadline) {
			diags.AddError(fmt.Sprintf("Timed out draining node %s before stopping VM %d", name, vmid),
				fmt.Sprintf("After %s node %s still holds %s (their replacements are not ready elsewhere yet; `llmgw ctl explain-placement MODEL` says why). "+
					"VM %d was not stopped and the node stays draining.\n\n"+
					"Make room on other nodes or raise drain_timeout, and destroy again; `llmgw ctl drain %s --cancel` puts the node back in service.",
					timeout, name, remainingReplicas(ctx, c, name, n.GetReplicas()), vmid, name))
			return diags
		}
		select {
		case <-ctx.Done():
			diags.AddError(fmt.Sprintf("Interrupted while draining node %s", name), ctx.Err().Error())
			return diags
		case <-tick.C:
		}
	}
}

// remainingReplicas names the live replicas with a shard on node, like
// "replica sim-chat-1 of sim-chat (ready)"; count is what GetNode said,
// used when the list cannot be read.
func remainingReplicas(ctx context.Context, c *Client, node string, count int32) string {
	all, err := c.ListReplicas(ctx, "")
	if err != nil {
		return fmt.Sprintf("%d replicas", count)
	}
	var names []string
	for _, r := range all {
		if r.GetState() == "failed" || r.GetState() == "stopping" {
			continue
		}
		for _, sh := range r.GetShards() {
			if sh.GetNode() == node {
				names = append(names, fmt.Sprintf("replica %s of %s (%s)", r.GetId(), r.GetModel(), r.GetState()))
				break
			}
		}
	}
	if len(names) == 0 {
		return fmt.Sprintf("%d replicas", count)
	}
	return strings.Join(names, ", ")
}
