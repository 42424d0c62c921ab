// Package provider is the Terraform provider for llmgw: the catalog (and,
// later, the fleet) as Terraform resources, over the control plane's
// management API. One typed client (Client) is made in Configure and shared
// by every resource and data source.
package provider

import (
	"context"
	"os"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/ephemeral"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// Address is the provider's registry address.
const Address = "registry.terraform.io/llmgw/llmgw"

// Environment variables the provider configuration falls back to.
const (
	EnvEndpoint = "LLMGW_ENDPOINT"
	EnvToken    = "LLMGW_TOKEN"
	EnvCACert   = "LLMGW_CA_CERT"
	EnvCAKey    = "LLMGW_CA_KEY"
)

var (
	_ provider.Provider                       = (*llmgwProvider)(nil)
	_ provider.ProviderWithEphemeralResources = (*llmgwProvider)(nil)
)

// llmgwProvider is the provider; version is the binary's.
type llmgwProvider struct {
	version string
}

// New returns a constructor of the provider, as providerserver.Serve and
// the acceptance tests' provider factories take it.
func New(version string) func() provider.Provider {
	return func() provider.Provider { return &llmgwProvider{version: version} }
}

// providerModel is the provider block.
type providerModel struct {
	Endpoint   types.String `tfsdk:"endpoint"`
	Token      types.String `tfsdk:"token"`
	CACertFile types.String `tfsdk:"ca_cert_file"`
	PKI        *pkiModel    `tfsdk:"pki"`
}

// pkiModel is the provider's pki attribute: the CA that signs node
// identities locally. Only the file names are kept; the key is read when a
// resource needs to sign.
type pkiModel struct {
	CACertFile types.String `tfsdk:"ca_cert_file"`
	CAKeyFile  types.String `tfsdk:"ca_key_file"`
}

func (p *llmgwProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "llmgw"
	resp.Version = p.version
}

func (p *llmgwProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Manages an llmgw cluster — its model catalog and its fleet — through the control plane's management API (gRPC over TLS with an admin token). " +
			"Every attribute may instead come from the environment, so an empty `provider \"llmgw\" {}` block works with the variables `llmgw dev` prints.",
		Attributes: map[string]schema.Attribute{
			"endpoint": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Address of the control plane's management API as `host:port` (its `manage_listen`, port 9090 by default). Falls back to `" + EnvEndpoint + "`.",
			},
			"token": schema.StringAttribute{
				Optional:            true,
				Sensitive:           true,
				MarkdownDescription: "Admin token for the management API, made with `llmgw keys admin-token`. Falls back to `" + EnvToken + "`.",
			},
			"ca_cert_file": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "PEM file of the CA that signed the control plane's certificate. Falls back to `" + EnvCACert + "`; without either, the system's roots are used.",
			},
			"pki": schema.SingleNestedAttribute{
				Optional:            true,
				MarkdownDescription: "The CA used to sign node identities on this machine. The key is read only when a certificate is signed and is never written to state.",
				Attributes: map[string]schema.Attribute{
					"ca_cert_file": schema.StringAttribute{
						Optional:            true,
						MarkdownDescription: "PEM file of the CA certificate. Falls back to `" + EnvCACert + "`.",
					},
					"ca_key_file": schema.StringAttribute{
						Optional:            true,
						MarkdownDescription: "PEM file of the CA's private key. Falls back to `" + EnvCAKey + "`.",
					},
				},
			},
		},
	}
}

// settings is the provider configuration with the environment applied.
type settings struct {
	Endpoint   string
	Token      string
	CACertFile string
	PKICert    string
	PKIKey     string
}

// resolve applies the environment (read through getenv) to the configured
// values: a configured value wins.
func (m providerModel) resolve(getenv func(string) string) settings {
	pick := func(v types.String, env string) string {
		if s := v.ValueString(); s != "" {
			return s
		}
		return getenv(env)
	}
	s := settings{
		Endpoint:   pick(m.Endpoint, EnvEndpoint),
		Token:      pick(m.Token, EnvToken),
		CACertFile: pick(m.CACertFile, EnvCACert),
	}
	var pc, pk types.String
	if m.PKI != nil {
		pc, pk = m.PKI.CACertFile, m.PKI.CAKeyFile
	}
	s.PKICert = pick(pc, EnvCACert)
	s.PKIKey = pick(pk, EnvCAKey)
	s.Endpoint = strings.TrimPrefix(strings.TrimPrefix(s.Endpoint, "https://"), "dns:///")
	return s
}

func (p *llmgwProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var cfg providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	unknown := map[string]bool{
		"endpoint":     cfg.Endpoint.IsUnknown(),
		"token":        cfg.Token.IsUnknown(),
		"ca_cert_file": cfg.CACertFile.IsUnknown(),
	}
	for name, u := range unknown {
		if u {
			resp.Diagnostics.AddAttributeError(path.Root(name), "Unknown llmgw provider "+name,
				"The provider's "+name+" depends on a value known only after apply. Set it to a known value, or apply its source first with -target.")
		}
	}
	if resp.Diagnostics.HasError() {
		return
	}
	s := cfg.resolve(os.Getenv)
	if s.Endpoint == "" {
		resp.Diagnostics.AddAttributeError(path.Root("endpoint"), "Missing llmgw endpoint",
			"Set endpoint in the provider block or "+EnvEndpoint+" to the control plane's management address (host:port, its manage_listen).")
	}
	if s.Token == "" {
		resp.Diagnostics.AddAttributeError(path.Root("token"), "Missing llmgw admin token",
			"Set token in the provider block or "+EnvToken+" to an admin token made with `llmgw keys admin-token`.")
	}
	if resp.Diagnostics.HasError() {
		return
	}
	c, err := NewClient(s)
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("ca_cert_file"), "Cannot set up TLS to the llmgw control plane",
			err.Error()+". Check ca_cert_file or "+EnvCACert+": it must name a readable PEM file of the CA that signed the control plane's certificate.")
		return
	}
	resp.ResourceData = c
	resp.DataSourceData = c
}

func (p *llmgwProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{newModelResource, newFabricResource, newNodeCertificateResource, newNodeResource,
		newProjectResource, newBudgetResource, newAPIKeyResource}
}

// EphemeralResources are values Terraform never stores (Terraform 1.10+).
func (p *llmgwProvider) EphemeralResources(context.Context) []func() ephemeral.EphemeralResource {
	return []func() ephemeral.EphemeralResource{newAPIKeySecretEphemeral}
}

func (p *llmgwProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{newNodesDataSource, newPlacementDataSource}
}
