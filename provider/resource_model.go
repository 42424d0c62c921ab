package provider

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/objectdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/api/specpb"
	"github.com/llmgw/llmgw/spec"
)

// Defaults of the resource's own settings (not part of the model).
const (
	defaultPlacementCheck = "warn"
	defaultRolloutTimeout = "10m"
	rolloutPollInterval   = 500 * time.Millisecond
)

var (
	_ resource.ResourceWithConfigure      = (*modelResource)(nil)
	_ resource.ResourceWithImportState    = (*modelResource)(nil)
	_ resource.ResourceWithModifyPlan     = (*modelResource)(nil)
	_ resource.ResourceWithValidateConfig = (*modelResource)(nil)
)

// modelResource is llmgw_model: one model of the catalog.
type modelResource struct {
	client *Client
}

func newModelResource() resource.Resource { return &modelResource{} }

// modelResourceModel is llmgw_model's state.
type modelResourceModel struct {
	Name           types.String `tfsdk:"name"`
	Aliases        types.List   `tfsdk:"aliases"`
	Source         types.String `tfsdk:"source"`
	RoutingProfile types.String `tfsdk:"routing_profile"`
	ContextLength  types.Int64  `tfsdk:"context_length"`
	MaxOutput      types.Int64  `tfsdk:"max_output"`
	Scaling        types.Object `tfsdk:"scaling"`
	Pricing        types.Object `tfsdk:"pricing"`
	Profiles       types.List   `tfsdk:"profiles"`
	Rollout        types.String `tfsdk:"rollout"`
	PlacementCheck types.String `tfsdk:"placement_check"`
	WaitForRollout types.Bool   `tfsdk:"wait_for_rollout"`
	RolloutTimeout types.String `tfsdk:"rollout_timeout"`
	Generation     types.String `tfsdk:"generation"`
	Origin         types.String `tfsdk:"origin"`
	Status         types.Object `tfsdk:"status"`
	RolloutPlan    types.String `tfsdk:"rollout_plan"`
}

// The attribute types of the nested objects, from their schemas.
var (
	scalingTypes = attrTypes(scalingSchema())
	pricingTypes = attrTypes(pricingSchema())
	profileTypes = attrTypes(profileSchema())
	statusTypes  = attrTypes(statusSchema())
)

// attrTypes is the object type of nested attributes.
func attrTypes(attrs map[string]schema.Attribute) map[string]attr.Type {
	out := make(map[string]attr.Type, len(attrs))
	for name, a := range attrs {
		out[name] = a.GetType()
	}
	return out
}

func (r *modelResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_model"
}

