package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/float64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/float64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/spec"
)

var (
	_ resource.ResourceWithConfigure      = (*budgetResource)(nil)
	_ resource.ResourceWithImportState    = (*budgetResource)(nil)
	_ resource.ResourceWithValidateConfig = (*budgetResource)(nil)
)

// budgetResource is llmgw_budget: what a project may spend in a day, a
// month or in total, and what happens once it is spent.
type budgetResource struct {
	client *Client
}

func newBudgetResource() resource.Resource { return &budgetResource{} }

// budgetResourceModel is llmgw_budget's state.
type budgetResourceModel struct {
	ID            types.String  `tfsdk:"id"`
	Project       types.String  `tfsdk:"project"`
	Period        types.String  `tfsdk:"period"`
	Amount        types.Float64 `tfsdk:"amount"`
	OnExhausted   types.String  `tfsdk:"on_exhausted"`
	FallbackModel types.String  `tfsdk:"fallback_model"`
	// FallbackAllowance is what the fallback model may spend beyond amount.
	FallbackAllowance types.Float64 `tfsdk:"fallback_allowance"`
}

func (r *budgetResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_budget"
}

func (r *budgetResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "A project's budget for one period: a project has at most one budget per period (day, month, total). " +
			"Requests are charged at the models' prices (`pricing` on `llmgw_model`, else the control plane's `auth.default_price`); " +
			"admission reserves the worst case and never charges more than it reserved, so parallel requests cannot overspend it: " +
			"the project's spend in the period stays within `amount` + `fallback_allowance`. " +
			"When no model the project may use has a price, apply shows a warning: such a budget never binds. " +
			"Import with `PROJECT/PERIOD`, e.g. `team-a/month`.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "`PROJECT/PERIOD`.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"project": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: "The project (`llmgw_project.<name>.name`, or `default`). Changing it replaces the budget.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Validators:          []validator.String{stringvalidator.RegexMatches(spec.ProjectNameRE, "must be a project name")},
			},
			"period": schema.StringAttribute{
				Required: true,
				MarkdownDescription: "`day`, `month` (UTC calendar days and months; the budget resets at their start) or `total` (never resets). " +
					"Changing it replaces the budget.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Validators:    []validator.String{stringvalidator.OneOf(spec.BudgetPeriods...)},
			},
			"amount": schema.Float64Attribute{
				Required:            true,
				MarkdownDescription: "What the project may spend in the period, in the unit models are priced in.",
				Validators:          []validator.Float64{float64validator.AtLeast(0)},
			},
			"on_exhausted": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(spec.OnExhaustedRefuse),
				MarkdownDescription: "What a spent budget does: `refuse` (the default: HTTP 402 with an OpenAI error body saying when it resets) " +
					"or `fallback` (requests go to `fallback_model`).",
				Validators: []validator.String{stringvalidator.OneOf(spec.OnExhaustedActions...)},
			},
			"fallback_model": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "The catalog model requests go to once the budget is spent; required with `on_exhausted = \"fallback\"`, not allowed otherwise. " +
					"An alias is accepted; the control plane stores (and serves, and labels metrics with) the model's own name.",
				Validators: []validator.String{stringvalidator.LengthAtLeast(1)},
			},
			"fallback_allowance": schema.Float64Attribute{
				Optional: true, Computed: true, Default: float64default.StaticFloat64(0),
				MarkdownDescription: "What requests served by `fallback_model` may spend in the period beyond `amount`, in the same unit " +
					"(the fallback is charged at its own price). Once that is spent too, requests get HTTP 402. " +
					"The default 0 lets only a free fallback model serve: a priced one is refused, and apply warns. " +
					"Only with `on_exhausted = \"fallback\"`.",
				Validators: []validator.Float64{float64validator.AtLeast(0)},
			},
		},
	}
}

// ValidateConfig checks at plan time that fallback_model is given exactly
// when on_exhausted is fallback.
func (r *budgetResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var cfg budgetResourceModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() || cfg.OnExhausted.IsUnknown() || cfg.FallbackModel.IsUnknown() || cfg.FallbackAllowance.IsUnknown() {
		return
	}
	fallback := cfg.OnExhausted.ValueString() == "fallback"
	if !fallback && !cfg.FallbackAllowance.IsNull() && cfg.FallbackAllowance.ValueFloat64() != 0 {
		resp.Diagnostics.AddAttributeError(path.Root("fallback_allowance"), "fallback_allowance needs on_exhausted = \"fallback\"",
			"fallback_allowance bounds what fallback_model spends once the budget is spent: set on_exhausted = \"fallback\" and fallback_model, or remove it.")
	}
	switch {
	case fallback && cfg.FallbackModel.IsNull():
		resp.Diagnostics.AddAttributeError(path.Root("fallback_model"), "fallback_model is required",
			"on_exhausted = \"fallback\" sends requests to fallback_model once the budget is spent: name a catalog model (usually a cheaper one).")
	case !fallback && !cfg.FallbackModel.IsNull():
		resp.Diagnostics.AddAttributeError(path.Root("fallback_model"), "fallback_model needs on_exhausted = \"fallback\"",
			"fallback_model is only used when on_exhausted = \"fallback\": set that, or remove fallback_model.")
	}
}

func (r *budgetResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.client = clientFrom(req.ProviderData, &resp.Diagnostics)
}

func (r *budgetResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	project, period, ok := strings.Cut(req.ID, "/")
	if !ok || project == "" || period == "" {
		resp.Diagnostics.AddError("Import id is not PROJECT/PERIOD",
			fmt.Sprintf("A budget is imported with its project and period, e.g. `terraform import llmgw_budget.b team-a/month`; got %q.", req.ID))
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("project"), project)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("period"), period)...)
}

