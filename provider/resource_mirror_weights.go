package provider

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/llmgw/llmgw/api/mirrorv1"
)

var (
	_ resource.ResourceWithConfigure   = (*mirrorWeightsResource)(nil)
	_ resource.ResourceWithImportState = (*mirrorWeightsResource)(nil)
)

// defaultMirrorTimeout is how long apply waits for a download by default.
const defaultMirrorTimeout = "2h"

// mirrorNameRE is the mirror's rule for model and version names.
var mirrorNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]*$`)

// mirrorPoll is how often apply asks how far a download is.
var mirrorPoll = time.Second

// mirrorWeightsResource is llmgw_mirror_weights: one model version a weights
// mirror must hold.
type mirrorWeightsResource struct {
	client *Client
}

func newMirrorWeightsResource() resource.Resource { return &mirrorWeightsResource{} }

// mirrorWeightsModel is llmgw_mirror_weights' state.
type mirrorWeightsModel struct {
	ID      types.String `tfsdk:"id"`
	Mirror  types.String `tfsdk:"mirror"`
	Model   types.String `tfsdk:"model"`
	Version types.String `tfsdk:"version"`
	Source  types.String `tfsdk:"source"`
	Timeout types.String `tfsdk:"timeout"`
	URL     types.String `tfsdk:"url"`
	Bytes   types.Int64  `tfsdk:"bytes"`
	Files   types.List   `tfsdk:"files"`
}

func (r *mirrorWeightsResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_mirror_weights"
}

func (r *mirrorWeightsResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replace := []planmodifier.String{stringplanmodifier.RequiresReplace()}
	name := []validator.String{stringvalidator.RegexMatches(mirrorNameRE, "use letters, digits, '.', '_', '+' and '-', starting with a letter or digit")}
	resp.Schema = schema.Schema{
		MarkdownDescription: "One model version a weights mirror (`llmgw mirror serve`) must hold. Apply starts the download in the mirror " +
			"(Hugging Face, `http(s)://`, another mirror's set or `s3://`, as `llmgw mirror fetch` takes them) and waits until every file " +
			"landed and was verified, or fails with the mirror's error; destroy deletes the version from the mirror. " +
			"Point a model's `source` at `url` to have the nodes fetch it from there. The provider speaks to the mirror's " +
			"management listener directly, not through the control plane: over mutual TLS it signs itself a client " +
			"certificate (common name `" + mirrorClientName + "`, valid for an hour) with the provider's `pki` CA.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "`model/version`.",
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"mirror": schema.StringAttribute{
				Required: true,
				MarkdownDescription: "The mirror's management listener: `https://host:8082` for a mirror run with `--tls-ca`, `--tls-cert` and " +
					"`--tls-key` (mutual TLS; the provider's `pki` must name that CA and its key), or `http://host:8082` for one without. Changing it replaces the resource.",
				PlanModifiers: replace,
				Validators:    []validator.String{stringvalidator.RegexMatches(regexp.MustCompile(`^https?://[^/]+/?$`), "must be http(s)://host:port of the mirror's management listener")},
			},
			"model": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: "The model's directory in the mirror. Changing it replaces the resource.",
				PlanModifiers:       replace,
				Validators:          name,
			},
			"version": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: "The version's directory under the model; pin one rather than follow an upstream branch. Changing it replaces the resource.",
				PlanModifiers:       replace,
				Validators:          name,
			},
			"source": schema.StringAttribute{
				Required: true,
				MarkdownDescription: "Where the mirror fetches it from: `hf:org/repo/file`, `hf:org/repo@revision` (every file of the revision), " +
					"`https://…/file`, `http://mirror:8081/model/version/` (another mirror's set), `s3://bucket/key` or `s3://bucket/prefix/`. Changing it replaces the resource.",
				PlanModifiers: replace,
				Validators:    []validator.String{stringvalidator.RegexMatches(regexp.MustCompile(`^(hf:|https?://|s3://)`), "must start with hf:, http://, https:// or s3://")},
			},
			"timeout": schema.StringAttribute{
				Optional:            true,
				Computed:            true,
				Default:             stringdefault.StaticString(defaultMirrorTimeout),
				MarkdownDescription: "How long apply waits for the download, written like `90s` or `3h` (default `" + defaultMirrorTimeout + "`). A download still running then goes on in the mirror; apply again to wait for it.",
				Validators:          []validator.String{durationValidator{}},
			},
			"url": schema.StringAttribute{
				Computed:            true,
				MarkdownDescription: "The version's address on the mirror's bytes listener (a set's `source` for a model), when the mirror was started with `--base`; empty otherwise.",
			},
			"bytes": schema.Int64Attribute{
				Computed:            true,
				MarkdownDescription: "The version's size in bytes.",
			},
			"files": schema.ListAttribute{
				Computed:            true,
				ElementType:         types.StringType,
				MarkdownDescription: "The version's files, paths inside it.",
			},
		},
	}
}