func (r *modelResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "A model of the llmgw catalog: what clients ask for, where its weights come from, how it scales and the profiles it can be placed with. " +
			"The attribute names are those of the catalog YAML (`server.yaml`, `llmgw ctl model add -f`). " +
			"A plan dry-runs placement of the planned definition (`placement_check`), and apply waits until the rollout serves (`wait_for_rollout`). " +
			"Models declared in the control plane's `server.yaml` cannot be managed here.",
		Attributes: map[string]schema.Attribute{
			"name": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: "The model's name, what clients ask for: " + spec.NameRule + ". Changing it replaces the model.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"aliases": schema.ListAttribute{
				Optional:            true,
				ElementType:         types.StringType,
				MarkdownDescription: "Other names clients may use for the model. Changing them does not restart replicas.",
			},
			"source": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Where the weights are: an absolute local path (checked on the node, never copied); an `http(s)://` URL of one file, an `http(s)://` URL ending in `/` (a mirror's whole version, read from its manifest), `hf:org/repo[@revision]/file`, `hf:org/repo[@revision]` (every file of the revision), `s3://bucket/key` or `s3://bucket/prefix/` (every object under it), which each node's agent fetches once into its cache (sha256 verified when the source gives one) and gives the engine as a local path; or a repository id (`org/name`) the engine downloads itself; another scheme (`sim://…`) is given to the engine as written. A relative path or a URL without a host is refused. Plan and apply ask a fetched source (`HEAD` of a file, `GET` of a set's manifest, the hub's resolve `HEAD` for an `hf:` file, its revision info for a whole revision; `s3://` is not asked: the nodes hold the credentials) and fail naming it when it answers 404, 410, 401 or 403 (for `hf:`, 404 or 410 only: the control plane holds no hub token); when the control plane cannot reach it they warn that the check was skipped and go on.",
			},
			"rollout": schema.StringAttribute{
				Optional:            true,
				Computed:            true,
				Default:             stringdefault.StaticString(spec.RolloutAuto),
				Validators:          []validator.String{stringvalidator.OneOf(spec.RolloutAuto, spec.RolloutManual)},
				MarkdownDescription: "What an edit that changes how replicas are built (engine, args, source, `tp`, ...; not `weight`, `priority`, pricing, aliases or scaling) does to the running replicas, which are then stale: `auto` (the default) replaces them one at a time, each replacement ready before the replica it replaces stops; `manual` leaves them serving, shown as `ready (stale profile)` and counted in `status.replicas_stale`, until `llmgw ctl rollout NAME`. The plan warns which will happen. Setting it from `manual` to `auto` has the replicas the manual rollout held stale replaced like that (the plan names them); setting it to `manual` restarts no running replica and holds the stale replicas a rollout has yet to replace, while a replica not ready yet (the rollout's replacement, or one a higher `scaling.min` adds) is stopped as surplus once the model's other replicas are enough without it (the plan names both).",
			},
			"routing_profile": schema.StringAttribute{
				Optional:            true,
				Computed:            true,
				Default:             stringdefault.StaticString(spec.DefaultRoutingProfile),
				MarkdownDescription: "How requests are spread over the replicas: `chat` (the default) and `prefix` send requests that share a prompt prefix to the replica holding it in its cache, unless that replica is loaded well beyond the least loaded one; `least-loaded` sends each request to the replica with the fewest requests per unit of weight; `round-robin` takes the replicas in turn. Changing it restarts nothing.",
			},
			"context_length": schema.Int64Attribute{
				Optional:            true,
				Computed:            true,
				Default:             int64default.StaticInt64(0),
				MarkdownDescription: "The most tokens a client may use in one request (prompt and output); 0 means unstated.",
			},
			"max_output": schema.Int64Attribute{
				Optional:            true,
				Computed:            true,
				Default:             int64default.StaticInt64(0),
				MarkdownDescription: "The most tokens one response may have; 0 means unstated. At most `context_length` when that is set.",
			},
			"scaling": schema.SingleNestedAttribute{
				Optional: true,
				Computed: true,
				Default: objectdefault.StaticValue(types.ObjectValueMust(scalingTypes, map[string]attr.Value{
					"min": types.Int64Value(0), "max": types.Int64Value(0), "idle_timeout": types.StringNull(),
				})),
				MarkdownDescription: "Bounds of the replica count. Without it the model is configured but runs no replica (min 0, max 0); min 0 with a higher max loads the model on demand.",
				Attributes:          scalingSchema(),
			},
			"pricing": schema.SingleNestedAttribute{
				Optional: true,
				MarkdownDescription: "What a request to the model costs, per 1,000 tokens, in the unit budgets (`llmgw_budget`) are in. " +
					"Without it the control plane's `auth.default_price` applies. Changing it updates the model in place: no replica restarts.",
				Attributes: pricingSchema(),
			},
			"profiles": schema.ListNestedAttribute{
				Required:            true,
				MarkdownDescription: "The ways the model can be placed, tried by `priority` (higher first). Changing what a profile's replicas are built from (its `name`, `engine`, `tp`, `nodes`, `args`, `env` or `launch_mode`) rolls that profile's replicas: the new replica is ready before the old one stops, and the plan shows `generation` as known after apply. So does adding or removing a profile, which rolls no other profile's replicas, and so does editing any other profile field but `weight` and `priority`, which restarts nothing (a control plane of an earlier release, which plan or apply may reach during an upgrade, reports a whole-model hash that those edits change). `rollout_plan` says which replicas a change replaces.",
				NestedObject: schema.NestedAttributeObject{
					Attributes: profileSchema(),
				},
			},
			"placement_check": schema.StringAttribute{
				Optional:            true,
				Computed:            true,
				Default:             stringdefault.StaticString(defaultPlacementCheck),
				MarkdownDescription: "What a plan does when the control plane's dry run finds no node for the planned profiles: `error` fails the plan, `warn` (the default) shows the reasons as a warning, `off` skips the check.",
				Validators:          []validator.String{stringvalidator.OneOf("error", "warn", "off")},
			},
			"wait_for_rollout": schema.BoolAttribute{
				Optional:            true,
				Computed:            true,
				Default:             booldefault.StaticBool(true),
				MarkdownDescription: "Whether apply waits until `scaling.min` replicas of the new definition are ready (default true); with `rollout = \"manual\"` the replicas of an earlier definition that keep serving count, since none is replaced until `llmgw ctl rollout`. Apply fails with the shard's error and the engine's last output when a replica fails (one not ready within its profile's `startup_timeout` plus 30 seconds fails).",
			},
			"rollout_timeout": schema.StringAttribute{
				Optional:            true,
				Computed:            true,
				Default:             stringdefault.StaticString(defaultRolloutTimeout),
				MarkdownDescription: "How long apply waits for the rollout, written like `90s` or `10m` (default `" + defaultRolloutTimeout + "`).",
				Validators:          []validator.String{durationValidator{}},
			},
			"generation": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "A hash over what each profile's replicas are built from (the model's `name`, `source` and `context_length`, each profile's `name`, `engine`, `tp`, `nodes`, `args`, `env` and `launch_mode`). It changes when a profile is added or removed or any profile's replicas would be rebuilt; a running replica is rolled only when its own profile's part changed (`rollout_plan` says which).",
			},
			"origin": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "Where the definition comes from: `api` for models managed through the management API.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"status": schema.SingleNestedAttribute{
				Computed:            true,
				MarkdownDescription: "The model's status when last read.",
				Attributes:          statusSchema(),
			},
			"rollout_plan": rolloutPlanSchema(),
		},
	}
}

