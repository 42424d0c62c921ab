package provider

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// durationValidator checks that a string parses as a Go duration ("90s",
// "5m", "1h30m"), positive unless allowZero.
type durationValidator struct {
	allowZero bool
}

func (v durationValidator) Description(context.Context) string {
	if v.allowZero {
		return "a duration such as 30s, 5m or 1h30m, not negative"
	}
	return "a positive duration such as 30s, 5m or 1h30m"
}

func (v durationValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v durationValidator) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if msg := v.check(req.ConfigValue.ValueString()); msg != "" {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid duration", fmt.Sprintf("%s: %s.", req.Path, msg))
	}
}

// check returns what is wrong with s, or "".
func (v durationValidator) check(s string) string {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return fmt.Sprintf("cannot parse %q as a duration; write it like \"30s\", \"5m\" or \"1h30m\"", s)
	case d < 0:
		return fmt.Sprintf("%q is negative", s)
	case d == 0 && !v.allowZero:
		return fmt.Sprintf("%q must be positive", s)
	}
	return ""
}

// maxDefaultsToMin plans scaling.max as scaling.min when max is left out,
// as the control plane's Normalize does.
type maxDefaultsToMin struct{}

func (maxDefaultsToMin) Description(context.Context) string {
	return "defaults to scaling.min when not set"
}

func (m maxDefaultsToMin) MarkdownDescription(ctx context.Context) string { return m.Description(ctx) }

func (maxDefaultsToMin) PlanModifyInt64(ctx context.Context, req planmodifier.Int64Request, resp *planmodifier.Int64Response) {
	if !req.ConfigValue.IsNull() {
		return
	}
	var lowest types.Int64
	if d := req.Plan.GetAttribute(ctx, req.Path.ParentPath().AtName("min"), &lowest); d.HasError() || lowest.IsUnknown() || lowest.IsNull() {
		return
	}
	resp.PlanValue = lowest
}

// scalingBoundsValidator checks scaling.min ≤ scaling.max when both are set.
type scalingBoundsValidator struct{}

func (scalingBoundsValidator) Description(context.Context) string {
	return "scaling.max must not be less than scaling.min"
}

func (v scalingBoundsValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (scalingBoundsValidator) ValidateResource(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var scaling types.Object
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("scaling"), &scaling)...)
	attrs := objectAttrs(scaling)
	lo, hi := attrInt64(attrs, "min"), attrInt64(attrs, "max")
	if lo.IsNull() || lo.IsUnknown() || hi.IsNull() || hi.IsUnknown() {
		return
	}
	if hi.ValueInt64() < lo.ValueInt64() {
		resp.Diagnostics.AddAttributeError(path.Root("scaling").AtName("max"), "scaling.max is less than scaling.min",
			fmt.Sprintf("scaling.max %d is less than scaling.min %d: raise max, or lower min.", hi.ValueInt64(), lo.ValueInt64()))
	}
}

// profileRulesValidator checks the rules between a profile's attributes:
// tp ≥ 1 when gpu_class is set, launch_mode only for vllm, and names unique
// within the model.
type profileRulesValidator struct{}

func (profileRulesValidator) Description(context.Context) string {
	return "profiles: tp at least 1 with a gpu_class, launch_mode only for vllm, unique names"
}

func (v profileRulesValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (profileRulesValidator) ValidateResource(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var profiles types.List
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("profiles"), &profiles)...)
	if profiles.IsNull() || profiles.IsUnknown() {
		return
	}
	seen := map[string]int{}
	for i, e := range profiles.Elements() {
		o, ok := e.(types.Object)
		if !ok || o.IsNull() || o.IsUnknown() {
			continue
		}
		// Read from the attribute map: As's reflection is the dearest part
		// of validating a model, and a plan validates every model.
		attrs := o.Attributes()
		p := profileModel{
			Name: attrString(attrs, "name"), Engine: attrString(attrs, "engine"), GPUClass: attrString(attrs, "gpu_class"),
			TP: attrInt64(attrs, "tp"), LaunchMode: attrString(attrs, "launch_mode"),
		}
		at := path.Root("profiles").AtListIndex(i)
		if !p.GPUClass.IsNull() && !p.GPUClass.IsUnknown() && p.GPUClass.ValueString() != "" && !p.TP.IsNull() && !p.TP.IsUnknown() && p.TP.ValueInt64() < 1 {
			resp.Diagnostics.AddAttributeError(at.AtName("tp"), "tp must be at least 1 with a gpu_class",
				fmt.Sprintf("profiles[%d] runs on GPU class %q with tp %d: set tp to the GPUs per node one replica uses.", i, p.GPUClass.ValueString(), p.TP.ValueInt64()))
		}
		if !p.LaunchMode.IsNull() && !p.LaunchMode.IsUnknown() && !p.Engine.IsUnknown() && p.Engine.ValueString() != "vllm" {
			resp.Diagnostics.AddAttributeError(at.AtName("launch_mode"), "launch_mode is only for vllm",
				fmt.Sprintf("profiles[%d] uses engine %s, which takes no launch_mode: remove it.", i, p.Engine.ValueString()))
		}
		if p.Name.IsUnknown() || p.Name.IsNull() {
			continue
		}
		if j, dup := seen[p.Name.ValueString()]; dup {
			resp.Diagnostics.AddAttributeError(at.AtName("name"), "Duplicate profile name",
				fmt.Sprintf("profiles[%d] is named %q like profiles[%d]: profile names are unique within a model.", i, p.Name.ValueString(), j))
		} else {
			seen[p.Name.ValueString()] = i
		}
	}
}
