package provider

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/spec"
)

var (
	_ resource.ResourceWithConfigure   = (*apiKeyResource)(nil)
	_ resource.ResourceWithImportState = (*apiKeyResource)(nil)
)

// apiKeyResource is llmgw_api_key: a client API key of a project.
type apiKeyResource struct {
	client *Client
}

func newAPIKeyResource() resource.Resource { return &apiKeyResource{} }

// apiKeyResourceModel is llmgw_api_key's state. SecretWO is write-only:
// Terraform never stores it, and it is only read from the configuration.
type apiKeyResourceModel struct {
	ID              types.String `tfsdk:"id"`
	Project         types.String `tfsdk:"project"`
	Name            types.String `tfsdk:"name"`
	ExpiresAt       types.String `tfsdk:"expires_at"`
	RPM             types.Int64  `tfsdk:"rpm"`
	TPM             types.Int64  `tfsdk:"tpm"`
	Prefix          types.String `tfsdk:"prefix"`
	Secret          types.String `tfsdk:"secret"`
	SecretWO        types.String `tfsdk:"secret_wo"`
	SecretWOVersion types.Int64  `tfsdk:"secret_wo_version"`
}

func (r *apiKeyResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_api_key"
}

func (r *apiKeyResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "An API key of the client API, in a project. The control plane keeps only its hash. " +
			"Two ways to get the secret: by default the control plane generates it and Terraform stores it in `secret` (sensitive, in state); " +
			"or, with Terraform 1.11 or later, generate it with the ephemeral resource `llmgw_api_key_secret` and pass it in `secret_wo`, " +
			"a write-only attribute that Terraform never stores. Destroying the key revokes it. " +
			"Changing `project`, `name`, `expires_at` or `secret_wo_version` replaces the key (a new secret); `rpm` and `tpm` change in place. " +
			"Import with the key's id (`llmgw ctl keys`): an imported key has no `secret`.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The key's id (`key-…`), as `llmgw ctl keys` lists it.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"project": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString("default"),
				MarkdownDescription: "The project the key belongs to (default `default`). Changing it replaces the key.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Validators:          []validator.String{stringvalidator.RegexMatches(spec.ProjectNameRE, "must be a project name")},
			},
			"name": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: "A name to recognise the key by. Changing it replaces the key.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Validators:          []validator.String{stringvalidator.LengthBetween(1, 200)},
			},
			"expires_at": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "When the key stops working, as an RFC 3339 time (`2027-01-01T00:00:00Z`); unset, it never expires. Changing it replaces the key.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Validators:          []validator.String{rfc3339Validator{}},
			},
			"rpm": schema.Int64Attribute{
				Optional: true, Computed: true, Default: int64default.StaticInt64(0),
				MarkdownDescription: "The key's own requests per minute, on top of its project's; 0 (the default) sets none.",
				Validators:          []validator.Int64{int64validator.AtLeast(0)},
			},
			"tpm": schema.Int64Attribute{
				Optional: true, Computed: true, Default: int64default.StaticInt64(0),
				MarkdownDescription: "The key's own tokens per minute, on top of its project's; 0 (the default) sets none.",
				Validators:          []validator.Int64{int64validator.AtLeast(0)},
			},
			"prefix": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The first characters of the secret, to tell keys apart in listings.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"secret": schema.StringAttribute{
				Computed: true, Sensitive: true,
				MarkdownDescription: "The key, as generated by the control plane at creation: the only time it is ever returned. " +
					"It is kept in the Terraform state (protect the state). Null for an imported key and for a key created with `secret_wo`.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"secret_wo": schema.StringAttribute{
				Optional: true, Sensitive: true, WriteOnly: true,
				MarkdownDescription: "Write-only (Terraform 1.11 or later): a secret generated outside the control plane, usually " +
					"`ephemeral.llmgw_api_key_secret.<name>.secret`. The control plane stores its hash; Terraform stores nothing. " +
					"Requires `secret_wo_version`; it is read only when the key is created, so to rotate it change `secret_wo_version`.",
				Validators: []validator.String{
					stringvalidator.AlsoRequires(path.MatchRoot("secret_wo_version")),
					apiKeySecretValidator{},
				},
			},
			"secret_wo_version": schema.Int64Attribute{
				Optional:            true,
				MarkdownDescription: "Any number that goes with `secret_wo`; changing it replaces the key with one holding the current `secret_wo`.",
				PlanModifiers:       []planmodifier.Int64{int64planmodifier.RequiresReplace()},
				Validators:          []validator.Int64{int64validator.AlsoRequires(path.MatchRoot("secret_wo"))},
			},
		},
	}
}

func (r *apiKeyResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.client = clientFrom(req.ProviderData, &resp.Diagnostics)
}

// ImportState adopts a key by id; its secret cannot be imported.
func (r *apiKeyResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("id"), req, resp)
}

// apiKeyFromAPI is the state of a key as the control plane returned it;
// prior keeps what the API does not return (the secret, the write-only
// version) and the spelling of expires_at.
func apiKeyFromAPI(k *managev1.ApiKey, prior apiKeyResourceModel) apiKeyResourceModel {
	out := prior
	out.ID = types.StringValue(k.GetId())
	out.Project = types.StringValue(k.GetProject())
	out.Name = types.StringValue(k.GetName())
	out.RPM = types.Int64Value(k.GetRpm())
	out.TPM = types.Int64Value(k.GetTpm())
	out.Prefix = types.StringValue(k.GetPrefix())
	out.SecretWO = types.StringNull()
	if out.Secret.IsUnknown() {
		out.Secret = types.StringNull()
	}
	if out.SecretWOVersion.IsUnknown() {
		out.SecretWOVersion = types.Int64Null()
	}
	out.ExpiresAt = types.StringNull()
	if ms := k.GetExpiresUnixMs(); ms != 0 {
		t := time.UnixMilli(ms).UTC()
		if p, err := time.Parse(time.RFC3339, prior.ExpiresAt.ValueString()); err == nil && p.UnixMilli() == ms {
			out.ExpiresAt = prior.ExpiresAt
		} else {
			out.ExpiresAt = types.StringValue(t.Format(time.RFC3339Nano))
		}
	}
	return out
}

