package provider

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/boolplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/api/specpb"
	"github.com/llmgw/llmgw/spec"
)

// Defaults of llmgw_node's own settings.
const (
	defaultReadyTimeout = "10m"
	nodePollInterval    = 500 * time.Millisecond
)

var (
	_ resource.ResourceWithConfigure      = (*nodeResource)(nil)
	_ resource.ResourceWithImportState    = (*nodeResource)(nil)
	_ resource.ResourceWithModifyPlan     = (*nodeResource)(nil)
	_ resource.ResourceWithValidateConfig = (*nodeResource)(nil)
)

// nodeResource is llmgw_node: the control plane's copy of a machine's
// declaration.
type nodeResource struct {
	client *Client
}

func newNodeResource() resource.Resource { return &nodeResource{} }

// nodeResourceModel is llmgw_node's state.
type nodeResourceModel struct {
	Name             types.String `tfsdk:"name"`
	Address          types.String `tfsdk:"address"`
	Fabric           types.Object `tfsdk:"fabric"`
	Engines          types.Map    `tfsdk:"engines"`
	Labels           types.Map    `tfsdk:"labels"`
	ModelDirs        types.List   `tfsdk:"model_dirs"`
	Discovery        types.Object `tfsdk:"discovery"`
	WaitForReady     types.Bool   `tfsdk:"wait_for_ready"`
	DrainOnDestroy   types.Bool   `tfsdk:"drain_on_destroy"`
	ReadyTimeout     types.String `tfsdk:"ready_timeout"`
	Declared         types.Bool   `tfsdk:"declared"`
	State            types.String `tfsdk:"state"`
	Reason           types.String `tfsdk:"reason"`
	GPUs             types.Int64  `tfsdk:"gpus"`
	GPUClasses       types.List   `tfsdk:"gpu_classes"`
	FabricsInService types.List   `tfsdk:"fabrics_in_service"`
	AgentVersion     types.String `tfsdk:"agent_version"`
	LastSeen         types.String `tfsdk:"last_seen"`
	CreateFailed     types.Bool   `tfsdk:"create_failed"`
}

var (
	nodeFabricTypes    = map[string]attr.Type{"name": types.StringType, "adapters": types.ListType{ElemType: types.StringType}}
	nodeDiscoveryTypes = map[string]attr.Type{"nvidia_smi": types.StringType, "ib_root": types.StringType, "cpuinfo": types.StringType}
	fabricVerdictTypes = map[string]attr.Type{
		"name": types.StringType, "in_service": types.BoolType, "rate_gbps": types.Float64Type,
		"problems": types.ListType{ElemType: types.StringType},
	}
)

func (r *nodeResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_node"
}

