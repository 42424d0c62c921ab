package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/internal/buildinfo"
	"github.com/llmgw/llmgw/pki"
	"github.com/llmgw/llmgw/provider/proxmox"
)

// callTimeout bounds one management call, so that an endpoint that accepts
// connections but never answers cannot hang a plan.
const callTimeout = 30 * time.Second

// Client is the provider's one typed client of the management API, made in
// Configure and handed to every resource and data source as its
// ProviderData. Its methods return gRPC errors; Diag turns one into a
// diagnostic that says what to do.
type Client struct {
	manage   managev1.ManageServiceClient
	conn     *grpc.ClientConn
	endpoint string
	// pkiCert and pkiKey name the CA files of the provider's pki attribute.
	// The key is read only when a certificate is signed.
	pkiCert string
	pkiKey  string
	// pve is the Proxmox VE client of the provider's proxmox attribute, nil
	// when it is not configured; pveMissing then says what to set.
	pve        *proxmox.Client
	pveMissing string
}

// bearer sends the admin token with every call, and only over TLS.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }

// NewClient makes the client for the resolved provider settings. It does not
// connect: the first call does, so a plan fails with a diagnostic, not the
// provider's setup.
func NewClient(s settings) (*Client, error) {
	tlsCfg, err := pki.ClientTLS(s.CACertFile, "", "", "")
	if err != nil {
		return nil, fmt.Errorf("reading ca_cert_file %s: %w", s.CACertFile, err)
	}
	conn, err := grpc.NewClient(s.Endpoint,
		grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)),
		grpc.WithPerRPCCredentials(bearer(s.Token)),
		grpc.WithUserAgent(buildinfo.UserAgent("terraform-provider-llmgw")))
	if err != nil {
		return nil, fmt.Errorf("dialing endpoint %s: %w", s.Endpoint, err)
	}
	return &Client{manage: managev1.NewManageServiceClient(conn), conn: conn, endpoint: s.Endpoint, pkiCert: s.PKICert, pkiKey: s.PKIKey}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

func withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, callTimeout)
}

// GetModel returns a catalog model with its status.
func (c *Client) GetModel(ctx context.Context, name string) (*managev1.Model, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	return c.manage.GetModel(ctx, &managev1.GetModelRequest{Name: name})
}

// CreateModel adds a model to the catalog.
func (c *Client) CreateModel(ctx context.Context, m *managev1.Model) (*managev1.Model, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	return c.manage.CreateModel(ctx, &managev1.CreateModelRequest{Model: m})
}

// UpdateModel replaces a model's definition.
func (c *Client) UpdateModel(ctx context.Context, m *managev1.Model) (*managev1.Model, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	return c.manage.UpdateModel(ctx, &managev1.UpdateModelRequest{Model: m})
}

// DeleteModel removes a model from the catalog.
func (c *Client) DeleteModel(ctx context.Context, name string) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	_, err := c.manage.DeleteModel(ctx, &managev1.DeleteModelRequest{Name: name})
	return err
}

// ListReplicas lists a model's replicas, recent failures included.
func (c *Client) ListReplicas(ctx context.Context, model string) ([]*managev1.Replica, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := c.manage.ListReplicas(ctx, &managev1.ListReplicasRequest{Model: model})
	return resp.GetReplicas(), err
}

// PlanPlacement dry-runs placement of a definition.
func (c *Client) PlanPlacement(ctx context.Context, m *managev1.Model) (*managev1.Explanation, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	return c.manage.PlanPlacement(ctx, &managev1.PlanPlacementRequest{Model: m})
}

// ExplainPlacement explains placing one more replica of a catalog model.
func (c *Client) ExplainPlacement(ctx context.Context, model string) (*managev1.Explanation, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	return c.manage.ExplainPlacement(ctx, &managev1.ExplainPlacementRequest{Model: model})
}

