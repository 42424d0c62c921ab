package provider

// llmgw_model's Terraform values and spec.Model: the provider's one
// conversion each way. read/toSpec take a plan, state or configuration to
// spec; fromSpec writes spec to state. What the control plane answers
// reaches state through specpb.ModelFromProto and then fromSpec, so spec ↔
// protobuf stays in api/specpb.
//
// The flat structs of spec (Profile, Scaling, Pricing) cross field by
// field, each field as the attribute named by its json tag: a new field of
// spec.Profile needs only its attribute in profileSchema here
// (TestNestedSchemasFollowSpec holds the two together).

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/api/specpb"
	"github.com/llmgw/llmgw/spec"
)

// reader reads Terraform values into Go values. It notes, by spec key
// (profiles[1].tp), every value not known yet, every value that is set
// (known and not null), and every duration that does not parse (its own
// validator reports it; spec would only add "must be positive" for the
// zero read in its place).
type reader struct {
	unknown  []string
	set      map[string]bool
	unparsed map[string]bool
}

func newReader() *reader { return &reader{set: map[string]bool{}, unparsed: map[string]bool{}} }

// note records v under key.
func (r *reader) note(key string, v attr.Value) {
	switch {
	case v.IsUnknown():
		r.unknown = append(r.unknown, key)
	case !v.IsNull():
		r.set[key] = true
	}
}

func (r *reader) str(key string, v types.String) string {
	r.note(key, v)
	return v.ValueString()
}

func (r *reader) num(key string, v types.Int64) int {
	r.note(key, v)
	return int(v.ValueInt64())
}

func (r *reader) boolean(key string, v types.Bool) bool {
	r.note(key, v)
	return v.ValueBool()
}

func (r *reader) float(key string, v types.Float64) float64 {
	r.note(key, v)
	return v.ValueFloat64()
}

func (r *reader) dur(key string, v types.String) spec.Duration {
	s := r.str(key, v)
	d, err := time.ParseDuration(s)
	if err != nil && s != "" {
		r.unparsed[key] = true
	}
	return spec.Duration(d)
}

func (r *reader) list(key string, v types.List) []string {
	r.note(key, v)
	if v.IsNull() || v.IsUnknown() {
		return nil
	}
	var out []string
	for i, e := range v.Elements() {
		s, ok := e.(types.String)
		if !ok {
			continue
		}
		out = append(out, r.str(fmt.Sprintf("%s[%d]", key, i), s))
	}
	return out
}

func (r *reader) dict(key string, v types.Map) map[string]string {
	r.note(key, v)
	if v.IsNull() || v.IsUnknown() {
		return nil
	}
	out := map[string]string{}
	for k, e := range v.Elements() {
		if s, ok := e.(types.String); ok {
			if s.IsUnknown() {
				r.unknown = append(r.unknown, key)
			}
			out[k] = s.ValueString()
		}
	}
	return out
}

// field is one field of a flat spec struct and the attribute it crosses
// as: the field's json tag.
type field struct {
	attr  string
	index int
}

var durationType = reflect.TypeFor[spec.Duration]()

// fieldsOf lists the fields of the flat struct type T.
func fieldsOf[T any]() []field {
	t := reflect.TypeFor[T]()
	out := make([]field, 0, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		out = append(out, field{attr: name, index: i})
	}
	return out
}

var (
	profileFields = fieldsOf[spec.Profile]()
	scalingFields = fieldsOf[spec.Scaling]()
	pricingFields = fieldsOf[spec.Pricing]()
)

// readStruct reads an object's attributes (of the spec key key) into the
// flat struct dst points to.
func (r *reader) readStruct(key string, attrs map[string]attr.Value, dst reflect.Value, fields []field) {
	for _, f := range fields {
		k, fv := key+"."+f.attr, dst.Field(f.index)
		if fv.Type() == durationType {
			fv.SetInt(int64(r.dur(k, attrString(attrs, f.attr))))
			continue
		}
		switch fv.Kind() {
		case reflect.String:
			fv.SetString(r.str(k, attrString(attrs, f.attr)))
		case reflect.Int:
			fv.SetInt(int64(r.num(k, attrInt64(attrs, f.attr))))
		case reflect.Bool:
			fv.SetBool(r.boolean(k, attrBool(attrs, f.attr)))
		case reflect.Float64:
			fv.SetFloat(r.float(k, attrFloat64(attrs, f.attr)))
		case reflect.Slice:
			if l := r.list(k, attrList(attrs, f.attr)); l != nil {
				fv.Set(reflect.ValueOf(l))
			}
		case reflect.Map:
			if m := r.dict(k, attrMap(attrs, f.attr)); m != nil {
				fv.Set(reflect.ValueOf(m))
			}
		default:
			panic(fmt.Sprintf("llmgw provider: spec field %s of kind %s has no Terraform form", k, fv.Kind()))
		}
	}
}

