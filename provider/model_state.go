package provider

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/spec"
)

// reader reads Terraform values into Go values, noting whether every value
// was known.
type reader struct {
	ctx     context.Context
	unknown bool
}

func (r *reader) str(v types.String) string {
	r.unknown = r.unknown || v.IsUnknown()
	return v.ValueString()
}

func (r *reader) num(v types.Int64) int {
	r.unknown = r.unknown || v.IsUnknown()
	return int(v.ValueInt64())
}

func (r *reader) dur(v types.String) spec.Duration {
	d, _ := time.ParseDuration(r.str(v)) // the schema's validator has checked it
	return spec.Duration(d)
}

func (r *reader) list(v types.List) []string {
	if v.IsUnknown() {
		r.unknown = true
		return nil
	}
	var out []string
	for _, e := range v.Elements() {
		s, ok := e.(types.String)
		if !ok {
			continue
		}
		out = append(out, r.str(s))
	}
	return out
}

func (r *reader) dict(v types.Map) map[string]string {
	if v.IsUnknown() {
		r.unknown = true
		return nil
	}
	if v.IsNull() {
		return nil
	}
	out := map[string]string{}
	for k, e := range v.Elements() {
		if s, ok := e.(types.String); ok {
			out[k] = r.str(s)
		}
	}
	return out
}

func (r *reader) object(v types.Object, target any) bool {
	if v.IsUnknown() {
		r.unknown = true
		return false
	}
	if v.IsNull() {
		return false
	}
	return !v.As(r.ctx, target, basetypes.ObjectAsOptions{}).HasError()
}

// toCatalog is the planned or stored definition as the catalog's Model; the
// second result is false when some attribute is not known yet.
func (m modelResourceModel) toCatalog(ctx context.Context) (spec.Model, bool) {
	r := &reader{ctx: ctx}
	out := spec.Model{
		Name:           r.str(m.Name),
		Aliases:        r.list(m.Aliases),
		Source:         r.str(m.Source),
		RoutingProfile: r.str(m.RoutingProfile),
		ContextLength:  r.num(m.ContextLength),
		MaxOutput:      r.num(m.MaxOutput),
	}
	if m.Pricing.IsUnknown() {
		r.unknown = true
	} else if attrs := objectAttrs(m.Pricing); attrs != nil {
		prompt, completion := attrFloat64(attrs, "prompt_per_1k"), attrFloat64(attrs, "completion_per_1k")
		r.unknown = r.unknown || prompt.IsUnknown() || completion.IsUnknown()
		out.Pricing = &spec.Pricing{PromptPer1K: prompt.ValueFloat64(), CompletionPer1K: completion.ValueFloat64()}
	}
	var s scalingModel
	if r.object(m.Scaling, &s) {
		out.Scaling = spec.Scaling{Min: r.num(s.Min), Max: r.num(s.Max), IdleTimeout: r.dur(s.IdleTimeout)}
	}
	if m.Profiles.IsUnknown() {
		return out, false
	}
	for _, e := range m.Profiles.Elements() {
		o, ok := e.(types.Object)
		var p profileModel
		if !ok || !r.object(o, &p) {
			r.unknown = r.unknown || o.IsUnknown()
			continue
		}
		out.Profiles = append(out.Profiles, spec.Profile{
			Name: r.str(p.Name), Engine: r.str(p.Engine), GPUClass: r.str(p.GPUClass),
			TP: r.num(p.TP), Nodes: r.num(p.Nodes), Weight: r.num(p.Weight), Priority: r.num(p.Priority),
			StartupTimeout: r.dur(p.StartupTimeout), MinMemoryGB: r.num(p.MinMemoryGB), MinDiskGB: r.num(p.MinDiskGB),
			Labels: r.dict(p.Labels), Args: r.list(p.Args), Env: r.dict(p.Env), LaunchMode: r.str(p.LaunchMode),
		})
	}
	return out, !r.unknown
}

// The from* helpers build state values from what the API returned. Where
// the API cannot tell an empty value from a missing one, or spells a
// duration its own way, the prior value (config, plan or state) is kept so
// that a plan after apply is empty.

func fromString(v string, prior types.String) types.String {
	if v == "" && (prior.IsNull() || prior.IsUnknown()) {
		return types.StringNull()
	}
	return types.StringValue(v)
}

func fromDuration(v string, prior types.String) types.String {
	if !prior.IsNull() && !prior.IsUnknown() {
		p, perr := time.ParseDuration(prior.ValueString())
		d, derr := time.ParseDuration(v)
		if v == "" {
			d, derr = 0, nil
		}
		if perr == nil && derr == nil && p == d {
			return prior
		}
	}
	return fromString(v, prior)
}

func fromList(v []string, prior types.List) types.List {
	if len(v) == 0 && (prior.IsNull() || prior.IsUnknown()) {
		return types.ListNull(types.StringType)
	}
	vals := make([]attr.Value, 0, len(v))
	for _, s := range v {
		vals = append(vals, types.StringValue(s))
	}
	return types.ListValueMust(types.StringType, vals)
}

func fromMap(v map[string]string, prior types.Map) types.Map {
	if len(v) == 0 && (prior.IsNull() || prior.IsUnknown()) {
		return types.MapNull(types.StringType)
	}
	vals := make(map[string]attr.Value, len(v))
	for _, k := range slices.Sorted(maps.Keys(v)) {
		vals[k] = types.StringValue(v[k])
	}
	return types.MapValueMust(types.StringType, vals)
}

// objectAttrs is a known object's attributes; nil for a null or unknown one.
func objectAttrs(o types.Object) map[string]attr.Value {
	if o.IsNull() || o.IsUnknown() {
		return nil
	}
	return o.Attributes()
}

