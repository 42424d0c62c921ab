package provider

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestResolve(t *testing.T) {
	env := map[string]string{EnvEndpoint: "env:9090", EnvToken: "env-token", EnvCACert: "/env/ca.pem", EnvCAKey: "/env/ca-key.pem"}
	getenv := func(k string) string { return env[k] }
	tests := []struct {
		name string
		cfg  providerModel
		want settings
	}{
		{name: "empty block takes the environment", want: settings{Endpoint: "env:9090", Token: "env-token", CACertFile: "/env/ca.pem", PKICert: "/env/ca.pem", PKIKey: "/env/ca-key.pem"}},
		{
			name: "configured values win",
			cfg: providerModel{Endpoint: types.StringValue("https://cp:9090"), Token: types.StringValue("t"), CACertFile: types.StringValue("/c.pem"),
				PKI: &pkiModel{CACertFile: types.StringValue("/p.pem"), CAKeyFile: types.StringValue("/p-key.pem")}},
			want: settings{Endpoint: "cp:9090", Token: "t", CACertFile: "/c.pem", PKICert: "/p.pem", PKIKey: "/p-key.pem"},
		},
		{
			name: "pki falls back per attribute",
			cfg:  providerModel{PKI: &pkiModel{CACertFile: types.StringNull(), CAKeyFile: types.StringValue("/k.pem")}},
			want: settings{Endpoint: "env:9090", Token: "env-token", CACertFile: "/env/ca.pem", PKICert: "/env/ca.pem", PKIKey: "/k.pem"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.cfg.resolve(getenv); got != tt.want {
				t.Fatalf("resolve = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestSchemas checks every schema as the framework would at startup, and
// that every attribute has a description for the generated docs.
func TestSchemas(t *testing.T) {
	ctx := context.Background()
	p := New("test")()
	var ps provider.SchemaResponse
	p.Schema(ctx, provider.SchemaRequest{}, &ps)
	if d := ps.Schema.ValidateImplementation(ctx); d.HasError() {
		t.Fatalf("provider schema: %v", d)
	}
	for name, a := range ps.Schema.Attributes {
		if a.GetMarkdownDescription() == "" {
			t.Errorf("provider attribute %s has no MarkdownDescription", name)
		}
	}
	for _, f := range p.Resources(ctx) {
		var rs resource.SchemaResponse
		f().Schema(ctx, resource.SchemaRequest{}, &rs)
		if d := rs.Schema.ValidateImplementation(ctx); d.HasError() {
			t.Fatalf("resource schema: %v", d)
		}
		for name, a := range rs.Schema.Attributes {
			if a.GetMarkdownDescription() == "" {
				t.Errorf("resource attribute %s has no MarkdownDescription", name)
			}
		}
	}
	for _, f := range p.DataSources(ctx) {
		var ds datasource.SchemaResponse
		f().Schema(ctx, datasource.SchemaRequest{}, &ds)
		if d := ds.Schema.ValidateImplementation(ctx); d.HasError() {
			t.Fatalf("data source schema: %v", d)
		}
	}
}

func TestExplain(t *testing.T) {
	tests := []struct {
		name        string
		err         error
		wantSummary string
		wantDetail  []string
	}{
		{"unauthenticated", status.Error(codes.Unauthenticated, "unknown admin token"), "refused the admin token", []string{"LLMGW_TOKEN", "unknown admin token"}},
		{"unavailable", status.Error(codes.Unavailable, "connection refused"), "Cannot reach", []string{"cp:9090", "is running", "LLMGW_ENDPOINT"}},
		{"bad CA", status.Error(codes.Unavailable, "tls: x509: certificate signed by unknown authority"), "Cannot reach", []string{"LLMGW_CA_CERT"}},
		{"declared in server.yaml", status.Error(codes.FailedPrecondition, `creating model m: model is declared in server.yaml: "m" is declared in server.yaml`), "declared in the control plane's server.yaml", []string{"manage it in server.yaml, or remove it there first"}},
		{"invalid argument names the field", status.Error(codes.InvalidArgument, "creating model m: profiles[0].tp: must be at least 1"), "rejected the definition", []string{"creating model m: profiles[0].tp: must be at least 1"}},
		{"already exists", status.Error(codes.AlreadyExists, `model exists: "m"`), "already exists", []string{"terraform import"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			summary, detail := explain("cp:9090", "creating model m", tt.err)
			if !strings.Contains(summary, tt.wantSummary) {
				t.Errorf("summary = %q, want it to contain %q", summary, tt.wantSummary)
			}
			for _, w := range tt.wantDetail {
				if !strings.Contains(detail, w) {
					t.Errorf("detail = %q, want it to contain %q", detail, w)
				}
			}
			if strings.Contains(detail, "creating model m: creating model m") {
				t.Errorf("detail repeats the operation: %q", detail)
			}
		})
	}
}