// writeStruct is the flat struct src as an object's attributes; prior
// (possibly nil) supplies the spelling of values the API normalizes. An
// empty string, list or map stays null when prior is; a number or a bool
// is always written, so its attribute is Computed with a Default.
func writeStruct(src reflect.Value, fields []field, prior map[string]attr.Value) map[string]attr.Value {
	out := make(map[string]attr.Value, len(fields))
	for _, f := range fields {
		v := src.Field(f.index)
		if v.Type() == durationType {
			out[f.attr] = fromDuration(durationText(spec.Duration(v.Int())), attrString(prior, f.attr))
			continue
		}
		switch v.Kind() {
		case reflect.String:
			out[f.attr] = fromString(v.String(), attrString(prior, f.attr))
		case reflect.Int:
			out[f.attr] = types.Int64Value(v.Int())
		case reflect.Bool:
			out[f.attr] = types.BoolValue(v.Bool())
		case reflect.Float64:
			out[f.attr] = types.Float64Value(v.Float())
		case reflect.Slice:
			out[f.attr] = fromList(v.Interface().([]string), attrList(prior, f.attr))
		case reflect.Map:
			out[f.attr] = fromMap(v.Interface().(map[string]string), attrMap(prior, f.attr))
		default:
			panic(fmt.Sprintf("llmgw provider: spec field %s of kind %s has no Terraform form", f.attr, v.Kind()))
		}
	}
	return out
}