func (r *mirrorWeightsResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.client = clientFrom(req.ProviderData, &resp.Diagnostics)
}

func (r *mirrorWeightsResource) mirror(m mirrorWeightsModel, diags *diag.Diagnostics) *mirrorClient {
	if r.client == nil {
		diags.AddError("llmgw provider not configured", "The provider block did not configure; see the errors above.")
		return nil
	}
	mc, err := r.client.mirror(m.Mirror.ValueString())
	if err != nil {
		diags.AddAttributeError(path.Root("mirror"), "Cannot speak to the weights mirror", err.Error())
		return nil
	}
	return mc
}

func (r *mirrorWeightsResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan mirrorWeightsModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	mc := r.mirror(plan, &resp.Diagnostics)
	if mc == nil {
		return
	}
	model, version := plan.Model.ValueString(), plan.Version.ValueString()
	what := model + "/" + version
	if err := mc.startDownload(ctx, mirrorv1.DownloadRequest{Model: model, Version: version, Source: plan.Source.ValueString()}); err != nil {
		resp.Diagnostics.AddError("Cannot start the download of "+what, mirrorDetail(plan, err))
		return
	}
	timeout, _ := time.ParseDuration(plan.Timeout.ValueString())
	if d := r.wait(ctx, mc, plan, timeout); d != nil {
		resp.Diagnostics.Append(d...)
		return
	}
	plan.ID = types.StringValue(what)
	resp.Diagnostics.Append(r.refresh(ctx, mc, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

// wait polls the download until it completed, failed, or timeout passed.
func (r *mirrorWeightsResource) wait(ctx context.Context, mc *mirrorClient, plan mirrorWeightsModel, timeout time.Duration) diag.Diagnostics {
	var diags diag.Diagnostics
	model, version := plan.Model.ValueString(), plan.Version.ValueString()
	what := model + "/" + version
	deadline := time.Now().Add(timeout)
	for {
		st, ok, err := mc.download(ctx, model, version)
		switch {
		case err != nil:
			diags.AddError("Cannot follow the download of "+what, mirrorDetail(plan, err))
			return diags
		case !ok:
			diags.AddError("The mirror lost the download of "+what, fmt.Sprintf("The mirror at %s no longer knows a download of %s (it restarted?). Apply again: the download resumes from the files it left.", plan.Mirror.ValueString(), what))
			return diags
		case st.State == mirrorv1.StateComplete:
			return nil
		case st.State == mirrorv1.StateFailed:
			diags.AddAttributeError(path.Root("source"), "Downloading "+what+" into the mirror failed",
				fmt.Sprintf("The mirror at %s fetching %s answered: %s. Fix the source (or the mirror's access to it: HF_TOKEN_FILE, AWS_* variables) and apply again; the files already fetched are kept.", plan.Mirror.ValueString(), plan.Source.ValueString(), st.LastError))
			return diags
		}
		if time.Now().After(deadline) {
			total := "an unknown size"
			if st.Total != nil {
				total = fmt.Sprintf("%d bytes", *st.Total)
			}
			diags.AddError("The download of "+what+" is still running",
				fmt.Sprintf("After %s the mirror holds %d of %s. The download goes on in the mirror: apply again to wait for it, or raise timeout.", timeout, st.Bytes, total))
			return diags
		}
		select {
		case <-ctx.Done():
			diags.AddError("Waiting for the download of "+what+" was cancelled", ctx.Err().Error()+". The download goes on in the mirror.")
			return diags
		case <-time.After(mirrorPoll):
		}
	}
}

// refresh reads what the mirror holds into m; a version it does not hold
// leaves m.ID null.
func (r *mirrorWeightsResource) refresh(ctx context.Context, mc *mirrorClient, m *mirrorWeightsModel) diag.Diagnostics {
	var diags diag.Diagnostics
	h, ok, err := mc.holding(ctx, m.Model.ValueString(), m.Version.ValueString())
	if err != nil {
		diags.AddError("Cannot read the mirror's holdings", mirrorDetail(*m, err))
		return diags
	}
	if !ok {
		m.ID = types.StringNull()
		return diags
	}
	files := make([]string, 0, len(h.Files))
	for _, f := range h.Files {
		files = append(files, f.Path)
	}
	list, d := types.ListValueFrom(ctx, types.StringType, files)
	diags.Append(d...)
	m.Files, m.Bytes, m.URL = list, types.Int64Value(h.Bytes), types.StringValue(h.URL)
	return diags
}

func (r *mirrorWeightsResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var st mirrorWeightsModel
	resp.Diagnostics.Append(req.State.Get(ctx, &st)...)
	if resp.Diagnostics.HasError() {
		return
	}
	mc := r.mirror(st, &resp.Diagnostics)
	if mc == nil {
		return
	}
	resp.Diagnostics.Append(r.refresh(ctx, mc, &st)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if st.ID.IsNull() {
		resp.State.RemoveResource(ctx) // deleted from the mirror behind Terraform's back
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &st)...)
}

// Update changes only timeout: everything else replaces the resource.
func (r *mirrorWeightsResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, st mirrorWeightsModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &st)...)
	if resp.Diagnostics.HasError() {
		return
	}
	st.Timeout = plan.Timeout
	resp.Diagnostics.Append(resp.State.Set(ctx, &st)...)
}

func (r *mirrorWeightsResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var st mirrorWeightsModel
	resp.Diagnostics.Append(req.State.Get(ctx, &st)...)
	if resp.Diagnostics.HasError() {
		return
	}
	mc := r.mirror(st, &resp.Diagnostics)
	if mc == nil {
		return
	}
	what := st.Model.ValueString() + "/" + st.Version.ValueString()
	if err := mc.deleteHolding(ctx, st.Model.ValueString(), st.Version.ValueString()); err != nil {
		detail := mirrorDetail(st, err)
		if errors.Is(err, errDownloading) {
			detail = fmt.Sprintf("A download of %s is running in the mirror at %s; it cannot be deleted until it ends. Wait for it (GET /v1/downloads/%s on the mirror) and destroy again.", what, st.Mirror.ValueString(), what)
		}
		resp.Diagnostics.AddError("Cannot delete "+what+" from the mirror", detail)
	}
}

// ImportState takes `<mirror management URL>/<model>/<version>`, e.g.
// https://models.internal:8082/qwen2.5-14b/2026-03. The source comes from
// the mirror's record of the download that filled it.
func (r *mirrorWeightsResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	mirror, model, version, err := parseMirrorImportID(req.ID)
	if err != nil {
		resp.Diagnostics.AddError("Cannot import llmgw_mirror_weights", err.Error())
		return
	}
	m := mirrorWeightsModel{Mirror: types.StringValue(mirror), Model: types.StringValue(model), Version: types.StringValue(version), Timeout: types.StringValue(defaultMirrorTimeout)}
	mc := r.mirror(m, &resp.Diagnostics)
	if mc == nil {
		return
	}
	st, ok, err := mc.download(ctx, model, version)
	if err != nil {
		resp.Diagnostics.AddError("Cannot import "+model+"/"+version, mirrorDetail(m, err))
		return
	}
	if !ok {
		resp.Diagnostics.AddError("Cannot import "+model+"/"+version,
			fmt.Sprintf("The mirror at %s keeps no record of the source of %s/%s (it was not downloaded through it since it started). Write the resource with its source and apply: the mirror finds the files in place and fetches nothing again.", mirror, model, version))
		return
	}
	m.Source = types.StringValue(st.Source)
	m.ID = types.StringValue(model + "/" + version)
	resp.Diagnostics.Append(r.refresh(ctx, mc, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if m.ID.IsNull() {
		resp.Diagnostics.AddError("Cannot import "+model+"/"+version, fmt.Sprintf("The mirror at %s does not hold %s/%s.", mirror, model, version))
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// parseMirrorImportID splits `scheme://host:port/model/version`.
func parseMirrorImportID(id string) (mirror, model, version string, err error) {
	u, perr := url.Parse(id)
	parts := []string{}
	if perr == nil {
		parts = strings.Split(strings.Trim(u.Path, "/"), "/")
	}
	if perr != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || len(parts) != 2 || !mirrorNameRE.MatchString(parts[0]) || !mirrorNameRE.MatchString(parts[1]) {
		return "", "", "", fmt.Errorf("import id %q: use <mirror management URL>/<model>/<version>, e.g. https://models.internal:8082/qwen2.5-14b/2026-03", id)
	}
	return u.Scheme + "://" + u.Host, parts[0], parts[1], nil
}

// mirrorDetail says what the mirror answered and what to check.
func mirrorDetail(m mirrorWeightsModel, err error) string {
	var me *mirrorError
	if errors.As(err, &me) {
		switch me.Status {
		case 400:
			return fmt.Sprintf("%v. The mirror refused the request: check model, version and source.", err)
		case 401, 403:
			return fmt.Sprintf("%v. The mirror refused the provider's certificate: its --tls-ca must be the CA of the provider's pki.", err)
		}
		return err.Error() + "."
	}
	return fmt.Sprintf("%v. Check that the mirror's management listener runs at %s and, for https, that its certificate is signed by the provider's pki CA.", err, m.Mirror.ValueString())
}