func (r *nodeResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	computed := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{Computed: true, MarkdownDescription: desc}
	}
	resp.Schema = schema.Schema{
		MarkdownDescription: "The declaration of a machine: its fabric, engines, labels and model directories. " +
			"The control plane holds it and sends it to the agent when it connects; it takes precedence over the agent's local file, whose only required content is then the server, certificate and key. " +
			"Create waits until the agent has connected and the node is ready (`wait_for_ready`), and fails with the node's reason when a declared engine cannot start (the agent runs each engine's version command). " +
			"A connected node whose CPU lacks AVX2 is planned with a warning: it serves, but CPU inference is several times slower (a Proxmox VM on the default kvm64 CPU type). " +
			"Destroy drains the node first (each replica's replacement is ready before the original stops), then revokes its identity: the control plane refuses its certificate from then on. " +
			"A drain that cannot finish (a replica no other node can hold) fails the destroy at once, naming the replica and the scheduler's reason, and nothing is stopped; " +
			"a replica whose model is being destroyed in the same run does not block it. `drain_on_destroy = false` stops the node's replicas with it instead. " +
			"A node whose create failed before it was ready (an engine check failed, a fabric was out of service, the wait timed out) is left tainted; destroying it, as the replacement the next apply plans does, removes its declaration without revoking its identity, " +
			"so the same machine with the same certificate comes back once the cause is fixed. (If such a machine is retired instead, its certificate stays valid until it expires; a control plane with `agents.require_declared` refuses it, since it is no longer declared.) " +
			"When the declaration is unchanged but a declared engine's check failed on the node, the plan updates the node and apply runs the engine checks again (as `llmgw ctl check-engines` does), so fixing the engine on the machine and applying is enough. " +
			"Import by node id adopts a running node, declared or not: its effective declaration is read into state, and the next apply declares it.",
		Attributes: map[string]schema.Attribute{
			"name": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: "The node id: the common name of its certificate (`llmgw_node_certificate`). Changing it replaces the node.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Validators:          []validator.String{nodeNameValidator{}},
			},
			"address": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "The address the node is reached at (informational).",
			},
			"fabric": schema.SingleNestedAttribute{
				Optional:            true,
				MarkdownDescription: "The InfiniBand fabric the node is in (an `llmgw_fabric`) and the adapters that attach it.",
				Attributes: map[string]schema.Attribute{
					"name": schema.StringAttribute{Required: true, MarkdownDescription: "The fabric's name."},
					"adapters": schema.ListAttribute{
						Required: true, ElementType: types.StringType,
						MarkdownDescription: "The adapters (e.g. `mlx5_0`) through which the node reaches the fabric.",
					},
				},
			},
			"engines": schema.MapAttribute{
				Optional: true, ElementType: types.StringType,
				MarkdownDescription: "The path of each engine's executable on the node, by engine (`" + strings.Join(spec.KnownEngines, "`, `") + "`); `sim` needs none.",
			},
			"labels": schema.MapAttribute{
				Optional: true, ElementType: types.StringType,
				MarkdownDescription: "Free-form labels that model profiles can require.",
			},
			"model_dirs": schema.ListAttribute{
				Optional: true, ElementType: types.StringType,
				MarkdownDescription: "Directories whose models the node reports as present.",
			},
			"discovery": schema.SingleNestedAttribute{
				Optional:            true,
				MarkdownDescription: "Where the node's hardware probes look; the defaults suit a normal machine.",
				Attributes: map[string]schema.Attribute{
					"nvidia_smi": schema.StringAttribute{Optional: true, MarkdownDescription: "Path of `nvidia-smi` (default `" + spec.DefaultNvidiaSMI + "`)."},
					"ib_root":    schema.StringAttribute{Optional: true, MarkdownDescription: "InfiniBand sysfs root (default `" + spec.DefaultIBRoot + "`)."},
					"cpuinfo":    schema.StringAttribute{Optional: true, MarkdownDescription: "A `/proc/cpuinfo`-shaped file the CPU probe reads, AVX2 included (default `" + spec.DefaultCPUInfo + "`)."},
				},
			},
			"wait_for_ready": schema.BoolAttribute{
				Optional: true, Computed: true, Default: booldefault.StaticBool(true),
				MarkdownDescription: "Whether apply waits until the agent has connected, the node is ready and its declared fabric is in service (default true). Apply fails with the node's own reason otherwise.",
			},
			"drain_on_destroy": drainOnDestroySchema(),
			"ready_timeout": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(defaultReadyTimeout),
				MarkdownDescription: "How long apply waits for the node to be ready, and destroy for its drain, like `90s` or `10m` (default `" + defaultReadyTimeout + "`).",
				Validators:          []validator.String{durationValidator{}},
			},
			"declared": schema.BoolAttribute{
				Computed:            true,
				MarkdownDescription: "Whether the control plane holds this declaration; false for an imported node that runs on its local file until the next apply.",
			},
			"state":         computed("`pending`, `ready`, `lost`, `draining` or `suspect` (its agent's session ended or went quiet: no new replica goes there); `pending` too while no agent with this identity has connected."),
			"reason":        computed("Why the node is not ready, or warnings about it."),
			"gpus":          schema.Int64Attribute{Computed: true, MarkdownDescription: "GPUs found on the node."},
			"gpu_classes":   schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "The distinct GPU classes found (e.g. `h100-80g`), sorted."},
			"agent_version": computed("The agent's version."),
			"last_seen":     computed("When the agent was last heard from, RFC 3339."),
			"create_failed": schema.BoolAttribute{
				Computed: true,
				MarkdownDescription: "True when this resource's create stopped before the node was ready (the resource is then tainted). " +
					"Destroying such a node, as the replacement of the tainted resource does, removes its declaration without revoking its identity, so the same certificate gets back in. " +
					"An apply that sees the node ready sets it to false; a node destroyed then is revoked.",
				PlanModifiers: []planmodifier.Bool{boolplanmodifier.UseStateForUnknown()},
			},
			"fabrics_in_service": schema.ListNestedAttribute{
				Computed:            true,
				MarkdownDescription: "The node's verdict on each declared fabric.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"name":       schema.StringAttribute{Computed: true, MarkdownDescription: "The fabric."},
					"in_service": schema.BoolAttribute{Computed: true, MarkdownDescription: "Whether the fabric is usable from the node."},
					"rate_gbps":  schema.Float64Attribute{Computed: true, MarkdownDescription: "The link rate, Gb/s."},
					"problems":   schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "Why it is out of service."},
				}},
			},
		},
	}
}

func (r *nodeResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.client = clientFrom(req.ProviderData, &resp.Diagnostics)
}

func (r *nodeResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("name"), req, resp)
}

