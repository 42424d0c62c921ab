package provider

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework/ephemeral"
	"github.com/hashicorp/terraform-plugin-framework/ephemeral/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

var (
	_ ephemeral.EphemeralResource              = (*nodeCertificateEphemeral)(nil)
	_ ephemeral.EphemeralResourceWithConfigure = (*nodeCertificateEphemeral)(nil)
)

// nodeCertificateEphemeral is the ephemeral resource llmgw_node_certificate:
// a node's certificate and private key, signed on the machine running
// Terraform and never written to the plan or the state. It feeds
// llmgw_proxmox_vm's write-only user_data_wo.
type nodeCertificateEphemeral struct {
	client *Client
}

func newNodeCertificateEphemeral() ephemeral.EphemeralResource { return &nodeCertificateEphemeral{} }

// nodeCertificateEphemeralModel is the ephemeral llmgw_node_certificate's
// configuration and result.
type nodeCertificateEphemeralModel struct {
	NodeName      types.String `tfsdk:"node_name"`
	ValidityHours types.Int64  `tfsdk:"validity_hours"`
	CertPEM       types.String `tfsdk:"cert_pem"`
	PrivateKeyPEM types.String `tfsdk:"private_key_pem"`
	CACertPEM     types.String `tfsdk:"ca_cert_pem"`
	NotAfter      types.String `tfsdk:"not_after"`
}

func (e *nodeCertificateEphemeral) Metadata(_ context.Context, req ephemeral.MetadataRequest, resp *ephemeral.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_node_certificate"
}

func (e *nodeCertificateEphemeral) Schema(_ context.Context, _ ephemeral.SchemaRequest, resp *ephemeral.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "A node's client certificate and private key (common name = node id, `clientAuth` usage), signed on the machine running Terraform with the CA of the provider's `pki` attribute, " +
			"and never written to the plan or the state (Terraform 1.10 or later; the write-only attribute it feeds needs 1.11). " +
			"Every run signs a new one: pass it to attributes read only when their version changes — `user_data_wo` of `llmgw_proxmox_vm` with `user_data_wo_version` — " +
			"so the node keeps the certificate it booted with and the key exists only on the node. " +
			"The certificates of runs that created nothing are never used; they expire unused. " +
			"To renew a node's certificate, change `user_data_wo_version` (the VM is replaced). " +
			"The managed resource of the same name stores its key in the state instead.",
		Attributes: map[string]schema.Attribute{
			"node_name": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: "The node id, the certificate's common name (letters, digits, `.`, `_` and `-`, at most 64 characters).",
				Validators:          []validator.String{nodeNameValidator{}},
			},
			"validity_hours": schema.Int64Attribute{
				Optional:            true,
				MarkdownDescription: fmt.Sprintf("How long the certificate is valid, in hours (default %d, a year); never past the CA's own expiry.", defaultCertValidityHours),
				Validators:          []validator.Int64{int64validator.AtLeast(1)},
			},
			"cert_pem": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The certificate, PEM: the agent's `tls.cert`.",
			},
			"private_key_pem": schema.StringAttribute{
				Computed: true, Sensitive: true,
				MarkdownDescription: "The certificate's private key, PEM: the agent's `tls.key`.",
			},
			"ca_cert_pem": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The CA certificate that signed it, PEM: the agent's `tls.ca`.",
			},
			"not_after": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "When the certificate expires, RFC 3339.",
			},
		},
	}
}

func (e *nodeCertificateEphemeral) Configure(_ context.Context, req ephemeral.ConfigureRequest, resp *ephemeral.ConfigureResponse) {
	e.client = clientFrom(req.ProviderData, &resp.Diagnostics)
}

// Open signs the certificate.
func (e *nodeCertificateEphemeral) Open(ctx context.Context, req ephemeral.OpenRequest, resp *ephemeral.OpenResponse) {
	var m nodeCertificateEphemeralModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if e.client == nil {
		resp.Diagnostics.AddError("Provider not configured", "The llmgw provider was not configured before signing. This is a bug in the llmgw provider; please report it.")
		return
	}
	hours := int64(defaultCertValidityHours)
	if !m.ValidityHours.IsNull() {
		hours = m.ValidityHours.ValueInt64()
	}
	nc, d := signNodeCertificate(e.client.pkiCert, e.client.pkiKey, m.NodeName.ValueString(), time.Duration(hours)*time.Hour)
	resp.Diagnostics.Append(d...)
	if resp.Diagnostics.HasError() {
		return
	}
	m.CertPEM = types.StringValue(string(nc.certPEM))
	m.PrivateKeyPEM = types.StringValue(string(nc.keyPEM))
	m.CACertPEM = types.StringValue(string(nc.caPEM))
	m.NotAfter = types.StringValue(nc.notAfter.UTC().Format(time.RFC3339))
	resp.Diagnostics.Append(resp.Result.Set(ctx, m)...)
}
