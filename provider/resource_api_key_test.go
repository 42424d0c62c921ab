package provider

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/ephemeral"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/spec"
)

func TestAPIKeyFromAPI(t *testing.T) {
	exp := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name        string
		in          *managev1.ApiKey
		prior       apiKeyResourceModel
		wantExpires string
	}{
		{"no expiry", &managev1.ApiKey{Id: "key-1", Name: "ci", Project: "p", Prefix: "llmgw-abcdef"}, apiKeyResourceModel{}, ""},
		{"the configured spelling is kept", &managev1.ApiKey{Id: "key-1", ExpiresUnixMs: exp.UnixMilli()},
			apiKeyResourceModel{ExpiresAt: types.StringValue("2027-01-01T01:00:00+01:00")}, "2027-01-01T01:00:00+01:00"},
		{"imported: UTC", &managev1.ApiKey{Id: "key-1", ExpiresUnixMs: exp.UnixMilli()}, apiKeyResourceModel{}, "2027-01-01T00:00:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.prior.Secret = types.StringValue("kept")
			m := apiKeyFromAPI(tt.in, tt.prior)
			if m.ID.ValueString() != "key-1" || m.Secret.ValueString() != "kept" || !m.SecretWO.IsNull() {
				t.Fatalf("state = %+v: id from the API, secret kept, secret_wo never stored", m)
			}
			if m.ExpiresAt.ValueString() != tt.wantExpires || (tt.wantExpires == "") != m.ExpiresAt.IsNull() {
				t.Fatalf("expires_at = %s, want %q", m.ExpiresAt, tt.wantExpires)
			}
		})
	}
}

func TestAPIKeyValidators(t *testing.T) {
	good, _, _ := spec.NewAPIKey()
	tests := []struct {
		name string
		v    validator.String
		in   string
		want string
	}{
		{"rfc3339", rfc3339Validator{}, "2027-01-01T00:00:00Z", ""},
		{"a date is not a time", rfc3339Validator{}, "2027-01-01", "Not an RFC 3339 time"},
		{"a generated secret", apiKeySecretValidator{}, good, ""},
		{"an admin token", apiKeySecretValidator{}, "llmgwadm-" + good[9:], "Not an llmgw API key"},
		{"too short", apiKeySecretValidator{}, good[:20], "Not an llmgw API key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var resp validator.StringResponse
			tt.v.ValidateString(context.Background(), validator.StringRequest{Path: path.Root("x"), ConfigValue: types.StringValue(tt.in)}, &resp)
			if tt.want == "" {
				if resp.Diagnostics.HasError() {
					t.Fatal(resp.Diagnostics)
				}
				return
			}
			if !resp.Diagnostics.HasError() || resp.Diagnostics.Errors()[0].Summary() != tt.want {
				t.Fatalf("diagnostics = %v, want %q", resp.Diagnostics, tt.want)
			}
			if len(tt.in) > 12 && strings.Contains(resp.Diagnostics.Errors()[0].Detail(), tt.in[12:]) {
				t.Fatal("the diagnostic quotes the secret")
			}
		})
	}
}

func TestAPIKeySchema(t *testing.T) {
	var s resource.SchemaResponse
	newAPIKeyResource().Schema(context.Background(), resource.SchemaRequest{}, &s)
	if d := s.Schema.ValidateImplementation(context.Background()); d.HasError() {
		t.Fatal(d)
	}
	a := s.Schema.Attributes
	if !a["secret"].IsSensitive() || !a["secret"].IsComputed() || !a["secret_wo"].IsWriteOnly() || !a["secret_wo"].IsSensitive() {
		t.Fatal("secret must be computed and sensitive, secret_wo write-only and sensitive")
	}
}

func TestAPIKeySecretEphemeral(t *testing.T) {
	ctx := context.Background()
	e := newAPIKeySecretEphemeral()
	var s ephemeral.SchemaResponse
	e.Schema(ctx, ephemeral.SchemaRequest{}, &s)
	if d := s.Schema.ValidateImplementation(ctx); d.HasError() {
		t.Fatal(d)
	}
	seen := map[string]bool{}
	for range 3 {
		resp := ephemeral.OpenResponse{Result: tfsdk.EphemeralResultData{Schema: s.Schema, Raw: tftypes.NewValue(s.Schema.Type().TerraformType(ctx), nil)}}
		e.Open(ctx, ephemeral.OpenRequest{}, &resp)
		if resp.Diagnostics.HasError() {
			t.Fatal(resp.Diagnostics)
		}
		var got apiKeySecretModel
		if d := resp.Result.Get(ctx, &got); d.HasError() {
			t.Fatal(d)
		}
		prefix, _, err := spec.ParseAPIKey(got.Secret.ValueString())
		if err != nil || prefix != got.Prefix.ValueString() {
			t.Fatalf("generated secret is not well formed (%v) or its prefix %q is wrong", err, got.Prefix.ValueString())
		}
		if seen[got.Secret.ValueString()] {
			t.Fatal("the same secret twice")
		}
		seen[got.Secret.ValueString()] = true
	}
}