// ModifyPlan plans declared = true: a node the control plane holds no
// declaration for (imported, or removed behind Terraform's back) is
// declared by the next apply even when its attributes match. A connected
// node's warnings (no AVX2) are plan warnings.
func (r *nodeResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return
	}
	n := r.warnConnected(ctx, req, resp)
	// Declaring a node that was only imported (or removed outside Terraform)
	// is a change even when the configuration matches: plan it, and leave
	// what the node reports unknown until apply has read it again, since a
	// heartbeat in between changes it.
	declared, createFailed := types.BoolValue(false), types.BoolValue(false)
	if !req.State.Raw.IsNull() {
		resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("declared"), &declared)...)
		resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("create_failed"), &createFailed)...)
	}
	if createFailed.ValueBool() {
		// An update (of an untainted node whose create failed) clears it
		// once the node is ready.
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("create_failed"), types.BoolUnknown())...)
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("declared"), types.BoolValue(true))...)
	if declared.ValueBool() && !r.recheckPlanned(ctx, n, req, resp) {
		return
	}
	for name, v := range map[string]attr.Value{
		"state":              types.StringUnknown(),
		"reason":             types.StringUnknown(),
		"agent_version":      types.StringUnknown(),
		"last_seen":          types.StringUnknown(),
		"gpus":               types.Int64Unknown(),
		"gpu_classes":        types.ListUnknown(types.StringType),
		"fabrics_in_service": types.ListUnknown(types.ObjectType{AttrTypes: fabricVerdictTypes}),
	} {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root(name), v)...)
	}
}

// warnConnected adds the warnings of the node the plan names, when its
// agent is connected, and returns that node; a node not reachable now
// plans without them (and nil).
func (r *nodeResource) warnConnected(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) *managev1.Node {
	if r.client == nil {
		return nil
	}
	var name types.String
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root("name"), &name)...)
	if name.IsNull() || name.IsUnknown() {
		return nil
	}
	n, err := r.client.GetNode(ctx, name.ValueString())
	if err != nil || !n.GetConnected() {
		return nil // unknown or not connected: nothing to say yet
	}
	for _, w := range nodeWarnings(n) {
		resp.Diagnostics.AddAttributeWarning(path.Root("name"), fmt.Sprintf("Node %s: %s", n.GetId(), w.summary), w.detail)
	}
	return n
}

// recheckPlanned plans an update of an existing node whose check of a
// declared engine failed, even when nothing else changes: apply runs the
// engine checks again (declare), so an engine fixed on the machine is
// taken into account by applying. It says whether it did.
func (r *nodeResource) recheckPlanned(ctx context.Context, n *managev1.Node, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) bool {
	if n == nil || req.State.Raw.IsNull() {
		return false
	}
	var engines types.Map
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root("engines"), &engines)...)
	if engines.IsUnknown() {
		return false
	}
	decl := &agentv1.Declaration{}
	resp.Diagnostics.Append(engines.ElementsAs(ctx, &decl.Engines, false)...)
	_, failed := engineCheckVerdict(n, decl)
	if failed == "" {
		return false
	}
	resp.Diagnostics.AddAttributeWarning(path.Root("engines"), fmt.Sprintf("Node %s: an engine check failed", n.GetId()),
		fmt.Sprintf("Node %s reports: %s.\n\nApply runs the node's engine checks again and waits for the node; fix the engine on the machine (or the path declared here) first.", n.GetId(), failed))
	return true
}

type nodeWarning struct{ summary, detail string }

// nodeWarnings turns a node's warnings into plan warnings.
func nodeWarnings(n *managev1.Node) []nodeWarning {
	var out []nodeWarning
	for _, w := range n.GetWarnings() {
		summary, detail := w, ""
		if n.HasAvx2 != nil && !n.GetHasAvx2() && strings.Contains(w, "AVX2") {
			summary = "CPU has no AVX2"
			detail = fmt.Sprintf("Node %s reports a CPU without AVX2. It is ready and serves, but CPU inference (llama.cpp) runs several times slower: "+
				"a measured 7B model went from 9.9 to 1.3 tokens/s. On a Proxmox VM, Proxmox's default CPU type kvm64 hides AVX2 from the guest; "+
				"set the VM's CPU type to host (llmgw_proxmox_vm's cpu_type) and restart it.\n\nThe node says: %s", n.GetId(), w)
		}
		out = append(out, nodeWarning{summary, detail})
	}
	return out
}

