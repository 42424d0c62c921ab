package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/spec"
)

var (
	_ resource.ResourceWithConfigure   = (*fabricResource)(nil)
	_ resource.ResourceWithImportState = (*fabricResource)(nil)
)

// fabricResource is llmgw_fabric: an InfiniBand fabric nodes may declare
// membership of.
type fabricResource struct {
	client *Client
}

func newFabricResource() resource.Resource { return &fabricResource{} }

// fabricResourceModel is llmgw_fabric's state.
type fabricResourceModel struct {
	Name        types.String `tfsdk:"name"`
	Description types.String `tfsdk:"description"`
	Nodes       types.List   `tfsdk:"nodes"`
}

func (r *fabricResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_fabric"
}

func (r *fabricResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "An InfiniBand fabric. Nodes (`llmgw_node`) name the fabric they are in and the adapters that attach them to it; " +
			"multi-node replicas are placed only on nodes with that fabric in service. " +
			"A fabric that declared nodes are still in cannot be destroyed: the error names them.",
		Attributes: map[string]schema.Attribute{
			"name": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: "The fabric's name, as nodes refer to it (no spaces or slashes). Changing it replaces the fabric.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Validators: []validator.String{
					stringvalidator.LengthAtLeast(1),
					stringvalidator.RegexMatches(spec.FabricNameRE, "must not contain spaces or slashes"),
				},
			},
			"description": schema.StringAttribute{
				Optional:            true,
				Computed:            true,
				Default:             stringdefault.StaticString(""),
				MarkdownDescription: "What the fabric is, for people reading `llmgw ctl fabrics`.",
			},
			"nodes": schema.ListAttribute{
				Computed:            true,
				ElementType:         types.StringType,
				MarkdownDescription: "The declared nodes in this fabric, sorted, when last read.",
			},
		},
	}
}

func (r *fabricResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.client = clientFrom(req.ProviderData, &resp.Diagnostics)
}

func (r *fabricResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("name"), req, resp)
}

// fabricFromAPI is the state of a fabric as the control plane returned it.
func fabricFromAPI(f *managev1.Fabric) fabricResourceModel {
	nodes := make([]types.String, 0, len(f.GetNodes()))
	for _, n := range f.GetNodes() {
		nodes = append(nodes, types.StringValue(n))
	}
	list, _ := types.ListValueFrom(context.Background(), types.StringType, nodes)
	return fabricResourceModel{
		Name:        types.StringValue(f.GetName()),
		Description: types.StringValue(f.GetDescription()),
		Nodes:       list,
	}
}

func (m fabricResourceModel) toAPI() *managev1.Fabric {
	return &managev1.Fabric{Name: m.Name.ValueString(), Description: m.Description.ValueString()}
}

func (r *fabricResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan fabricResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	f, err := r.client.CreateFabric(ctx, plan.toAPI())
	if err != nil {
		resp.Diagnostics.Append(r.client.Diag("creating fabric "+plan.Name.ValueString(), err))
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, fabricFromAPI(f))...)
}

func (r *fabricResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var prior fabricResourceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &prior)...)
	if resp.Diagnostics.HasError() {
		return
	}
	f, err := r.client.GetFabric(ctx, prior.Name.ValueString())
	if IsNotFound(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		resp.Diagnostics.Append(r.client.Diag("reading fabric "+prior.Name.ValueString(), err))
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, fabricFromAPI(f))...)
}

func (r *fabricResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan fabricResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	f, err := r.client.UpdateFabric(ctx, plan.toAPI())
	if err != nil {
		resp.Diagnostics.Append(r.client.Diag("updating fabric "+plan.Name.ValueString(), err))
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, fabricFromAPI(f))...)
}

// Delete removes the fabric; the control plane refuses while declared nodes
// are in it, and its message names them.
func (r *fabricResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var prior fabricResourceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &prior)...)
	if resp.Diagnostics.HasError() {
		return
	}
	err := r.client.DeleteFabric(ctx, prior.Name.ValueString())
	if err != nil && !IsNotFound(err) {
		resp.Diagnostics.Append(r.client.Diag("deleting fabric "+prior.Name.ValueString(), err))
	}
}

// CreateFabric declares a fabric.
func (c *Client) CreateFabric(ctx context.Context, f *managev1.Fabric) (*managev1.Fabric, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	return c.manage.CreateFabric(ctx, &managev1.CreateFabricRequest{Fabric: f})
}

// GetFabric returns a fabric with its declared nodes.
func (c *Client) GetFabric(ctx context.Context, name string) (*managev1.Fabric, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	return c.manage.GetFabric(ctx, &managev1.GetFabricRequest{Name: name})
}

// UpdateFabric changes a fabric's description.
func (c *Client) UpdateFabric(ctx context.Context, f *managev1.Fabric) (*managev1.Fabric, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	return c.manage.UpdateFabric(ctx, &managev1.UpdateFabricRequest{Fabric: f})
}

// DeleteFabric removes a fabric no declared node is in.
func (c *Client) DeleteFabric(ctx context.Context, name string) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	_, err := c.manage.DeleteFabric(ctx, &managev1.DeleteFabricRequest{Name: name})
	return err
}
