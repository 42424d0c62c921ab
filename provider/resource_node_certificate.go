package provider

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/boolplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/llmgw/llmgw/pki"
)

// Defaults of llmgw_node_certificate.
const (
	defaultCertValidityHours     = 8760
	defaultCertEarlyRenewalHours = 720
)

var (
	_ resource.ResourceWithConfigure   = (*nodeCertificateResource)(nil)
	_ resource.ResourceWithImportState = (*nodeCertificateResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*nodeCertificateResource)(nil)
)

// nodeCertificateResource is llmgw_node_certificate: a node's client
// certificate signed on this machine with the CA of the provider's pki
// attribute. It lives only in state: nothing is read back from the control
// plane.
type nodeCertificateResource struct {
	client *Client
}

func newNodeCertificateResource() resource.Resource { return &nodeCertificateResource{} }

// nodeCertificateModel is llmgw_node_certificate's state.
type nodeCertificateModel struct {
	NodeName          types.String `tfsdk:"node_name"`
	ValidityHours     types.Int64  `tfsdk:"validity_hours"`
	EarlyRenewalHours types.Int64  `tfsdk:"early_renewal_hours"`
	CertPEM           types.String `tfsdk:"cert_pem"`
	PrivateKeyPEM     types.String `tfsdk:"private_key_pem"`
	CACertPEM         types.String `tfsdk:"ca_cert_pem"`
	NotAfter          types.String `tfsdk:"not_after"`
	ReadyForRenewal   types.Bool   `tfsdk:"ready_for_renewal"`
}

func (r *nodeCertificateResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_node_certificate"
}

func (r *nodeCertificateResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	keep := []planmodifier.String{stringplanmodifier.UseStateForUnknown()}
	resp.Schema = schema.Schema{
		MarkdownDescription: "A node's client certificate (common name = node id, `clientAuth` usage), signed on the machine running Terraform with the CA of the provider's `pki` attribute. " +
			"The CA key is read only while signing and is never written to state; the node's private key is (as `private_key_pem`, sensitive), so keep the state somewhere safe. " +
			"With Terraform 1.11 or later, the ephemeral resource of the same name signs without storing anything, for `user_data_wo` of `llmgw_proxmox_vm` (`modules/proxmox-node` does so). " +
			"A plan made after `not_after - early_renewal_hours` proposes a new certificate. " +
			"The resource cannot be imported: a private key cannot be read back from anywhere, so make a new certificate instead.",
		Attributes: map[string]schema.Attribute{
			"node_name": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: "The node id, the certificate's common name (letters, digits, `.`, `_` and `-`, at most 64 characters). Changing it makes a new certificate.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Validators:          []validator.String{nodeNameValidator{}},
			},
			"validity_hours": schema.Int64Attribute{
				Optional:            true,
				Computed:            true,
				Default:             int64default.StaticInt64(defaultCertValidityHours),
				MarkdownDescription: fmt.Sprintf("How long the certificate is valid, in hours (default %d, a year); never past the CA's own expiry. Changing it makes a new certificate.", defaultCertValidityHours),
				PlanModifiers:       []planmodifier.Int64{int64planmodifier.RequiresReplace()},
				Validators:          []validator.Int64{int64validator.AtLeast(1)},
			},
			"early_renewal_hours": schema.Int64Attribute{
				Optional:            true,
				Computed:            true,
				Default:             int64default.StaticInt64(defaultCertEarlyRenewalHours),
				MarkdownDescription: fmt.Sprintf("How many hours before `not_after` a plan proposes a new certificate (default %d, 30 days).", defaultCertEarlyRenewalHours),
				Validators:          []validator.Int64{int64validator.AtLeast(0)},
			},
			"cert_pem": schema.StringAttribute{
				Computed: true, PlanModifiers: keep,
				MarkdownDescription: "The certificate, PEM: the agent's `tls.cert`.",
			},
			"private_key_pem": schema.StringAttribute{
				Computed: true, Sensitive: true, PlanModifiers: keep,
				MarkdownDescription: "The certificate's private key, PEM: the agent's `tls.key`.",
			},
			"ca_cert_pem": schema.StringAttribute{
				Computed: true, PlanModifiers: keep,
				MarkdownDescription: "The CA certificate that signed it, PEM: the agent's `tls.ca`.",
			},
			"not_after": schema.StringAttribute{
				Computed: true, PlanModifiers: keep,
				MarkdownDescription: "When the certificate expires, RFC 3339.",
			},
			"ready_for_renewal": schema.BoolAttribute{
				Computed:            true,
				PlanModifiers:       []planmodifier.Bool{boolplanmodifier.UseStateForUnknown()},
				MarkdownDescription: "True in a plan made after `not_after - early_renewal_hours`: the certificate is then replaced.",
			},
		},
	}
}

func (r *nodeCertificateResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.client = clientFrom(req.ProviderData, &resp.Diagnostics)
}

// ImportState refuses: the private key exists only in the state that made it.
func (r *nodeCertificateResource) ImportState(_ context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resp.Diagnostics.AddError("llmgw_node_certificate cannot be imported",
		fmt.Sprintf("Import of %q is not possible: the certificate's private key is kept only in the Terraform state that created it and cannot be read back. "+
			"Declare a new llmgw_node_certificate for the node instead and give the agent its cert_pem and private_key_pem; the old certificate stays valid until it expires.", req.ID))
}

