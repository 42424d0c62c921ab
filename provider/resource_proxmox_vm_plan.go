package provider

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// llmgw_proxmox_vm at plan time: when a change replaces the VM, the
// default VMID, and the checks of addresses and the CPU model.

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

// listConfigSetAndDiffers is configSetAndDiffers for lists: an empty or
// unset list in the configuration replaces nothing.
func listConfigSetAndDiffers(_ context.Context, req planmodifier.ListRequest, resp *listplanmodifier.RequiresReplaceIfFuncResponse) {
	set := req.ConfigValue.IsUnknown() || (!req.ConfigValue.IsNull() && len(req.ConfigValue.Elements()) > 0)
	resp.RequiresReplace = set && !req.StateValue.IsNull()
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