// scalingSchema is the attributes of scaling, spec.Scaling's fields.
func scalingSchema() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"min": schema.Int64Attribute{
			Optional: true,
			Computed: true,
			Default:  int64default.StaticInt64(0),
			MarkdownDescription: "Replicas kept running at all times, at most " + strconv.Itoa(spec.MaxReplicas) + ". Apply waits for this many ready replicas of the new definition. " +
				"A plan warns when the fleet cannot hold this many now (the model is stored all the same, and the rest are placed as nodes join or free up).",
		},
		"max": schema.Int64Attribute{
			Optional: true,
			Computed: true,
			MarkdownDescription: "Most replicas; at least `min`, at most " + strconv.Itoa(spec.MaxReplicas) + ", and `min` when left out. " +
				"Above `min` the model follows its load between the two: a replica is added while the requests in flight and waiting stay at or above the control plane's `autoscale.up_load` (0.8 by default) of the ready replicas' summed `weight`, and one is stopped while they stay at or below its `autoscale.down_load` (0.3); with `min` 0 the model also loads on demand.",
			PlanModifiers: []planmodifier.Int64{maxDefaultsToMin{}},
		},
		"idle_timeout": schema.StringAttribute{
			Optional:            true,
			MarkdownDescription: "Once no request has asked for the model this long and none is in flight or waiting, the replicas above `min` are stopped (with `min` 0, every one: the cards go back to the pool). Written like `30s`, `5m` or `1h30m`; unset, 15m.",
			Validators:          []validator.String{durationSyntax{}},
		},
	}
}

// pricingSchema is the attributes of pricing, spec.Pricing's fields.
func pricingSchema() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"prompt_per_1k": schema.Float64Attribute{
			Required:            true,
			MarkdownDescription: "Price of 1,000 prompt (input) tokens: a finite number of at least 0.",
		},
		"completion_per_1k": schema.Float64Attribute{
			Required:            true,
			MarkdownDescription: "Price of 1,000 completion (output) tokens: a finite number of at least 0.",
		},
	}
}