// specDeclaration is the declaration the plan or configuration describes,
// with the reader that noted, by spec key (fabrics[0].adapters), which
// values are unknown and which are set. The one fabric is spec's
// fabrics[0].
func (m nodeResourceModel) specDeclaration() (spec.Declaration, *reader) {
	r := newReader()
	d := spec.Declaration{
		Engines:   r.dict("engines", m.Engines),
		Labels:    r.dict("labels", m.Labels),
		ModelDirs: r.list("model_dirs", m.ModelDirs),
	}
	r.note("fabrics[0]", m.Fabric)
	if attrs := objectAttrs(m.Fabric); attrs != nil {
		d.Fabrics = []spec.Fabric{{
			Name:     r.str("fabrics[0].name", attrString(attrs, "name")),
			Adapters: r.list("fabrics[0].adapters", attrList(attrs, "adapters")),
		}}
	}
	r.note("discovery", m.Discovery)
	if attrs := objectAttrs(m.Discovery); attrs != nil {
		d.Discovery = spec.Discovery{
			NvidiaSMI: r.str("discovery.nvidia_smi", attrString(attrs, "nvidia_smi")),
			IBRoot:    r.str("discovery.ib_root", attrString(attrs, "ib_root")),
			CPUInfo:   r.str("discovery.cpuinfo", attrString(attrs, "cpuinfo")),
		}
	}
	return d, r
}

// toDeclaration is the declaration the plan describes, as DeclareNode
// takes it.
func (m nodeResourceModel) toDeclaration(_ context.Context) (*managev1.NodeDeclaration, diag.Diagnostics) {
	d, _ := m.specDeclaration()
	return &managev1.NodeDeclaration{Name: m.Name.ValueString(), Address: m.Address.ValueString(), Declaration: specpb.DeclarationToProto(d)}, nil
}

// ValidateConfig checks the declaration with spec.Declaration.Validate, as
// the control plane and the agent check one. A problem that may come from
// a value not known yet waits for apply.
func (r *nodeResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m nodeResourceModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(declarationProblems(m)...)
}

// declarationProblems is ValidateConfig's check.
func declarationProblems(m nodeResourceModel) diag.Diagnostics {
	d, rd := m.specDeclaration()
	var problems spec.Problems
	errors.As(d.Validate(), &problems)
	var diags diag.Diagnostics
	for _, p := range problems {
		if dependsOnUnknown(p.Key, rd.unknown) {
			continue
		}
		attr := declarationAttribute(p.Key)
		diags.AddAttributeError(attr, "Invalid node declaration: "+attr.String(),
			fmt.Sprintf("%s: %s.\n\nThe control plane and the agent refuse a declaration that breaks this rule: change %s in the configuration.", attr, p.Msg, attr))
	}
	return diags
}

// declarationAttribute is the attribute path of a declaration's spec key:
// fabrics[0] is the one fabric, engines.NAME the map's key NAME.
func declarationAttribute(key string) path.Path {
	if rest, ok := strings.CutPrefix(key, "fabrics[0]"); ok {
		key = "fabric" + rest
	}
	if name, ok := strings.CutPrefix(key, "engines."); ok {
		return path.Root("engines").AtMapKey(name)
	}
	return problemPath(key)
}

// setDeclaration records a declaration read from the control plane or the
// agent. An empty value keeps the prior one when that is empty too (so `{}`
// in the configuration and nothing from the API do not differ).
func (m *nodeResourceModel) setDeclaration(ctx context.Context, address string, d *agentv1.Declaration) diag.Diagnostics {
	var diags diag.Diagnostics
	if address != "" || !isEmptyString(m.Address) {
		m.Address = types.StringValue(address)
	}
	m.Engines = keepEmptyMap(ctx, m.Engines, d.GetEngines(), &diags)
	m.Labels = keepEmptyMap(ctx, m.Labels, d.GetLabels(), &diags)
	if dirs := d.GetModelDirs(); len(dirs) > 0 || m.ModelDirs.IsNull() || m.ModelDirs.IsUnknown() || len(m.ModelDirs.Elements()) > 0 {
		if len(dirs) == 0 {
			m.ModelDirs = types.ListNull(types.StringType)
		} else {
			v, dd := types.ListValueFrom(ctx, types.StringType, dirs)
			diags.Append(dd...)
			m.ModelDirs = v
		}
	}
	m.Fabric = types.ObjectNull(nodeFabricTypes)
	if fs := d.GetFabrics(); len(fs) > 0 {
		ad, dd := types.ListValueFrom(ctx, types.StringType, fs[0].GetAdapters())
		diags.Append(dd...)
		m.Fabric = types.ObjectValueMust(nodeFabricTypes, map[string]attr.Value{"name": types.StringValue(fs[0].GetName()), "adapters": ad})
		if len(fs) > 1 {
			diags.AddWarning("Node declares more than one fabric",
				fmt.Sprintf("Node %s declares %d fabrics; llmgw_node manages one, so the next apply keeps only %s.", m.Name.ValueString(), len(fs), fs[0].GetName()))
		}
	}
	m.Discovery = types.ObjectNull(nodeDiscoveryTypes)
	if ds := d.GetDiscovery(); ds.GetNvidiaSmi() != "" || ds.GetIbRoot() != "" || ds.GetCpuinfo() != "" {
		m.Discovery = types.ObjectValueMust(nodeDiscoveryTypes, map[string]attr.Value{
			"nvidia_smi": optionalString(ds.GetNvidiaSmi()), "ib_root": optionalString(ds.GetIbRoot()), "cpuinfo": optionalString(ds.GetCpuinfo()),
		})
	}
	return diags
}