func (r *apiKeyResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan apiKeyResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	// The write-only secret is only in the configuration.
	var wo types.String
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("secret_wo"), &wo)...)
	if resp.Diagnostics.HasError() {
		return
	}
	k := &managev1.ApiKey{Project: plan.Project.ValueString(), Name: plan.Name.ValueString(), Rpm: plan.RPM.ValueInt64(), Tpm: plan.TPM.ValueInt64()}
	if !plan.ExpiresAt.IsNull() {
		t, err := time.Parse(time.RFC3339, plan.ExpiresAt.ValueString())
		if err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("expires_at"), "expires_at is not an RFC 3339 time", err.Error())
			return
		}
		k.ExpiresUnixMs = t.UnixMilli()
	}
	what := fmt.Sprintf("creating API key %s in project %s", k.GetName(), k.GetProject())
	created, err := r.client.CreateAPIKey(ctx, k, wo.ValueString())
	if err != nil {
		resp.Diagnostics.Append(r.client.Diag(what, err))
		return
	}
	state := apiKeyFromAPI(created.GetKey(), plan)
	state.Secret = types.StringNull()
	if s := created.GetSecret(); s != "" {
		state.Secret = types.StringValue(s)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

func (r *apiKeyResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var prior apiKeyResourceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &prior)...)
	if resp.Diagnostics.HasError() {
		return
	}
	k, err := r.client.GetAPIKey(ctx, prior.ID.ValueString())
	if IsNotFound(err) || (err == nil && k.GetRevokedUnixMs() != 0) {
		// Gone or revoked outside Terraform: a revoked key never works again.
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		resp.Diagnostics.Append(r.client.Diag("reading API key "+prior.ID.ValueString(), err))
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, apiKeyFromAPI(k, prior))...)
}

// Update changes the key's own limits, the only thing that changes in place.
func (r *apiKeyResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, prior apiKeyResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &prior)...)
	if resp.Diagnostics.HasError() {
		return
	}
	k, err := r.client.UpdateAPIKey(ctx, prior.ID.ValueString(), plan.RPM.ValueInt64(), plan.TPM.ValueInt64())
	if err != nil {
		resp.Diagnostics.Append(r.client.Diag("updating API key "+prior.ID.ValueString(), err))
		return
	}
	plan.Secret = prior.Secret
	resp.Diagnostics.Append(resp.State.Set(ctx, apiKeyFromAPI(k, plan))...)
}

// Delete revokes the key; it stops working within seconds.
func (r *apiKeyResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var prior apiKeyResourceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &prior)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := r.client.RevokeAPIKey(ctx, prior.ID.ValueString()); err != nil && !IsNotFound(err) {
		resp.Diagnostics.Append(r.client.Diag("revoking API key "+prior.ID.ValueString(), err))
	}
}

// rfc3339Validator checks a time written in RFC 3339.
type rfc3339Validator struct{}

func (rfc3339Validator) Description(context.Context) string {
	return "must be an RFC 3339 time, e.g. 2027-01-01T00:00:00Z"
}

func (v rfc3339Validator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (rfc3339Validator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if _, err := time.Parse(time.RFC3339, req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Not an RFC 3339 time",
			fmt.Sprintf("%q is not an RFC 3339 time: write it like 2027-01-01T00:00:00Z.", req.ConfigValue.ValueString()))
	}
}

// apiKeySecretValidator checks that a supplied secret is shaped like an
// llmgw API key, without ever quoting it.
type apiKeySecretValidator struct{}

func (apiKeySecretValidator) Description(context.Context) string {
	return "must be an llmgw API key, as llmgw_api_key_secret generates"
}

func (v apiKeySecretValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (apiKeySecretValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if _, _, err := spec.ParseAPIKey(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Not an llmgw API key",
			fmt.Sprintf("%v. Generate the secret with the ephemeral resource llmgw_api_key_secret.", err))
	}
}

// CreateAPIKey creates a key; secret is the client's (empty: the control
// plane generates one and returns it).
func (c *Client) CreateAPIKey(ctx context.Context, k *managev1.ApiKey, secret string) (*managev1.CreateApiKeyResponse, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	return c.manage.CreateApiKey(ctx, &managev1.CreateApiKeyRequest{Key: k, Secret: secret})
}

// GetAPIKey returns a key, never its secret.
func (c *Client) GetAPIKey(ctx context.Context, id string) (*managev1.ApiKey, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	return c.manage.GetApiKey(ctx, &managev1.GetApiKeyRequest{Id: id})
}

// UpdateAPIKey replaces a key's own limits.
func (c *Client) UpdateAPIKey(ctx context.Context, id string, rpm, tpm int64) (*managev1.ApiKey, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	return c.manage.UpdateApiKey(ctx, &managev1.UpdateApiKeyRequest{Id: id, Rpm: rpm, Tpm: tpm})
}

// RevokeAPIKey revokes a key.
func (c *Client) RevokeAPIKey(ctx context.Context, id string) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	_, err := c.manage.RevokeApiKey(ctx, &managev1.RevokeApiKeyRequest{Id: id})
	return err
}