// statusSchema is the attributes of status.
func statusSchema() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"state":            schema.StringAttribute{Computed: true, MarkdownDescription: "`serving`, `starting`, `unplaced` (a replica is wanted and no node can hold it), `idle` (wanting no replica: loaded on demand and not asked for, or `min` 0 and `max` 0) or `failed` (a replica is wanted and the last one failed)."},
		"message":          schema.StringAttribute{Computed: true, MarkdownDescription: "Why the model is not serving: the last failure, or why no node can hold it; for a model loaded on demand that is asked for and cannot be loaded, what its requests are told."},
		"replicas_ready":   schema.Int64Attribute{Computed: true, MarkdownDescription: "Ready replicas in routing: not one draining (scaled down, idle or evicted to make room, it takes no new request and stops once the requests in flight on it are done)."},
		"replicas_desired": schema.Int64Attribute{Computed: true, MarkdownDescription: "Replicas the control plane wants now: `scaling.min`, more while the load asks for them (up to `scaling.max`), and 1 while a model loaded on demand is asked for."},
		"replicas_total":   schema.Int64Attribute{Computed: true, MarkdownDescription: "Replicas running: starting, ready or draining."},
		"replicas_stale":   schema.Int64Attribute{Computed: true, MarkdownDescription: "Live replicas placed for an earlier definition of the model (a profile change since): they serve until replaced, by `rollout`."},
	}
}

// profileSchema is the attributes of a profile, spec.Profile's fields. The
// rules between values are spec's (ValidateConfig); a validator here only
// checks what spec cannot see, like a duration's spelling.
func profileSchema() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"name": schema.StringAttribute{
			Required:            true,
			MarkdownDescription: "The profile's name, unique within the model: " + spec.NameRule + ".",
		},
		"engine": schema.StringAttribute{
			Required:            true,
			MarkdownDescription: "The inference engine: one of `" + strings.Join(spec.KnownEngines, "`, `") + "`.",
		},
		"gpu_class": schema.StringAttribute{
			Optional:            true,
			MarkdownDescription: "The GPU class as nodes report it (e.g. `h100-80g`); left out, the profile runs on CPU.",
		},
		"tp": schema.Int64Attribute{
			Optional: true, Computed: true, Default: int64default.StaticInt64(0),
			MarkdownDescription: "Tensor-parallel width: GPUs per node for one replica. At least 1 when `gpu_class` is set.",
		},
		"nodes": schema.Int64Attribute{
			Optional: true, Computed: true, Default: int64default.StaticInt64(spec.DefaultNodes),
			MarkdownDescription: "How many nodes one replica spans (one shard per node); default 1. Above 1 only for `vllm`, `sglang` and `sim`.",
		},
		"weight": schema.Int64Attribute{
			Optional: true, Computed: true, Default: int64default.StaticInt64(spec.DefaultWeight),
			MarkdownDescription: "The profile's share of traffic among ready replicas, and what one of its replicas carries at once: the requests in flight per replica at which a model with `scaling.max` above `min` counts as fully loaded (`llmgw ctl bench MODEL --save` measures and sets it); default 1. Changing it restarts nothing: running replicas of the profile are re-weighed in place.",
		},
		"priority": schema.Int64Attribute{
			Optional: true, Computed: true, Default: int64default.StaticInt64(0),
			MarkdownDescription: "Placement order among profiles: higher is tried first. Changing it restarts nothing.",
		},
		"startup_timeout": schema.StringAttribute{
			Optional: true, Computed: true, Default: stringdefault.StaticString(spec.DefaultStartupTimeout.String()),
			MarkdownDescription: "How long a shard may take to become ready, like `90s` or `10m` (default `" + spec.DefaultStartupTimeout.String() + "`); the replica fails 30 seconds after it. " +
				"It is, in practice, the only bound on the replicas of a rollout of a new build: an earlier not-ready report needs a start of the same build measured on each of the replica's nodes (see Apply and the rollout).",
			Validators: []validator.String{durationSyntax{}},
		},
		"min_memory_gb": schema.Int64Attribute{
			Optional: true, Computed: true, Default: int64default.StaticInt64(0),
			MarkdownDescription: "Host memory a node needs free, in GB.",
		},
		"min_disk_gb": schema.Int64Attribute{
			Optional: true, Computed: true, Default: int64default.StaticInt64(0),
			MarkdownDescription: "Disk a node needs free for the weights, in GB.",
		},
		"labels": schema.MapAttribute{
			Optional: true, ElementType: types.StringType,
			MarkdownDescription: "Node labels a node must carry to hold the profile.",
		},
		"args": schema.ListAttribute{
			Optional: true, ElementType: types.StringType,
			MarkdownDescription: "Arguments passed to the engine after those llmgw sets. Changing them rolls the replicas. For `llamacpp`, an explicit `--ctx-size` (`-c`) divided by its `--parallel` (`-np`, default 1) slots must be at least `context_length`: the plan refuses it otherwise, naming both numbers.",
		},
		"env": schema.MapAttribute{
			Optional: true, ElementType: types.StringType,
			MarkdownDescription: "Environment added to the engine's last, so it can override what llmgw sets (e.g. `NCCL_SOCKET_IFNAME`).",
		},
		"launch_mode": schema.StringAttribute{
			Optional:            true,
			MarkdownDescription: "How vLLM runs across GPUs and nodes: `mp` (its own processes, the default) or `ray`. Only for `vllm`.",
		},
	}
}