func isEmptyString(v types.String) bool { return v.IsNull() || v.IsUnknown() || v.ValueString() == "" }

func optionalString(s string) types.String {
	if s == "" {
		return types.StringNull()
	}
	return types.StringValue(s)
}

// keepEmptyMap is m as a map value: null when empty, unless prior is an
// empty map already.
func keepEmptyMap(ctx context.Context, prior types.Map, m map[string]string, diags *diag.Diagnostics) types.Map {
	if len(m) == 0 {
		if !prior.IsNull() && !prior.IsUnknown() && len(prior.Elements()) == 0 {
			return prior
		}
		return types.MapNull(types.StringType)
	}
	v, d := types.MapValueFrom(ctx, types.StringType, m)
	diags.Append(d...)
	return v
}

// setStatus records the node's status; a nil node is one no agent with this
// identity has connected as.
func (m *nodeResourceModel) setStatus(ctx context.Context, n *managev1.Node) diag.Diagnostics {
	var diags diag.Diagnostics
	if n == nil {
		m.State = types.StringValue("pending")
		m.Reason = types.StringValue("agent has not connected")
		m.GPUs = types.Int64Value(0)
		m.GPUClasses = types.ListValueMust(types.StringType, nil)
		m.FabricsInService = types.ListValueMust(types.ObjectType{AttrTypes: fabricVerdictTypes}, nil)
		m.AgentVersion = types.StringValue("")
		m.LastSeen = types.StringValue("")
		return diags
	}
	m.State = types.StringValue(n.GetState())
	m.Reason = types.StringValue(n.GetReason())
	m.GPUs = types.Int64Value(int64(len(n.GetGpus())))
	var classes []string
	for _, g := range n.GetGpus() {
		if c := g.GetClass(); c != "" && !slices.Contains(classes, c) {
			classes = append(classes, c)
		}
	}
	slices.Sort(classes)
	cl, d := types.ListValueFrom(ctx, types.StringType, classes)
	diags.Append(d...)
	m.GPUClasses = cl
	verdicts := make([]attr.Value, 0, len(n.GetFabrics()))
	for _, f := range n.GetFabrics() {
		problems, d := types.ListValueFrom(ctx, types.StringType, f.GetProblems())
		diags.Append(d...)
		verdicts = append(verdicts, types.ObjectValueMust(fabricVerdictTypes, map[string]attr.Value{
			"name": types.StringValue(f.GetName()), "in_service": types.BoolValue(f.GetInService()),
			"rate_gbps": types.Float64Value(f.GetRateGbps()), "problems": problems,
		}))
	}
	m.FabricsInService = types.ListValueMust(types.ObjectType{AttrTypes: fabricVerdictTypes}, verdicts)
	m.AgentVersion = types.StringValue(n.GetAgentVersion())
	m.LastSeen = types.StringValue("")
	if ms := n.GetLastSeenUnixMs(); ms > 0 {
		m.LastSeen = types.StringValue(time.UnixMilli(ms).UTC().Format(time.RFC3339))
	}
	return diags
}

// Create declares the node and waits for it. A create that fails after the
// declaration was stored leaves the resource tainted with create_failed
// set, so that the destroy of its replacement does not revoke the identity
// the same machine comes back with. (Private state would not do: Terraform
// plans the replacement of a tainted object without its private state.)
func (r *nodeResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	r.declare(ctx, req.Plan.Get, true, &resp.State, &resp.Diagnostics)
}

// Update declares the node again and waits for it; once it is ready
// create_failed (of a create that failed, then untainted) is cleared.
func (r *nodeResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var failed types.Bool
	resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("create_failed"), &failed)...)
	r.declare(ctx, req.Plan.Get, failed.ValueBool(), &resp.State, &resp.Diagnostics)
}