// attrString, attrInt64, attrList and attrMap are attribute k of attrs; null when it is
// missing (attrs nil included) or of another type.
func attrString(attrs map[string]attr.Value, k string) types.String {
	if v, ok := attrs[k].(types.String); ok {
		return v
	}
	return types.StringNull()
}

func attrInt64(attrs map[string]attr.Value, k string) types.Int64 {
	if v, ok := attrs[k].(types.Int64); ok {
		return v
	}
	return types.Int64Null()
}

func attrFloat64(attrs map[string]attr.Value, k string) types.Float64 {
	if v, ok := attrs[k].(types.Float64); ok {
		return v
	}
	return types.Float64Null()
}

func attrList(attrs map[string]attr.Value, k string) types.List {
	if v, ok := attrs[k].(types.List); ok {
		return v
	}
	return types.ListNull(types.StringType)
}

func attrMap(attrs map[string]attr.Value, k string) types.Map {
	if v, ok := attrs[k].(types.Map); ok {
		return v
	}
	return types.MapNull(types.StringType)
}

// fromAPI is the state for the model the control plane returned; prior
// supplies the resource's own settings and the spelling of values the API
// normalizes.
func fromAPI(_ context.Context, pm *managev1.Model, prior modelResourceModel) (modelResourceModel, diag.Diagnostics) {
	var diags diag.Diagnostics
	out := prior
	out.Name = types.StringValue(pm.GetName())
	out.Aliases = fromList(pm.GetAliases(), prior.Aliases)
	out.Source = fromString(pm.GetSource(), prior.Source)
	out.RoutingProfile = types.StringValue(pm.GetRoutingProfile())
	out.ContextLength = types.Int64Value(int64(pm.GetContextLength()))
	out.MaxOutput = types.Int64Value(int64(pm.GetMaxOutput()))

	// The prior's nested values are read from their attribute maps, not
	// with As/ElementsAs: the reflection costs more than the rest of a
	// refresh, and a plan refreshes every model of the catalog.
	sc := pm.GetScaling()
	out.Scaling = types.ObjectValueMust(scalingTypes, map[string]attr.Value{
		"min":          types.Int64Value(int64(sc.GetMin())),
		"max":          types.Int64Value(int64(sc.GetMax())),
		"idle_timeout": fromDuration(sc.GetIdleTimeout(), attrString(objectAttrs(prior.Scaling), "idle_timeout")),
	})

	out.Pricing = types.ObjectNull(pricingTypes)
	if p := pm.GetPricing(); p != nil {
		out.Pricing = types.ObjectValueMust(pricingTypes, map[string]attr.Value{
			"prompt_per_1k":     types.Float64Value(p.GetPromptPer_1K()),
			"completion_per_1k": types.Float64Value(p.GetCompletionPer_1K()),
		})
	}

	var priorProfiles []attr.Value
	if !prior.Profiles.IsNull() && !prior.Profiles.IsUnknown() {
		priorProfiles = prior.Profiles.Elements()
	}
	profileType := types.ObjectType{AttrTypes: profileTypes}
	var profiles []attr.Value
	for i, p := range pm.GetProfiles() {
		var pp map[string]attr.Value // nil: no prior profile, every lookup is null
		if i < len(priorProfiles) {
			if o, ok := priorProfiles[i].(types.Object); ok && attrString(objectAttrs(o), "name").ValueString() == p.GetName() {
				pp = objectAttrs(o)
			}
		}
		profiles = append(profiles, types.ObjectValueMust(profileTypes, map[string]attr.Value{
			"name":            types.StringValue(p.GetName()),
			"engine":          types.StringValue(p.GetEngine()),
			"gpu_class":       fromString(p.GetGpuClass(), attrString(pp, "gpu_class")),
			"tp":              types.Int64Value(int64(p.GetTp())),
			"nodes":           types.Int64Value(int64(p.GetNodes())),
			"weight":          types.Int64Value(int64(p.GetWeight())),
			"priority":        types.Int64Value(int64(p.GetPriority())),
			"startup_timeout": fromDuration(p.GetStartupTimeout(), attrString(pp, "startup_timeout")),
			"min_memory_gb":   types.Int64Value(int64(p.GetMinMemoryGb())),
			"min_disk_gb":     types.Int64Value(int64(p.GetMinDiskGb())),
			"labels":          fromMap(p.GetLabels(), attrMap(pp, "labels")),
			"args":            fromList(p.GetArgs(), attrList(pp, "args")),
			"env":             fromMap(p.GetEnv(), attrMap(pp, "env")),
			"launch_mode":     fromString(p.GetLaunchMode(), attrString(pp, "launch_mode")),
		}))
	}
	out.Profiles = types.ListValueMust(profileType, profiles)

	out.Generation = types.StringValue(pm.GetGeneration())
	out.Origin = types.StringValue(pm.GetOrigin())
	st := pm.GetStatus()
	out.Status = types.ObjectValueMust(statusTypes, map[string]attr.Value{
		"state":            types.StringValue(st.GetState()),
		"message":          types.StringValue(st.GetMessage()),
		"replicas_ready":   types.Int64Value(int64(st.GetReplicasReady())),
		"replicas_desired": types.Int64Value(int64(st.GetReplicasDesired())),
		"replicas_total":   types.Int64Value(int64(st.GetReplicasTotal())),
	})
	if pm.GetName() == "" {
		diags.AddError("Empty answer from the llmgw control plane", fmt.Sprintf("The control plane returned a model without a name for %s. This is a bug; please report it.", prior.Name.ValueString()))
	}
	return out, diags
}