// ListNodes lists the fleet.
func (c *Client) ListNodes(ctx context.Context) ([]*managev1.Node, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := c.manage.ListNodes(ctx, &managev1.ListNodesRequest{})
	return resp.GetNodes(), err
}

// IsNotFound reports whether err is the control plane saying the object does
// not exist.
func IsNotFound(err error) bool { return status.Code(err) == codes.NotFound }

// Diag turns an error of a management call into a diagnostic whose summary
// says what failed and whose detail says what to do. op says what was being
// done ("creating model qwen").
func (c *Client) Diag(op string, err error) diag.Diagnostic {
	summary, detail := explain(c.endpoint, op, err)
	return diag.NewErrorDiagnostic(summary, detail)
}

// explain is Diag's text.
func explain(endpoint, op string, err error) (summary, detail string) {
	st, _ := status.FromError(err)
	msg := st.Message()
	// The control plane's messages often start with what was being done.
	if rest, ok := strings.CutPrefix(msg, op+": "); ok {
		msg = rest
	}
	switch st.Code() {
	case codes.Unauthenticated:
		return "The llmgw control plane refused the admin token",
			fmt.Sprintf("%s: %s.\n\nCheck the provider's token attribute or %s: it must be an admin token of this control plane, made with `llmgw keys admin-token`.", op, msg, EnvToken)
	case codes.Unavailable:
		hint := fmt.Sprintf("Check the provider's endpoint or %s (the control plane's manage_listen address) and that the control plane is running.", EnvEndpoint)
		if strings.Contains(msg, "certificate") || strings.Contains(msg, "x509") || strings.Contains(msg, "tls") {
			hint = fmt.Sprintf("The TLS handshake failed: check ca_cert_file or %s names the CA that signed the control plane's certificate, and that endpoint uses a name the certificate holds.", EnvCACert)
		}
		return "Cannot reach the llmgw control plane",
			fmt.Sprintf("%s: endpoint %s is unreachable: %s.\n\n%s", op, endpoint, msg, hint)
	case codes.DeadlineExceeded:
		return "The llmgw control plane did not answer in time",
			fmt.Sprintf("%s: no answer from %s within %s: %s.\n\nCheck that the control plane at that endpoint is healthy (`llmgw ctl status`).", op, endpoint, callTimeout, msg)
	case codes.FailedPrecondition:
		if strings.Contains(msg, "server.yaml") {
			return "The model is declared in the control plane's server.yaml",
				fmt.Sprintf("%s: %s.\n\nA model declared in server.yaml cannot be managed by Terraform: manage it in server.yaml, or remove it there first (and restart the control plane), then apply again.", op, msg)
		}
		return "The llmgw control plane refused the change", fmt.Sprintf("%s: %s.", op, msg)
	case codes.InvalidArgument:
		return "The llmgw control plane rejected the definition",
			fmt.Sprintf("%s: %s.\n\nFix the attribute the message names and apply again.", op, msg)
	case codes.AlreadyExists:
		return "The object already exists in the llmgw control plane",
			fmt.Sprintf("%s: %s.\n\nTo manage it with Terraform, import it (`terraform import <address> <name>`) instead of creating it.", op, msg)
	case codes.NotFound:
		return "Not found in the llmgw control plane", fmt.Sprintf("%s: %s.", op, msg)
	}
	if errors.Is(err, context.Canceled) {
		return "Interrupted", fmt.Sprintf("%s: %v.", op, err)
	}
	return "The llmgw control plane call failed", fmt.Sprintf("%s: %s (%s).", op, msg, st.Code())
}

// clientFrom takes the provider's client out of ProviderData; nil data
// (provider not configured yet, e.g. during validation) yields nil.
func clientFrom(data any, diags *diag.Diagnostics) *Client {
	if data == nil {
		return nil
	}
	c, ok := data.(*Client)
	if !ok {
		diags.AddError("Unexpected provider data", fmt.Sprintf("Expected *provider.Client, got %T. This is a bug in the llmgw provider; please report it.", data))
		return nil
	}
	return c
}