// declare sends the planned declaration (DeclareNode), saves the state and,
// with wait_for_ready, waits for the node and records its status again.
// create_failed is failed until the node is seen ready (or not waited for),
// false after.
func (r *nodeResource) declare(ctx context.Context, get func(context.Context, any) diag.Diagnostics, failed bool, st stateSetter, diags *diag.Diagnostics) {
	var plan nodeResourceModel
	diags.Append(get(ctx, &plan)...)
	if diags.HasError() {
		return
	}
	nd, d := plan.toDeclaration(ctx)
	diags.Append(d...)
	if diags.HasError() {
		return
	}
	name := nd.GetName()
	if _, err := r.client.DeclareNode(ctx, nd); err != nil {
		diags.Append(r.client.Diag("declaring node "+name, err))
		return
	}
	plan.Declared = types.BoolValue(true)
	plan.CreateFailed = types.BoolValue(failed && plan.WaitForReady.ValueBool())
	n, err := r.client.GetNode(ctx, name)
	if err != nil && !IsNotFound(err) {
		diags.Append(r.client.Diag("reading node "+name, err))
		return
	}
	diags.Append(plan.setStatus(ctx, n)...)
	diags.Append(st.Set(ctx, plan)...)
	if diags.HasError() || !plan.WaitForReady.ValueBool() {
		return
	}
	timeout, err := time.ParseDuration(plan.ReadyTimeout.ValueString())
	if err != nil {
		timeout, _ = time.ParseDuration(defaultReadyTimeout)
	}
	// The agent runs its engine checks when a declaration changes its
	// engines, not when the same one comes again: a failed check of a
	// declared engine is from before, maybe before the engine was fixed.
	if _, failed := engineCheckVerdict(n, nd.GetDeclaration()); failed != "" && n.GetConnected() {
		if _, err := r.client.CheckNodeEngines(ctx, name, timeout); err != nil && !IsNotFound(err) && status.Code(err) != codes.Unimplemented {
			diags.Append(r.client.Diag("running the engine checks of node "+name+" again", err))
			return
		}
	}
	final, wd := waitNodeReady(ctx, r.client, nd, timeout)
	diags.Append(wd...)
	if !wd.HasError() {
		plan.CreateFailed = types.BoolValue(false)
	}
	if final != nil {
		diags.Append(plan.setStatus(ctx, final)...)
		diags.Append(st.Set(ctx, plan)...)
	}
}

// nodeReadiness says whether n serves the declaration decl: done when it is
// ready with the declared fabric in service and its declared engines
// checked; failed (with why) when the node's verdict on the declared fabric
// or one of the declared engines says it cannot be. Only a connected
// session's verdicts count: a disconnected entry (the machine a new VM
// replaces, within its grace period) keeps the state and checks its agent
// last reported, which say nothing of the machine that is coming.
func nodeReadiness(n *managev1.Node, decl *agentv1.Declaration) (done bool, failed string) {
	if n == nil || !n.GetConnected() {
		return false, ""
	}
	checked, failed := engineCheckVerdict(n, decl)
	if failed != "" {
		return false, failed
	}
	for _, es := range n.GetEngines() {
		want, ok := decl.GetEngines()[es.GetEngine()]
		if ok && want == es.GetPath() && !es.GetAvailable() {
			return false, fmt.Sprintf("engine %s unavailable: %s", es.GetEngine(), es.GetError())
		}
	}
	fabricOK := true
	for _, f := range decl.GetFabrics() {
		fabricOK = false
		for _, v := range n.GetFabrics() {
			if v.GetName() != f.GetName() || !sameSet(v.GetAdapters(), f.GetAdapters()) {
				continue
			}
			if !v.GetInService() {
				return false, fmt.Sprintf("fabric %s out of service: %s", f.GetName(), strings.Join(v.GetProblems(), "; "))
			}
			fabricOK = true
		}
	}
	return n.GetState() == "ready" && fabricOK && checked, ""
}