// ValidateConfig checks the definition with spec's own rules, those the
// control plane applies to a request (see modelProblems).
func (r *modelResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m modelResourceModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(modelProblems(m)...)
}

func (r *modelResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.client = clientFrom(req.ProviderData, &resp.Diagnostics)
}

func (r *modelResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("name"), req, resp)
}

// keepsGeneration reports whether changing old into m keeps the model's
// generation whatever control plane answers the apply: only when both
// hashes a control plane may report are unchanged, what every profile's
// replicas are built from (spec.Generation, this release's) and the whole
// model less weights and priorities (spec.LegacyGeneration, an earlier
// release's). In HA with control planes of mixed releases, plan and apply
// may reach different leaders, and the value the plan refreshed does not
// say which one apply will reach: keeping the generation when only one
// hash is unchanged would have apply find another value than the plan
// promised. An edit that changes one of them leaves it known after apply.
func keepsGeneration(old, m spec.Model) bool {
	return spec.Generation(old) == spec.Generation(m) && spec.LegacyGeneration(old) == spec.LegacyGeneration(m)
}

// ModifyPlan asks the control plane to dry-run placement of the planned
// definition when it is new, its profiles changed or its scaling.min rose,
// reports a model no node can hold as placement_check says, and warns of a
// scaling.min above what the fleet holds now.
func (r *modelResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return
	}
	if req.Plan.Raw.Equal(req.State.Raw) {
		// Nothing changed (the usual case for most resources of a catalog):
		// the generation is the stored one and there is nothing to dry-run.
		return
	}
	var plan modelResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	m, known := plan.toSpec()
	var prior modelResourceModel
	if !req.State.Raw.IsNull() {
		resp.Diagnostics.Append(req.State.Get(ctx, &prior)...)
	}
	old, priorKnown := prior.toSpec()
	priorKnown = priorKnown && !req.State.Raw.IsNull()
	if known && priorKnown && keepsGeneration(old, m) {
		// Neither the build of any profile's replicas nor the whole-model
		// hash an earlier release reports changed: any control plane keeps
		// the generation. (A change of the first rolls only the replicas
		// whose own profile changed: rollout_plan says which.)
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("generation"), prior.Generation)...)
	}
	if r.client == nil || !known {
		return
	}
	check := plan.PlacementCheck.ValueString()
	dryRun := !plan.PlacementCheck.IsUnknown() && check != "off"
	// rollout_plan: what happens to running replicas, where new ones go.
	ex, err := r.planRollout(ctx, resp, m, old, priorKnown, dryRun)
	if err != nil {
		resp.Diagnostics.Append(r.client.Diag("planning placement of model "+m.Name, err))
		return
	}
	if !dryRun {
		return
	}
	sameProfiles := priorKnown && slices.EqualFunc(old.Profiles, m.Profiles, spec.Profile.Equal)
	if sameProfiles && m.Scaling.Min <= old.Scaling.Min && m.Source == old.Source {
		return
	}
	// The dry run also checks the source (runtime/sourcecheck): a clear
	// miss is its error, a check it could not make one of its warnings.
	if ex == nil {
		ex, err = r.client.PlanPlacement(ctx, specpb.ModelToProto(m))
		if err != nil {
			resp.Diagnostics.Append(r.client.Diag("planning placement of model "+m.Name, err))
			return
		}
	}
	var scaling []string
	for _, w := range ex.GetWarnings() {
		if flagWarning(m.Name, w, &resp.Diagnostics) {
			continue
		}
		if !strings.HasPrefix(w, "source ") {
			scaling = append(scaling, w)
			continue
		}
		resp.Diagnostics.AddAttributeWarning(path.Root("source"),
			fmt.Sprintf("The control plane did not check the source of model %s", m.Name), w+".")
	}
	if ex.GetPlaced() || sameProfiles {
		// A scaling.min above what the fleet holds now is a warning
		// whatever placement_check says: nodes may join later.
		for _, w := range scaling {
			resp.Diagnostics.AddAttributeWarning(path.Root("scaling").AtName("min"),
				fmt.Sprintf("Model %s asks for more replicas than the fleet holds", m.Name),
				"The control plane's dry run of the planned definition: "+w+".\n\n"+
					"Apply will store the model and place the replicas that fit; with wait_for_rollout it then fails, once the others have found no node for "+stallBound+", naming why "+
					"(the model stays in the catalog and the rest are placed when nodes can hold them). Lower scaling.min, or add nodes, to have them all.")
		}
		return
	}
	summary := fmt.Sprintf("No node can hold model %s", m.Name)
	detail := "The control plane's dry run of the planned definition placed no replica:\n\n" + strings.TrimSpace(ex.GetText())
	if check == "error" {
		resp.Diagnostics.AddAttributeError(path.Root("profiles"), summary,
			detail+"\n\nChange the profiles or the fleet, or set placement_check = \"warn\" to apply anyway.")
		return
	}
	resp.Diagnostics.AddAttributeWarning(path.Root("profiles"), summary,
		detail+"\n\n"+unplacedApplyNote(plan.WaitForRollout.ValueBool(), !req.State.Raw.IsNull()))
}

