package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	managev1 "github.com/llmgw/llmgw/api/managev1"
)

var _ datasource.DataSourceWithConfigure = (*placementDataSource)(nil)

// placementDataSource is llmgw_placement: where one more replica of a
// catalog model would go, and why every other node would not do.
type placementDataSource struct {
	client *Client
}

func newPlacementDataSource() datasource.DataSource { return &placementDataSource{} }

type placementModel struct {
	Model    types.String            `tfsdk:"model"`
	Placed   types.Bool              `tfsdk:"placed"`
	Profile  types.String            `tfsdk:"profile"`
	Text     types.String            `tfsdk:"text"`
	Profiles []profilePlacementModel `tfsdk:"profiles"`
}

type profilePlacementModel struct {
	Profile types.String   `tfsdk:"profile"`
	Placed  types.Bool     `tfsdk:"placed"`
	Summary types.String   `tfsdk:"summary"`
	Nodes   []verdictModel `tfsdk:"nodes"`
}

type verdictModel struct {
	Node     types.String  `tfsdk:"node"`
	Feasible types.Bool    `tfsdk:"feasible"`
	Reason   types.String  `tfsdk:"reason"`
	Score    types.Float64 `tfsdk:"score"`
}

func (d *placementDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_placement"
}

func (d *placementDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Explains placing one more replica of a catalog model: for each profile, every node and why it can or cannot hold the replica — what `llmgw ctl explain-placement` prints.",
		Attributes: map[string]schema.Attribute{
			"model":   schema.StringAttribute{Required: true, MarkdownDescription: "The model's name or one of its aliases."},
			"placed":  schema.BoolAttribute{Computed: true, MarkdownDescription: "Whether some profile can be placed."},
			"profile": schema.StringAttribute{Computed: true, MarkdownDescription: "The profile that would be used; empty when none."},
			"text":    schema.StringAttribute{Computed: true, MarkdownDescription: "The whole explanation as text."},
			"profiles": schema.ListNestedAttribute{
				Computed:            true,
				MarkdownDescription: "One entry per profile, in the order they are tried.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"profile": schema.StringAttribute{Computed: true, MarkdownDescription: "The profile's name."},
					"placed":  schema.BoolAttribute{Computed: true, MarkdownDescription: "Whether a replica of this profile fits."},
					"summary": schema.StringAttribute{Computed: true, MarkdownDescription: "One line: where it goes, or why nowhere."},
					"nodes": schema.ListNestedAttribute{
						Computed:            true,
						MarkdownDescription: "The verdict on every node.",
						NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
							"node":     schema.StringAttribute{Computed: true, MarkdownDescription: "The node id."},
							"feasible": schema.BoolAttribute{Computed: true, MarkdownDescription: "Whether the node can hold a shard."},
							"reason":   schema.StringAttribute{Computed: true, MarkdownDescription: "Why not (e.g. `wrong GPU class`), or notes on the choice."},
							"score":    schema.Float64Attribute{Computed: true, MarkdownDescription: "The ranking score of a feasible node; higher is preferred."},
						}},
					},
				}},
			},
		},
	}
}

func (d *placementDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	d.client = clientFrom(req.ProviderData, &resp.Diagnostics)
}

func (d *placementDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var cfg placementModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	ex, err := d.client.ExplainPlacement(ctx, cfg.Model.ValueString())
	if err != nil {
		resp.Diagnostics.Append(d.client.Diag("explaining placement of model "+cfg.Model.ValueString(), err))
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, placementFromAPI(cfg.Model, ex))...)
}

// placementFromAPI is the data source's value for an explanation; model is
// the configured name, kept as written.
func placementFromAPI(model types.String, ex *managev1.Explanation) placementModel {
	out := placementModel{
		Model: model, Placed: types.BoolValue(ex.GetPlaced()), Profile: types.StringValue(ex.GetProfile()),
		Text: types.StringValue(ex.GetText()), Profiles: []profilePlacementModel{},
	}
	for _, p := range ex.GetProfiles() {
		pp := profilePlacementModel{
			Profile: types.StringValue(p.GetProfile()), Placed: types.BoolValue(p.GetPlaced()),
			Summary: types.StringValue(p.GetSummary()), Nodes: []verdictModel{},
		}
		for _, n := range p.GetNodes() {
			pp.Nodes = append(pp.Nodes, verdictModel{
				Node: types.StringValue(n.GetNode()), Feasible: types.BoolValue(n.GetFeasible()),
				Reason: types.StringValue(n.GetReason()), Score: types.Float64Value(n.GetScore()),
			})
		}
		out.Profiles = append(out.Profiles, pp)
	}
	return out
}