// ModifyPlan proposes a new certificate once now is past not_after minus
// early_renewal_hours, like hashicorp/tls's locally signed certificate:
// ready_for_renewal is planned true and requires replacement.
func (r *nodeCertificateResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || req.State.Raw.IsNull() {
		return
	}
	var plan, state nodeCertificateModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || plan.EarlyRenewalHours.IsUnknown() {
		return
	}
	notAfter, err := time.Parse(time.RFC3339, state.NotAfter.ValueString())
	if err != nil {
		// A state without a readable expiry cannot be trusted: renew.
		notAfter = time.Time{}
	}
	if !readyForRenewal(time.Now(), notAfter, plan.EarlyRenewalHours.ValueInt64()) {
		return
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("ready_for_renewal"), types.BoolValue(true))...)
	resp.RequiresReplace = append(resp.RequiresReplace, path.Root("ready_for_renewal"))
}

// readyForRenewal reports whether now is at or past notAfter minus
// earlyHours.
func readyForRenewal(now, notAfter time.Time, earlyHours int64) bool {
	return !now.Before(notAfter.Add(-time.Duration(earlyHours) * time.Hour))
}

func (r *nodeCertificateResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan nodeCertificateModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if r.client == nil {
		resp.Diagnostics.AddError("Provider not configured", "The llmgw provider was not configured before signing. This is a bug in the llmgw provider; please report it.")
		return
	}
	nc, d := signNodeCertificate(r.client.pkiCert, r.client.pkiKey, plan.NodeName.ValueString(), time.Duration(plan.ValidityHours.ValueInt64())*time.Hour)
	resp.Diagnostics.Append(d...)
	if resp.Diagnostics.HasError() {
		return
	}
	plan.CertPEM = types.StringValue(string(nc.certPEM))
	plan.PrivateKeyPEM = types.StringValue(string(nc.keyPEM))
	plan.CACertPEM = types.StringValue(string(nc.caPEM))
	plan.NotAfter = types.StringValue(nc.notAfter.UTC().Format(time.RFC3339))
	plan.ReadyForRenewal = types.BoolValue(false)
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

// Read keeps the state as it is: the certificate is local and nothing
// remote can have changed it. Renewal is decided in ModifyPlan.
func (r *nodeCertificateResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state nodeCertificateModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

// Update changes early_renewal_hours only (everything else replaces the
// certificate).
func (r *nodeCertificateResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state nodeCertificateModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	state.EarlyRenewalHours = plan.EarlyRenewalHours
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

// Delete forgets the certificate. It stays valid until it expires; revoke a
// node's identity by destroying its llmgw_node.
func (r *nodeCertificateResource) Delete(context.Context, resource.DeleteRequest, *resource.DeleteResponse) {
}

// nodeCert is a signed node certificate.
type nodeCert struct {
	certPEM, keyPEM, caPEM []byte
	notAfter               time.Time
}

// signNodeCertificate reads the CA files and signs node's certificate.
// Problems are diagnostics naming the file and the provider attribute.
func signNodeCertificate(caCertFile, caKeyFile, node string, validity time.Duration) (nodeCert, diag.Diagnostics) {
	var diags diag.Diagnostics
	if caCertFile == "" || caKeyFile == "" {
		diags.AddError("No CA to sign node certificates with",
			fmt.Sprintf("Signing the certificate of node %s needs the CA certificate and key: set pki = { ca_cert_file = ..., ca_key_file = ... } in the provider block, or %s and %s.", node, EnvCACert, EnvCAKey))
		return nodeCert{}, diags
	}
	caPEM, err := os.ReadFile(caCertFile)
	if err != nil {
		diags.AddAttributeError(path.Root("node_name"), "Cannot read the CA certificate",
			fmt.Sprintf("Reading pki.ca_cert_file %s: %v. It must name the PEM file of the CA that signs node identities.", caCertFile, err))
		return nodeCert{}, diags
	}
	keyPEM, err := os.ReadFile(caKeyFile)
	if err != nil {
		diags.AddAttributeError(path.Root("node_name"), "Cannot read the CA key",
			fmt.Sprintf("Reading pki.ca_key_file %s: %v. It must name the PEM file of the CA's private key (%s).", caKeyFile, err, EnvCAKey))
		return nodeCert{}, diags
	}
	certPEM, nodeKeyPEM, err := pki.SignNode(caPEM, keyPEM, node, validity)
	if err != nil {
		diags.AddAttributeError(path.Root("node_name"), "Cannot sign the node certificate",
			fmt.Sprintf("Signing with pki.ca_cert_file %s and pki.ca_key_file %s: %v.", caCertFile, caKeyFile, err))
		return nodeCert{}, diags
	}
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil {
		diags.AddError("Cannot read the signed certificate", fmt.Sprintf("Parsing the certificate of node %s: %v. This is a bug in the llmgw provider; please report it.", node, err))
		return nodeCert{}, diags
	}
	return nodeCert{certPEM: certPEM, keyPEM: nodeKeyPEM, caPEM: caPEM, notAfter: cert.NotAfter}, diags
}

// nodeNameValidator checks a node id with pki.ValidNodeName.
type nodeNameValidator struct{}

func (nodeNameValidator) Description(context.Context) string {
	return "a node id: letters, digits, '.', '_' and '-', starting with a letter or digit, at most 64 characters"
}

func (v nodeNameValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (nodeNameValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if err := pki.ValidNodeName(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid node name", err.Error()+".")
	}
}