func (r *modelResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan modelResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	m, known := plan.toSpec()
	if !known {
		resp.Diagnostics.AddError("Model definition not known at apply", "Some attribute of llmgw_model "+plan.Name.ValueString()+" is still unknown at apply. This is a bug in the llmgw provider; please report it.")
		return
	}
	pm, err := r.client.CreateModel(ctx, specpb.ModelToProto(m))
	if err != nil {
		resp.Diagnostics.Append(r.client.Diag("creating model "+m.Name, err))
		return
	}
	r.settle(ctx, pm, plan, m, &resp.State, &resp.Diagnostics)
}

func (r *modelResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, prior modelResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &prior)...)
	if resp.Diagnostics.HasError() {
		return
	}
	m, known := plan.toSpec()
	if !known {
		resp.Diagnostics.AddError("Model definition not known at apply", "Some attribute of llmgw_model "+plan.Name.ValueString()+" is still unknown at apply. This is a bug in the llmgw provider; please report it.")
		return
	}
	var pm *managev1.Model
	var err error
	if old, ok := prior.toSpec(); ok && old.Equal(m) {
		// Only the resource's own settings changed.
		pm, err = r.client.GetModel(ctx, m.Name)
	} else {
		pm, err = r.client.UpdateModel(ctx, specpb.ModelToProto(m))
	}
	if err != nil {
		resp.Diagnostics.Append(r.client.Diag("updating model "+m.Name, err))
		return
	}
	r.settle(ctx, pm, plan, m, &resp.State, &resp.Diagnostics)
}

