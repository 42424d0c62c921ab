package provider

import (
	"context"
	"fmt"
	"sort"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/setvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/setdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/spec"
)

// maxRetainHours is the control plane's longest content retention (the
// store's MaxRetainHours): ten years.
const maxRetainHours = 87600

var (
	_ resource.ResourceWithConfigure   = (*projectResource)(nil)
	_ resource.ResourceWithImportState = (*projectResource)(nil)
)

// projectResource is llmgw_project: the unit of limits, budgets and API
// keys.
type projectResource struct {
	client *Client
}

func newProjectResource() resource.Resource { return &projectResource{} }

// projectResourceModel is llmgw_project's state.
type projectResourceModel struct {
	Name          types.String `tfsdk:"name"`
	RPM           types.Int64  `tfsdk:"rpm"`
	TPM           types.Int64  `tfsdk:"tpm"`
	AllowedModels types.Set    `tfsdk:"allowed_models"`
	ThreadsHours  types.Int64  `tfsdk:"threads_retain_hours"`
	MemoryHours   types.Int64  `tfsdk:"memory_retain_hours"`
}

func (r *projectResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_project"
}

func (r *projectResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "A project: the unit of rate limits, budgets (`llmgw_budget`) and API keys (`llmgw_api_key`). " +
			"A project that still has unrevoked keys cannot be destroyed; destroying it removes its budgets. " +
			"The `default` project always exists and is not managed here.",
		Attributes: map[string]schema.Attribute{
			"name": schema.StringAttribute{
				Required: true,
				MarkdownDescription: "The project's name: letters, digits, `.`, `_` and `-`, at most 63, starting with a letter or digit. " +
					"Changing it replaces the project.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Validators: []validator.String{
					stringvalidator.RegexMatches(spec.ProjectNameRE, "must be "+spec.ProjectNameRule),
					stringvalidator.NoneOf("default"),
				},
			},
			"rpm": schema.Int64Attribute{
				Optional: true, Computed: true, Default: int64default.StaticInt64(0),
				MarkdownDescription: "Requests per minute for the whole project; 0 (the default) leaves it to the control plane's `auth.default_rpm`.",
				Validators:          []validator.Int64{int64validator.AtLeast(0)},
			},
			"tpm": schema.Int64Attribute{
				Optional: true, Computed: true, Default: int64default.StaticInt64(0),
				MarkdownDescription: "Tokens per minute (prompt and completion) for the whole project; 0 (the default) leaves it to `auth.default_tpm`.",
				Validators:          []validator.Int64{int64validator.AtLeast(0)},
			},
			"allowed_models": schema.SetAttribute{
				Optional: true, Computed: true, ElementType: types.StringType,
				Default:             setdefault.StaticValue(types.SetValueMust(types.StringType, nil)),
				MarkdownDescription: "The models (their names, not aliases) the project may use; empty (the default) allows every model.",
				Validators:          []validator.Set{setvalidator.ValueStringsAre(stringvalidator.LengthAtLeast(1))},
			},
			"threads_retain_hours": schema.Int64Attribute{
				Optional: true, Computed: true, Default: int64default.StaticInt64(0),
				MarkdownDescription: "Hours the project keeps conversations (threads sent with `x-llmgw-thread`, and `/v1/responses` stored for `previous_response_id`) after their last turn; " +
					"0 (the default) keeps none, and turning it to 0 deletes what was kept at the next hourly prune; at most 87600 (ten years). The same setting as `llmgw keys threads`.",
				Validators: []validator.Int64{int64validator.Between(0, maxRetainHours)},
			},
			"memory_retain_hours": schema.Int64Attribute{
				Optional: true, Computed: true, Default: int64default.StaticInt64(0),
				MarkdownDescription: "Hours the project keeps its agents' memory notes (`/v1/memory`, the MCP server at `/mcp`) after their last write; " +
					"0 (the default) keeps none; at most 87600 (ten years). The same setting as `llmgw keys memory`.",
				Validators: []validator.Int64{int64validator.Between(0, maxRetainHours)},
			},
		},
	}
}

func (r *projectResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.client = clientFrom(req.ProviderData, &resp.Diagnostics)
}

func (r *projectResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("name"), req, resp)
}

