package provider

import (
	"context"
	"slices"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	managev1 "github.com/llmgw/llmgw/api/managev1"
)

var _ datasource.DataSourceWithConfigure = (*nodesDataSource)(nil)

// nodesDataSource is llmgw_nodes: the fleet as the control plane sees it.
type nodesDataSource struct {
	client *Client
}

func newNodesDataSource() datasource.DataSource { return &nodesDataSource{} }

type nodesModel struct {
	Nodes []nodeModel `tfsdk:"nodes"`
}

type nodeModel struct {
	ID         types.String      `tfsdk:"id"`
	State      types.String      `tfsdk:"state"`
	Declared   types.Bool        `tfsdk:"declared"`
	Reason     types.String      `tfsdk:"reason"`
	Address    types.String      `tfsdk:"address"`
	GPUs       types.Int64       `tfsdk:"gpus"`
	GPUsUsed   types.Int64       `tfsdk:"gpus_used"`
	GPUClasses []types.String    `tfsdk:"gpu_classes"`
	Fabrics    []fabricModel     `tfsdk:"fabrics"`
	Labels     map[string]string `tfsdk:"labels"`
	Replicas   types.Int64       `tfsdk:"replicas"`
	Version    types.String      `tfsdk:"agent_version"`
	LastSeen   types.String      `tfsdk:"last_seen"`
}

type fabricModel struct {
	Name      types.String   `tfsdk:"name"`
	InService types.Bool     `tfsdk:"in_service"`
	RateGbps  types.Float64  `tfsdk:"rate_gbps"`
	Problems  []types.String `tfsdk:"problems"`
}

func (d *nodesDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_nodes"
}

func (d *nodesDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Every node the control plane knows: its state, GPUs and fabrics.",
		Attributes: map[string]schema.Attribute{
			"nodes": schema.ListNestedAttribute{
				Computed:            true,
				MarkdownDescription: "The nodes, ordered by id.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"id":            schema.StringAttribute{Computed: true, MarkdownDescription: "The node id: the common name of its certificate."},
					"state":         schema.StringAttribute{Computed: true, MarkdownDescription: "`pending`, `ready`, `lost`, `draining` or `suspect` (its agent's session ended or went quiet: no new replica goes there)."},
					"declared":      schema.BoolAttribute{Computed: true, MarkdownDescription: "Whether the control plane holds a declaration for the node. An undeclared node runs on its agent's own declaration file; `terraform import llmgw_node.x ID` adopts it."},
					"reason":        schema.StringAttribute{Computed: true, MarkdownDescription: "Why the node is not ready, or warnings about it; empty when none."},
					"address":       schema.StringAttribute{Computed: true, MarkdownDescription: "The address engines on the node are reached at."},
					"gpus":          schema.Int64Attribute{Computed: true, MarkdownDescription: "GPUs the node reported."},
					"gpus_used":     schema.Int64Attribute{Computed: true, MarkdownDescription: "GPUs held by replicas."},
					"gpu_classes":   schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "The distinct GPU classes of the node, sorted (e.g. `h100-80g`)."},
					"replicas":      schema.Int64Attribute{Computed: true, MarkdownDescription: "Replicas with a shard on the node."},
					"agent_version": schema.StringAttribute{Computed: true, MarkdownDescription: "The agent's version."},
					"last_seen":     schema.StringAttribute{Computed: true, MarkdownDescription: "When the agent was last heard from (RFC 3339), empty if never."},
					"labels":        schema.MapAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "The node's labels."},
					"fabrics": schema.ListNestedAttribute{
						Computed:            true,
						MarkdownDescription: "The node's declared fabrics with the verdict of discovery.",
						NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
							"name":       schema.StringAttribute{Computed: true, MarkdownDescription: "The fabric's name."},
							"in_service": schema.BoolAttribute{Computed: true, MarkdownDescription: "Whether every declared adapter exists with an active port, so the node advertises the fabric."},
							"rate_gbps":  schema.Float64Attribute{Computed: true, MarkdownDescription: "The slowest active link, in Gbit/s."},
							"problems":   schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "Why the fabric is out of service."},
						}},
					},
				}},
			},
		},
	}
}

func (d *nodesDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	d.client = clientFrom(req.ProviderData, &resp.Diagnostics)
}

func (d *nodesDataSource) Read(ctx context.Context, _ datasource.ReadRequest, resp *datasource.ReadResponse) {
	nodes, err := d.client.ListNodes(ctx)
	if err != nil {
		resp.Diagnostics.Append(d.client.Diag("listing nodes", err))
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, nodesFromAPI(nodes))...)
}

// nodesFromAPI is the data source's value for the nodes the API listed.
func nodesFromAPI(nodes []*managev1.Node) nodesModel {
	out := nodesModel{Nodes: []nodeModel{}}
	for _, n := range nodes {
		var classes []string
		for _, g := range n.GetGpus() {
			if !slices.Contains(classes, g.GetClass()) {
				classes = append(classes, g.GetClass())
			}
		}
		slices.Sort(classes)
		nm := nodeModel{
			ID: types.StringValue(n.GetId()), State: types.StringValue(n.GetState()),
			Declared: types.BoolValue(n.GetDeclared()), Reason: types.StringValue(n.GetReason()),
			Address: types.StringValue(n.GetAddress()), GPUs: types.Int64Value(int64(len(n.GetGpus()))),
			GPUsUsed: types.Int64Value(int64(len(n.GetUsedGpus()))), GPUClasses: stringValues(classes),
			Fabrics: []fabricModel{}, Labels: n.GetLabels(), Replicas: types.Int64Value(int64(n.GetReplicas())),
			Version: types.StringValue(n.GetAgentVersion()), LastSeen: types.StringValue(""),
		}
		if nm.Labels == nil {
			nm.Labels = map[string]string{}
		}
		if ms := n.GetLastSeenUnixMs(); ms > 0 {
			nm.LastSeen = types.StringValue(time.UnixMilli(ms).UTC().Format(time.RFC3339))
		}
		for _, f := range n.GetFabrics() {
			nm.Fabrics = append(nm.Fabrics, fabricModel{
				Name: types.StringValue(f.GetName()), InService: types.BoolValue(f.GetInService()),
				RateGbps: types.Float64Value(f.GetRateGbps()), Problems: stringValues(f.GetProblems()),
			})
		}
		out.Nodes = append(out.Nodes, nm)
	}
	slices.SortFunc(out.Nodes, func(a, b nodeModel) int {
		switch {
		case a.ID.ValueString() < b.ID.ValueString():
			return -1
		case a.ID.ValueString() > b.ID.ValueString():
			return 1
		}
		return 0
	})
	return out
}

// stringValues is ss as Terraform strings, never nil.
func stringValues(ss []string) []types.String {
	out := make([]types.String, 0, len(ss))
	for _, s := range ss {
		out = append(out, types.StringValue(s))
	}
	return out
}