func budgetFromAPI(b *managev1.Budget) budgetResourceModel {
	out := budgetResourceModel{
		ID: types.StringValue(b.GetProject() + "/" + b.GetPeriod()), Project: types.StringValue(b.GetProject()),
		Period: types.StringValue(b.GetPeriod()), Amount: types.Float64Value(b.GetAmount()),
		OnExhausted: types.StringValue(b.GetOnExhausted()), FallbackModel: types.StringNull(),
		FallbackAllowance: types.Float64Value(b.GetFallbackAllowance()),
	}
	if b.GetFallbackModel() != "" {
		out.FallbackModel = types.StringValue(b.GetFallbackModel())
	}
	return out
}

func (m budgetResourceModel) toAPI() *managev1.Budget {
	return &managev1.Budget{Project: m.Project.ValueString(), Period: m.Period.ValueString(), Amount: m.Amount.ValueFloat64(),
		OnExhausted: m.OnExhausted.ValueString(), FallbackModel: m.FallbackModel.ValueString(),
		FallbackAllowance: m.FallbackAllowance.ValueFloat64()}
}

// stateFrom is the state for budget b as the control plane holds it,
// keeping the fallback model's name as the configuration wrote it when it
// is an alias of the model the control plane stored (which stores the
// model's own name), so that an alias is no perpetual difference.
func (r *budgetResource) stateFrom(ctx context.Context, b *managev1.Budget, written types.String) (budgetResourceModel, error) {
	out := budgetFromAPI(b)
	if written.IsNull() || written.IsUnknown() || out.FallbackModel.IsNull() || written.ValueString() == out.FallbackModel.ValueString() {
		return out, nil
	}
	m, err := r.client.GetModel(ctx, b.GetFallbackModel())
	if IsNotFound(err) {
		return out, nil // the model left the catalog: show what is stored
	}
	if err != nil {
		return out, err
	}
	for _, a := range m.GetAliases() {
		if a == written.ValueString() {
			out.FallbackModel = written
		}
	}
	return out, nil
}

func (m budgetResourceModel) what() string {
	return "budget " + m.Project.ValueString() + "/" + m.Period.ValueString()
}

func (r *budgetResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan budgetResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	// PutBudget replaces; creating must not take over a budget someone
	// else set: that one is imported.
	if _, err := r.client.GetBudget(ctx, plan.Project.ValueString(), plan.Period.ValueString()); err == nil {
		resp.Diagnostics.AddError("The budget already exists in the llmgw control plane",
			fmt.Sprintf("%s already exists. To manage it with Terraform, import it: terraform import <address> %s/%s",
				plan.what(), plan.Project.ValueString(), plan.Period.ValueString()))
		return
	} else if !IsNotFound(err) {
		resp.Diagnostics.Append(r.client.Diag("reading "+plan.what(), err))
		return
	}
	b, err := r.client.PutBudget(ctx, plan.toAPI())
	if err != nil {
		resp.Diagnostics.Append(r.client.Diag("creating "+plan.what(), err))
		return
	}
	addWarnings(&resp.Diagnostics, plan.what(), b.GetWarnings())
	state, err := r.stateFrom(ctx, b, plan.FallbackModel)
	if err != nil {
		resp.Diagnostics.Append(r.client.Diag("reading the fallback model of "+plan.what(), err))
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

func (r *budgetResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var prior budgetResourceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &prior)...)
	if resp.Diagnostics.HasError() {
		return
	}
	b, err := r.client.GetBudget(ctx, prior.Project.ValueString(), prior.Period.ValueString())
	if IsNotFound(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		resp.Diagnostics.Append(r.client.Diag("reading "+prior.what(), err))
		return
	}
	state, err := r.stateFrom(ctx, b, prior.FallbackModel)
	if err != nil {
		resp.Diagnostics.Append(r.client.Diag("reading the fallback model of "+prior.what(), err))
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

func (r *budgetResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan budgetResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	b, err := r.client.PutBudget(ctx, plan.toAPI())
	if err != nil {
		resp.Diagnostics.Append(r.client.Diag("updating "+plan.what(), err))
		return
	}
	addWarnings(&resp.Diagnostics, plan.what(), b.GetWarnings())
	state, err := r.stateFrom(ctx, b, plan.FallbackModel)
	if err != nil {
		resp.Diagnostics.Append(r.client.Diag("reading the fallback model of "+plan.what(), err))
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

func (r *budgetResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var prior budgetResourceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &prior)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := r.client.DeleteBudget(ctx, prior.Project.ValueString(), prior.Period.ValueString()); err != nil && !IsNotFound(err) {
		resp.Diagnostics.Append(r.client.Diag("deleting "+prior.what(), err))
	}
}

// PutBudget creates or replaces a budget.
func (c *Client) PutBudget(ctx context.Context, b *managev1.Budget) (*managev1.Budget, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	return c.manage.PutBudget(ctx, &managev1.PutBudgetRequest{Budget: b})
}

// GetBudget returns a budget.
func (c *Client) GetBudget(ctx context.Context, project, period string) (*managev1.Budget, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	return c.manage.GetBudget(ctx, &managev1.GetBudgetRequest{Project: project, Period: period})
}

// DeleteBudget removes a budget.
func (c *Client) DeleteBudget(ctx context.Context, project, period string) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	_, err := c.manage.DeleteBudget(ctx, &managev1.DeleteBudgetRequest{Project: project, Period: period})
	return err
}
