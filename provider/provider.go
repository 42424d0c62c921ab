// Package provider is the Terraform provider for llmgw: the catalog (and,
// later, the fleet) as Terraform resources, over the control plane's
// management API. One typed client (Client) is made in Configure and shared
// by every resource and data source.
package provider

import (
	"context"
	"os"
	"strconv"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/ephemeral"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/llmgw/llmgw/provider/proxmox"
)

// Address is the provider's registry address.
const Address = "registry.terraform.io/llmgw/llmgw"

// Environment variables the provider configuration falls back to.
const (
	EnvEndpoint = "LLMGW_ENDPOINT"
	EnvToken    = "LLMGW_TOKEN"
	EnvCACert   = "LLMGW_CA_CERT"
	EnvCAKey    = "LLMGW_CA_KEY"

	// EnvPVEEndpoint and EnvPVEToken are the Proxmox VE variables the bpg
	// provider reads too; the token is USER@REALM!TOKENID=SECRET.
	EnvPVEEndpoint = "PROXMOX_VE_ENDPOINT"
	EnvPVEToken    = "PROXMOX_VE_API_TOKEN"
	EnvPVEInsecure = "PROXMOX_VE_INSECURE"
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
	Proxmox    *pveModel    `tfsdk:"proxmox"`
}

// pveModel is the provider's proxmox attribute: the Proxmox VE API that
// llmgw_proxmox_vm uses.
type pveModel struct {
	Endpoint       types.String `tfsdk:"endpoint"`
	APITokenID     types.String `tfsdk:"api_token_id"`
	APITokenSecret types.String `tfsdk:"api_token_secret"`
	Insecure       types.Bool   `tfsdk:"insecure"`
	CAFile         types.String `tfsdk:"ca_file"`
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
			"proxmox": schema.SingleNestedAttribute{
				Optional: true,
				MarkdownDescription: "The Proxmox VE API that `llmgw_proxmox_vm` creates VMs through, with an API token (`pveum user token add`). " +
					"Only needed when that resource is used; without the block, `" + EnvPVEEndpoint + "` and `" + EnvPVEToken + "` are read, as the bpg/proxmox provider reads them.",
				Attributes: map[string]schema.Attribute{
					"endpoint": schema.StringAttribute{
						Optional:            true,
						MarkdownDescription: "The API's URL, like `https://pve1.example.internal:8006/api2/json` (`/api2/json` is added when missing). Falls back to `" + EnvPVEEndpoint + "`.",
					},
					"api_token_id": schema.StringAttribute{
						Optional:            true,
						MarkdownDescription: "The token's id, `USER@REALM!TOKENID` (e.g. `terraform@pve!llmgw`). Falls back to the part of `" + EnvPVEToken + "` before `=`.",
					},
					"api_token_secret": schema.StringAttribute{
						Optional:            true,
						Sensitive:           true,
						MarkdownDescription: "The token's secret (a UUID). Falls back to the part of `" + EnvPVEToken + "` after `=`.",
					},
					"insecure": schema.BoolAttribute{
						Optional:            true,
						MarkdownDescription: "Skip verifying the API's TLS certificate (Proxmox's self-signed default). For a lab only: prefer `ca_file`. Falls back to `" + EnvPVEInsecure + "`.",
					},
					"ca_file": schema.StringAttribute{
						Optional:            true,
						MarkdownDescription: "PEM file of the CA that signed the API's certificate (on a Proxmox node: `/etc/pve/pve-root-ca.pem`). Without it (and without `insecure`), the system's roots are used.",
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
	PVE        proxmox.Settings
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
	s.PVE = m.Proxmox.resolve(getenv)
	return s
}

// resolve applies the environment to the proxmox attribute (which may be
// absent).
func (m *pveModel) resolve(getenv func(string) string) proxmox.Settings {
	if m == nil {
		m = &pveModel{}
	}
	envID, envSecret, _ := strings.Cut(getenv(EnvPVEToken), "=")
	pick := func(v types.String, env string) string {
		if s := v.ValueString(); s != "" {
			return s
		}
		return env
	}
	s := proxmox.Settings{
		Endpoint: pick(m.Endpoint, getenv(EnvPVEEndpoint)),
		TokenID:  pick(m.APITokenID, envID),
		Secret:   pick(m.APITokenSecret, envSecret),
		CAFile:   m.CAFile.ValueString(),
		Insecure: m.Insecure.ValueBool(),
	}
	if m.Insecure.IsNull() {
		s.Insecure, _ = strconv.ParseBool(getenv(EnvPVEInsecure))
	}
	if s.Endpoint != "" && !strings.HasSuffix(strings.TrimSuffix(s.Endpoint, "/"), "/api2/json") {
		s.Endpoint = strings.TrimSuffix(s.Endpoint, "/") + "/api2/json"
	}
	s.Endpoint = strings.TrimSuffix(s.Endpoint, "/")
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
	c.pve, c.pveMissing = newPVE(s.PVE)
	resp.ResourceData = c
	resp.DataSourceData = c
	resp.EphemeralResourceData = c
}

func (p *llmgwProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{newModelResource, newFabricResource, newNodeCertificateResource, newNodeResource,
		newProxmoxVMResource, newProjectResource, newBudgetResource, newAPIKeyResource, newMirrorWeightsResource}
}

// EphemeralResources are values Terraform never stores (Terraform 1.10+).
func (p *llmgwProvider) EphemeralResources(context.Context) []func() ephemeral.EphemeralResource {
	return []func() ephemeral.EphemeralResource{newAPIKeySecretEphemeral, newNodeCertificateEphemeral}
}

func (p *llmgwProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{newNodesDataSource, newPlacementDataSource}
}