// stringSet is a set of strings in sorted order.
func stringSet(v []string) types.Set {
	sorted := append([]string(nil), v...)
	sort.Strings(sorted)
	vals := make([]attr.Value, 0, len(sorted))
	for _, s := range sorted {
		vals = append(vals, types.StringValue(s))
	}
	return types.SetValueMust(types.StringType, vals)
}

func projectFromAPI(p *managev1.Project) projectResourceModel {
	return projectResourceModel{
		Name: types.StringValue(p.GetName()), RPM: types.Int64Value(p.GetRpm()), TPM: types.Int64Value(p.GetTpm()),
		AllowedModels: stringSet(p.GetAllowedModels()),
		ThreadsHours:  types.Int64Value(int64(p.GetThreadsRetainHours())),
		MemoryHours:   types.Int64Value(int64(p.GetMemoryRetainHours())),
	}
}

func (m projectResourceModel) toAPI() *managev1.Project {
	threads, memory := int32(m.ThreadsHours.ValueInt64()), int32(m.MemoryHours.ValueInt64())
	out := &managev1.Project{Name: m.Name.ValueString(), Rpm: m.RPM.ValueInt64(), Tpm: m.TPM.ValueInt64(),
		ThreadsRetainHours: &threads, MemoryRetainHours: &memory}
	for _, e := range m.AllowedModels.Elements() {
		if s, ok := e.(types.String); ok {
			out.AllowedModels = append(out.AllowedModels, s.ValueString())
		}
	}
	return out
}

// addWarnings turns the warnings the control plane attached to an object
// into Terraform warnings.
func addWarnings(diags *diag.Diagnostics, what string, warnings []string) {
	for _, w := range warnings {
		diags.AddWarning(fmt.Sprintf("llmgw: %s", what), w)
	}
}

func (r *projectResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan projectResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	p, err := r.client.CreateProject(ctx, plan.toAPI())
	if err != nil {
		resp.Diagnostics.Append(r.client.Diag("creating project "+plan.Name.ValueString(), err))
		return
	}
	addWarnings(&resp.Diagnostics, "project "+p.GetName(), p.GetWarnings())
	resp.Diagnostics.Append(resp.State.Set(ctx, projectFromAPI(p))...)
}

func (r *projectResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var prior projectResourceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &prior)...)
	if resp.Diagnostics.HasError() {
		return
	}
	p, err := r.client.GetProject(ctx, prior.Name.ValueString())
	if IsNotFound(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		resp.Diagnostics.Append(r.client.Diag("reading project "+prior.Name.ValueString(), err))
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, projectFromAPI(p))...)
}

func (r *projectResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan projectResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	p, err := r.client.UpdateProject(ctx, plan.toAPI())
	if err != nil {
		resp.Diagnostics.Append(r.client.Diag("updating project "+plan.Name.ValueString(), err))
		return
	}
	addWarnings(&resp.Diagnostics, "project "+p.GetName(), p.GetWarnings())
	resp.Diagnostics.Append(resp.State.Set(ctx, projectFromAPI(p))...)
}

// Delete removes the project; the control plane refuses while it has
// unrevoked keys.
func (r *projectResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var prior projectResourceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &prior)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := r.client.DeleteProject(ctx, prior.Name.ValueString()); err != nil && !IsNotFound(err) {
		resp.Diagnostics.Append(r.client.Diag("deleting project "+prior.Name.ValueString(), err))
	}
}

// CreateProject creates a project.
func (c *Client) CreateProject(ctx context.Context, p *managev1.Project) (*managev1.Project, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	return c.manage.CreateProject(ctx, &managev1.CreateProjectRequest{Project: p})
}

// GetProject returns a project.
func (c *Client) GetProject(ctx context.Context, name string) (*managev1.Project, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	return c.manage.GetProject(ctx, &managev1.GetProjectRequest{Name: name})
}

// UpdateProject replaces a project's limits and allowed models.
func (c *Client) UpdateProject(ctx context.Context, p *managev1.Project) (*managev1.Project, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	return c.manage.UpdateProject(ctx, &managev1.UpdateProjectRequest{Project: p})
}

// DeleteProject deletes a project without live keys.
func (c *Client) DeleteProject(ctx context.Context, name string) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	_, err := c.manage.DeleteProject(ctx, &managev1.DeleteProjectRequest{Name: name})
	return err
}