// engineCheckVerdict reads the node's engine checks against the declared
// engines: failed is the first declared engine's reason for not starting
// ("llama-server cannot start: libgomp.so.1: ..."); checked is false while
// a declared engine has no check of its declared path yet (the agent runs
// them after it received the declaration). A node that reports no checks
// at all (an older agent) counts as checked.
func engineCheckVerdict(n *managev1.Node, decl *agentv1.Declaration) (checked bool, failed string) {
	checks := n.GetEngineChecks()
	if len(checks) == 0 {
		return true, ""
	}
	engines := slices.Sorted(maps.Keys(decl.GetEngines()))
	checked = true
	for _, e := range engines {
		var found *agentv1.EngineCheck
		for _, c := range checks {
			// The sim engine is the agent's own binary, whatever path is declared.
			if c.GetEngine() == e && (e == "sim" || c.GetPath() == decl.GetEngines()[e]) {
				found = c
			}
		}
		switch {
		case found == nil:
			checked = false
		case !found.GetOk():
			if why := found.GetError(); why != "" {
				return false, why
			}
			return false, e + " cannot start"
		}
	}
	return checked, ""
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// waitNodeReady polls the node until nodeReadiness says it serves decl, it
// cannot, or timeout passes. It returns the node as last read.
func waitNodeReady(ctx context.Context, c *Client, decl *managev1.NodeDeclaration, timeout time.Duration) (*managev1.Node, diag.Diagnostics) {
	var diags diag.Diagnostics
	name := decl.GetName()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(nodePollInterval)
	defer tick.Stop()
	for {
		n, err := c.GetNode(ctx, name)
		if err != nil && !IsNotFound(err) {
			diags.Append(c.Diag("waiting for node "+name, err))
			return nil, diags
		}
		done, failed := nodeReadiness(n, decl.GetDeclaration())
		switch {
		case done:
			return n, nil
		case failed != "":
			diags.AddError(fmt.Sprintf("Node %s is not ready", name),
				fmt.Sprintf("Node %s is declared, but %s.\n\nFix the node or its declaration and apply again, or set wait_for_ready = false to declare it without waiting.", name, failed))
			return n, diags
		case time.Now().After(deadline):
			why := "agent has not connected: no agent with this identity (certificate CN " + name + ") reached the control plane"
			if n != nil {
				why = fmt.Sprintf("the node is %s", n.GetState())
				if r := n.GetReason(); r != "" {
					why += ": " + r
				}
			}
			diags.AddError(fmt.Sprintf("Timed out waiting for node %s", name),
				fmt.Sprintf("After %s %s.\n\nStart the agent with a certificate for %s (llmgw_node_certificate), or raise ready_timeout, or set wait_for_ready = false.", timeout, why, name))
			return n, diags
		}
		select {
		case <-ctx.Done():
			diags.AddError(fmt.Sprintf("Interrupted while waiting for node %s", name), ctx.Err().Error())
			return n, diags
		case <-tick.C:
		}
	}
}

// Read reads the control plane's copy of the declaration, or, when it holds
// none, the agent's own (an import of an undeclared node): declared is then
// false and the next apply declares it. A node neither declared nor known
// is gone.
func (r *nodeResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state nodeResourceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name := state.Name.ValueString()
	n, err := r.client.GetNode(ctx, name)
	if err != nil && !IsNotFound(err) {
		resp.Diagnostics.Append(r.client.Diag("reading node "+name, err))
		return
	}
	nd, err := r.client.GetNodeDeclaration(ctx, name)
	switch {
	case err == nil:
		state.Declared = types.BoolValue(true)
		resp.Diagnostics.Append(state.setDeclaration(ctx, nd.GetAddress(), nd.GetDeclaration())...)
	case !IsNotFound(err):
		resp.Diagnostics.Append(r.client.Diag("reading the declaration of node "+name, err))
		return
	case n == nil:
		resp.State.RemoveResource(ctx)
		return
	default:
		state.Declared = types.BoolValue(false)
		resp.Diagnostics.Append(state.setDeclaration(ctx, n.GetAddress(), n.GetDeclaration())...)
	}
	resp.Diagnostics.Append(state.setStatus(ctx, n)...)
	if state.WaitForReady.IsNull() {
		state.WaitForReady = types.BoolValue(true)
	}
	if state.DrainOnDestroy.IsNull() {
		state.DrainOnDestroy = types.BoolValue(true)
	}
	if state.ReadyTimeout.IsNull() {
		state.ReadyTimeout = types.StringValue(defaultReadyTimeout)
	}
	if state.CreateFailed.IsNull() {
		state.CreateFailed = types.BoolValue(false) // imported, or from before the attribute
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

// Delete drains the node (a node not connected has nothing to drain), waits
// until it holds no replica, then removes its declaration and revokes its
// identity. A node whose create failed (create_failed; this destroy is
// usually the replacement of the tainted resource) is not revoked: its
// declaration is removed, a drain is undone, and the same machine with the
// same certificate can be declared again.
func (r *nodeResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state nodeResourceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	neverReady := state.CreateFailed.ValueBool()
	name := state.Name.ValueString()
	timeout, err := time.ParseDuration(state.ReadyTimeout.ValueString())
	if err != nil {
		timeout, _ = time.ParseDuration(defaultReadyTimeout)
	}
	drained := false
	if n, err := r.client.GetNode(ctx, name); err == nil && (!neverReady || n.GetReplicas() > 0) && drainOnDestroy(state) {
		// A never-ready node holds replicas only if it became ready outside
		// Terraform (llmgw ctl check-engines): they are moved all the same.
		gone, diags := startDrain(ctx, r.client, name, "draining node "+name, nodeDrainHint)
		resp.Diagnostics.Append(diags...)
		if resp.Diagnostics.HasError() {
			return
		}
		if !gone {
			drained = true
			resp.Diagnostics.Append(waitDrained(ctx, r.client, name, timeout)...)
			if resp.Diagnostics.HasError() {
				return
			}
		}
	} else if err != nil && !IsNotFound(err) {
		resp.Diagnostics.Append(r.client.Diag("reading node "+name, err))
		return
	}
	if err := r.client.RemoveNode(ctx, name, !neverReady); err != nil {
		resp.Diagnostics.Append(r.client.Diag("removing node "+name, err))
		return
	}
	if !neverReady {
		return
	}
	if drained {
		if _, err := r.client.CancelDrain(ctx, name); err != nil && !IsNotFound(err) {
			resp.Diagnostics.Append(r.client.Diag("undoing the drain of node "+name, err))
			return
		}
	}
	resp.Diagnostics.AddWarning(fmt.Sprintf("Node %s removed without revoking its identity", name),
		fmt.Sprintf("Node %s never became ready under this resource (its create failed), so its declaration was removed but its certificate stays valid: "+
			"declared again (the replacement of a tainted llmgw_node), the same machine comes back with the same certificate. "+
			"If the machine is retired instead, its certificate is accepted until it expires; a control plane with agents.require_declared refuses it while it is not declared.", name))
}

// waitDrained polls the node until it holds no replica.
func waitDrained(ctx context.Context, c *Client, name string, timeout time.Duration) diag.Diagnostics {
	n, diags := pollDrained(ctx, c, name, timeout, "waiting for the drain of node "+name, nodeDrainHint)
	if n != nil {
		diags.AddError(fmt.Sprintf("Timed out draining node %s", name),
			fmt.Sprintf("After %s node %s still holds %s (their replacements are not ready yet; `llmgw ctl explain-placement MODEL` says why). The node stays draining and its identity is not revoked.\n\n"+
				"Make room elsewhere or raise ready_timeout, and destroy again; `llmgw ctl drain %s --cancel` puts it back in service.",
				timeout, name, remainingReplicas(ctx, c, name, n.GetReplicas()), name))
	}
	return diags
}

// pollDrained polls node name until it holds no replica or the control
// plane no longer knows it (nil, nil). When timeout passes first it returns
// the node as last seen and no diagnostics, for the caller to say what to do;
// an error (doing says what was being done) or an interruption comes back
// as diagnostics.
//
// A drain the control plane reports blocked (a replica no other node can
// take) fails at once with its reason and hint.
func pollDrained(ctx context.Context, c *Client, name string, timeout time.Duration, doing, hint string) (*managev1.Node, diag.Diagnostics) {
	var diags diag.Diagnostics
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(nodePollInterval)
	defer tick.Stop()
	for {
		n, err := c.GetNode(ctx, name)
		if IsNotFound(err) || (err == nil && n.GetReplicas() == 0) {
			return nil, nil
		}
		if err != nil {
			diags.Append(c.Diag(doing, err))
			return nil, diags
		}
		if b := n.GetDrainBlocked(); b != "" {
			diags.Append(drainBlockedError(name, b, hint))
			return nil, diags
		}
		if time.Now().After(deadline) {
			return n, nil
		}
		select {
		case <-ctx.Done():
			diags.AddError(fmt.Sprintf("Interrupted while draining node %s", name), ctx.Err().Error())
			return nil, diags
		case <-tick.C:
		}
	}
}

// GetNode returns a node the control plane knows (connected or within its
// grace period).
func (c *Client) GetNode(ctx context.Context, id string) (*managev1.Node, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	return c.manage.GetNode(ctx, &managev1.GetNodeRequest{Id: id})
}

// DeclareNode creates or replaces the control plane's copy of a node's
// declaration.
func (c *Client) DeclareNode(ctx context.Context, nd *managev1.NodeDeclaration) (*managev1.NodeDeclaration, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	return c.manage.DeclareNode(ctx, &managev1.DeclareNodeRequest{Node: nd})
}

// GetNodeDeclaration returns the control plane's copy of a declaration.
func (c *Client) GetNodeDeclaration(ctx context.Context, name string) (*managev1.NodeDeclaration, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	return c.manage.GetNodeDeclaration(ctx, &managev1.GetNodeDeclarationRequest{Name: name})
}

// DrainNode starts moving a node's replicas elsewhere.
func (c *Client) DrainNode(ctx context.Context, name string) (int32, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := c.manage.DrainNode(ctx, &managev1.DrainNodeRequest{Name: name})
	return resp.GetReplicas(), err
}

// CancelDrain lets a draining node take work again.
func (c *Client) CancelDrain(ctx context.Context, name string) (int32, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := c.manage.DrainNode(ctx, &managev1.DrainNodeRequest{Name: name, Cancel: true})
	return resp.GetReplicas(), err
}

// RemoveNode forgets a node's declaration and, with revoke, revokes its
// identity.
func (c *Client) RemoveNode(ctx context.Context, name string, revoke bool) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	_, err := c.manage.RemoveNode(ctx, &managev1.RemoveNodeRequest{Name: name, Revoke: revoke})
	return err
}

// CheckNodeEngines asks a connected node's agent to run its engine checks
// again and returns the node once the results arrived, waiting up to wait
// for them.
func (c *Client) CheckNodeEngines(ctx context.Context, name string, wait time.Duration) (*managev1.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, wait+callTimeout)
	defer cancel()
	resp, err := c.manage.CheckNodeEngines(ctx, &managev1.CheckNodeEnginesRequest{Name: name, TimeoutMs: wait.Milliseconds()})
	return resp.GetNode(), err
}