// durationText is a duration as the API and the catalog spell it; "" for
// zero.
func durationText(d spec.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// read is the planned, stored or configured definition as spec's Model,
// with the reader that noted which values are unknown and which are set.
func (m modelResourceModel) read() (spec.Model, *reader) {
	r := newReader()
	out := spec.Model{
		Name:           r.str("name", m.Name),
		Aliases:        r.list("aliases", m.Aliases),
		Source:         r.str("source", m.Source),
		RoutingProfile: r.str("routing_profile", m.RoutingProfile),
		Rollout:        autoIsDefault(r.str("rollout", m.Rollout)),
		ContextLength:  r.num("context_length", m.ContextLength),
		MaxOutput:      r.num("max_output", m.MaxOutput),
	}
	r.note("pricing", m.Pricing)
	if attrs := objectAttrs(m.Pricing); attrs != nil {
		out.Pricing = &spec.Pricing{}
		r.readStruct("pricing", attrs, reflect.ValueOf(out.Pricing).Elem(), pricingFields)
	}
	r.note("scaling", m.Scaling)
	if attrs := objectAttrs(m.Scaling); attrs != nil {
		r.readStruct("scaling", attrs, reflect.ValueOf(&out.Scaling).Elem(), scalingFields)
	}
	r.note("profiles", m.Profiles)
	if m.Profiles.IsNull() || m.Profiles.IsUnknown() {
		return out, r
	}
	for i, e := range m.Profiles.Elements() {
		key := fmt.Sprintf("profiles[%d]", i)
		o, ok := e.(types.Object)
		if !ok || o.IsNull() || o.IsUnknown() {
			if ok && o.IsUnknown() {
				r.unknown = append(r.unknown, key)
			}
			continue
		}
		// Read from the attribute map, not with As: the reflection of As
		// costs more than the rest of a plan, which reads every model.
		var p spec.Profile
		r.readStruct(key, o.Attributes(), reflect.ValueOf(&p).Elem(), profileFields)
		out.Profiles = append(out.Profiles, p)
	}
	return out, r
}

// toSpec is the planned or stored definition as spec's Model; the second
// result is false when some attribute is not known yet.
func (m modelResourceModel) toSpec() (spec.Model, bool) {
	out, r := m.read()
	return out, len(r.unknown) == 0
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

// attrString, attrInt64, attrBool, attrFloat64, attrList and attrMap are attribute k
// of attrs; null when it is missing (attrs nil included) or of another type.
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

func attrBool(attrs map[string]attr.Value, k string) types.Bool {
	if v, ok := attrs[k].(types.Bool); ok {
		return v
	}
	return types.BoolNull()
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

// fromSpec is prior with the definition m written over it: the resource's
// own settings and the spelling of values the API normalizes come from
// prior.
func fromSpec(m spec.Model, prior modelResourceModel) modelResourceModel {
	out := prior
	out.Name = types.StringValue(m.Name)
	out.Aliases = fromList(m.Aliases, prior.Aliases)
	out.Source = fromString(m.Source, prior.Source)
	out.RoutingProfile = types.StringValue(m.RoutingProfile)
	out.Rollout = types.StringValue(m.Rollout)
	if m.Rollout == "" {
		out.Rollout = types.StringValue(spec.RolloutAuto)
	}
	out.ContextLength = types.Int64Value(int64(m.ContextLength))
	out.MaxOutput = types.Int64Value(int64(m.MaxOutput))

	// The prior's nested values are read from their attribute maps, not
	// with As/ElementsAs: the reflection costs more than the rest of a
	// refresh, and a plan refreshes every model of the catalog.
	out.Scaling = types.ObjectValueMust(scalingTypes, writeStruct(reflect.ValueOf(m.Scaling), scalingFields, objectAttrs(prior.Scaling)))
	out.Pricing = types.ObjectNull(pricingTypes)
	if m.Pricing != nil {
		out.Pricing = types.ObjectValueMust(pricingTypes, writeStruct(reflect.ValueOf(*m.Pricing), pricingFields, nil))
	}

	var priorProfiles []attr.Value
	if !prior.Profiles.IsNull() && !prior.Profiles.IsUnknown() {
		priorProfiles = prior.Profiles.Elements()
	}
	profiles := make([]attr.Value, 0, len(m.Profiles))
	for i, p := range m.Profiles {
		var pp map[string]attr.Value // nil: no prior profile, every lookup is null
		if i < len(priorProfiles) {
			if o, ok := priorProfiles[i].(types.Object); ok && attrString(objectAttrs(o), "name").ValueString() == p.Name {
				pp = objectAttrs(o)
			}
		}
		profiles = append(profiles, types.ObjectValueMust(profileTypes, writeStruct(reflect.ValueOf(p), profileFields, pp)))
	}
	out.Profiles = types.ListValueMust(types.ObjectType{AttrTypes: profileTypes}, profiles)
	return out
}

// fromAPI is the state for the model the control plane returned; prior
// supplies the resource's own settings and the spelling of values the API
// normalizes.
func fromAPI(pm *managev1.Model, prior modelResourceModel) (modelResourceModel, diag.Diagnostics) {
	var diags diag.Diagnostics
	m, err := specpb.ModelFromProto(pm)
	if err != nil {
		diags.AddError("Unreadable answer from the llmgw control plane",
			fmt.Sprintf("The control plane returned model %s with %v. This is a bug; please report it.", prior.Name.ValueString(), err))
		return prior, diags
	}
	out := fromSpec(m, prior)
	if out.RolloutPlan.IsUnknown() {
		out.RolloutPlan = types.StringNull() // the plan could not say (no client at plan time)
	}
	out.Generation = types.StringValue(pm.GetGeneration())
	out.Origin = types.StringValue(pm.GetOrigin())
	st := pm.GetStatus()
	out.Status = types.ObjectValueMust(statusTypes, map[string]attr.Value{
		"state":            types.StringValue(st.GetState()),
		"message":          types.StringValue(st.GetMessage()),
		"replicas_ready":   types.Int64Value(int64(st.GetReplicasReady())),
		"replicas_desired": types.Int64Value(int64(st.GetReplicasDesired())),
		"replicas_total":   types.Int64Value(int64(st.GetReplicasTotal())),
		"replicas_stale":   types.Int64Value(int64(st.GetReplicasStale())),
	})
	if pm.GetName() == "" {
		diags.AddError("Empty answer from the llmgw control plane", fmt.Sprintf("The control plane returned a model without a name for %s. This is a bug; please report it.", prior.Name.ValueString()))
	}
	return out, diags
}

// autoIsDefault writes rollout "auto", the attribute's default, as the
// catalog's "" (which reads as auto), so that a model stored without a
// policy and one planned with the default are the same definition.
func autoIsDefault(rollout string) string {
	if rollout == spec.RolloutAuto {
		return ""
	}
	return rollout
}