// stateSetter is the part of tfsdk.State that settle uses.
type stateSetter interface {
	Set(ctx context.Context, val any) diag.Diagnostics
}

// settle records what the control plane answered and, when
// wait_for_rollout is set, waits for the rollout and records the status
// again. The state is saved before waiting, so a failed rollout leaves the
// model in state (tainted on create).
func (r *modelResource) settle(ctx context.Context, pm *managev1.Model, plan modelResourceModel, m spec.Model, st stateSetter, diags *diag.Diagnostics) {
	state, d := fromAPI(pm, plan)
	diags.Append(d...)
	diags.Append(st.Set(ctx, state)...)
	if diags.HasError() || !plan.WaitForRollout.ValueBool() {
		return
	}
	timeout, err := time.ParseDuration(plan.RolloutTimeout.ValueString())
	if err != nil {
		timeout, _ = time.ParseDuration(defaultRolloutTimeout)
	}
	final, wd := waitRollout(ctx, r.client, m.Name, m.Scaling.Min, m.ManualRollout(), timeout)
	diags.Append(wd...)
	if final != nil {
		state, d = fromAPI(final, plan)
		diags.Append(d...)
		diags.Append(st.Set(ctx, state)...)
	}
}

func (r *modelResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var prior modelResourceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &prior)...)
	if resp.Diagnostics.HasError() {
		return
	}
	pm, err := r.client.GetModel(ctx, prior.Name.ValueString())
	if IsNotFound(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		resp.Diagnostics.Append(r.client.Diag("reading model "+prior.Name.ValueString(), err))
		return
	}
	state, d := fromAPI(pm, prior)
	resp.Diagnostics.Append(d...)
	if state.PlacementCheck.IsNull() {
		state.PlacementCheck = types.StringValue(defaultPlacementCheck)
	}
	if state.WaitForRollout.IsNull() {
		state.WaitForRollout = types.BoolValue(true)
	}
	if state.RolloutTimeout.IsNull() {
		state.RolloutTimeout = types.StringValue(defaultRolloutTimeout)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

func (r *modelResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var prior modelResourceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &prior)...)
	if resp.Diagnostics.HasError() {
		return
	}
	err := r.client.DeleteModel(ctx, prior.Name.ValueString())
	if err != nil && !IsNotFound(err) {
		resp.Diagnostics.Append(r.client.Diag("deleting model "+prior.Name.ValueString(), err))
	}
}

// waitRollout polls the model until scaling.min replicas built from its
// current definition (not stale) are ready; with a manual rollout, stale
// replicas count too,
// since the control plane keeps them serving, stale, and places no
// replacement until llmgw ctl rollout asks (waiting for one would only time
// out). It fails with the replica's error and its shards' last output when a
// replica of this rollout fails, with the status message when the model
// reports failed or no node can hold it, and with the ready count at the
// timeout. It returns the model as last read.
func waitRollout(ctx context.Context, c *Client, name string, want int, manual bool, timeout time.Duration) (*managev1.Model, diag.Diagnostics) {
	var diags diag.Diagnostics
	started := time.Now()
	deadline := started.Add(timeout)
	tick := time.NewTicker(rolloutPollInterval)
	defer tick.Stop()
	for {
		pm, err := c.GetModel(ctx, name)
		if err != nil {
			diags.Append(c.Diag("waiting for the rollout of model "+name, err))
			return nil, diags
		}
		reps, err := c.ListReplicas(ctx, name)
		if err != nil {
			diags.Append(c.Diag("waiting for the rollout of model "+name, err))
			return pm, diags
		}
		ready, failed := rolloutProgress(reps, pm.GetGeneration(), started, manual)
		st := pm.GetStatus()
		switch {
		case ready >= want:
			return pm, nil
		case failed != nil:
			diags.AddError(fmt.Sprintf("Rollout of model %s failed", name), replicaFailure(failed)+"\n\n"+failureHint(failed))
			return pm, diags
		case st.GetState() == "failed" || (st.GetState() == "unplaced" && st.GetMessage() != ""):
			diags.AddError(fmt.Sprintf("Rollout of model %s cannot proceed", name),
				fmt.Sprintf("The model is %s: %s\n\nFix the profile or the fleet and apply again; the model stays in the catalog.", st.GetState(), strings.TrimSpace(st.GetMessage())))
			return pm, diags
		case st.GetStalled() != "":
			diags.Append(rolloutStalled(name, st))
			return pm, diags
		case time.Now().After(deadline):
			detail := fmt.Sprintf("%d of %d replicas of generation %s were ready after %s; the model is %s", ready, want, pm.GetGeneration(), timeout, st.GetState())
			if msg := strings.TrimSpace(st.GetMessage()); msg != "" {
				detail += ": " + msg
			}
			diags.AddError(fmt.Sprintf("Timed out waiting for the rollout of model %s", name),
				detail+".\n\nRaise rollout_timeout, or set wait_for_rollout = false to return without waiting.")
			return pm, diags
		}
		select {
		case <-ctx.Done():
			diags.AddError(fmt.Sprintf("Interrupted while waiting for the rollout of model %s", name), ctx.Err().Error())
			return pm, diags
		case <-tick.C:
		}
	}
}

// rolloutProgress counts the ready replicas built from the current
// definition (stale ones too when stale counts: a manual rollout) and
// returns the first current replica that failed since the rollout started.
// A replica is stale when the control plane says so or when its
// model_generation is not the model's generation: a control plane older
// than Replica.stale tells it only that way (and a newer one keeps it
// true).
func rolloutProgress(reps []*managev1.Replica, generation string, started time.Time, staleCounts bool) (int, *managev1.Replica) {
	ready := 0
	var failed *managev1.Replica
	for _, r := range reps {
		if r.GetStale() || r.GetModelGeneration() != generation {
			if staleCounts && r.GetState() == "ready" {
				ready++
			}
			continue
		}
		switch r.GetState() {
		case "ready":
			ready++
		case "failed":
			// A second of slack for clocks of the same machine.
			if failed == nil && r.GetCreatedUnixMs() >= started.Add(-time.Second).UnixMilli() {
				failed = r
			}
		}
	}
	return ready, failed
}

// replicaFailure is a failed replica's error with each shard's error and
// last output lines.
func replicaFailure(r *managev1.Replica) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Replica %s (profile %s) failed: %s", r.GetId(), r.GetProfile(), r.GetError())
	for _, sh := range r.GetShards() {
		if sh.GetError() == "" && len(sh.GetLastOutput()) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n\nShard %d on node %s (%s): %s", sh.GetRank(), sh.GetNode(), sh.GetState(), sh.GetError())
		if out := sh.GetLastOutput(); len(out) > 0 {
			b.WriteString("\nLast engine output:\n  " + strings.Join(out, "\n  "))
		}
	}
	return b.String()
}

// failureHint says what to fix for a failed replica: the source when a
// shard could not fetch its weights, else the profile or the node.
func failureHint(r *managev1.Replica) string {
	for _, sh := range r.GetShards() {
		if strings.HasPrefix(sh.GetError(), "fetching weights:") {
			return "Fix the model's source, or the server it names, and apply again; the model stays in the catalog."
		}
	}
	return "Fix the profile (engine, args, env) or the node, and apply again; the model stays in the catalog."
}

// flagWarning shows a warning of the control plane's engine flag check
// (it starts "engine flags: ": a flag some nodes' engine does not take, or
// a node whose engine help could not be read) on the profiles, and reports
// whether w was one.
func flagWarning(model, w string, diags *diag.Diagnostics) bool {
	rest, ok := strings.CutPrefix(w, "engine flags: ")
	if !ok {
		return false
	}
	diags.AddAttributeWarning(path.Root("profiles"),
		fmt.Sprintf("Engine flags of model %s", model),
		"The control plane looked up each flag of the profiles in the engine's own help on each node: "+rest+".")
	return true
}
