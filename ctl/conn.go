package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/internal/buildinfo"
	"github.com/llmgw/llmgw/pki"
)

// connFlags are the flags every management API command takes.
type connFlags struct {
	endpoint   string
	token      string
	caCert     string
	serverName string
	timeout    time.Duration
	// anonymous calls without a token (login, which is how one is got).
	anonymous bool
}

// register adds the connection flags to fs, defaulting to the environment.
func (c *connFlags) register(fs *flag.FlagSet, env func(string) string) {
	fs.StringVar(&c.endpoint, "endpoint", env(EnvEndpoint), "host:port of the management API (env "+EnvEndpoint+")")
	// The token's default is read from the environment in dial, not here:
	// a flag's default is printed by every usage message.
	fs.StringVar(&c.token, "token", "", "admin token (env "+EnvToken+")")
	fs.StringVar(&c.caCert, "ca-cert", env(EnvCACert), "CA certificate that signed the control plane's certificate; system roots if empty (env "+EnvCACert+")")
	fs.StringVar(&c.serverName, "server-name", "", "name to verify the control plane's certificate against, when it differs from the endpoint's host")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "how long to wait for the management API")
}

// bearerToken sends the admin token with every call, and only over TLS.
type bearerToken string

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (t bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials: the token
// never travels in clear text.
func (bearerToken) RequireTransportSecurity() bool { return true }

// client is an open connection to the management API.
type client struct {
	managev1.ManageServiceClient
	conn     *grpc.ClientConn
	endpoint string
	timeout  time.Duration
}

// dial checks the connection flags and opens a client. A usage problem (no
// endpoint, no token) is reported with exit code 2, anything else with 1.
func (a *app) dial(c *connFlags) (*client, int, bool) {
	if c.endpoint == "" {
		fmt.Fprintf(a.stderr, "llmgw ctl: no management API endpoint: set --endpoint or %s (host:port, e.g. 127.0.0.1:9090)\n", EnvEndpoint)
		return nil, exitUsage, false
	}
	if c.token == "" {
		c.token = a.env(EnvToken)
	}
	if c.token == "" && !c.anonymous {
		fmt.Fprintf(a.stderr, "llmgw ctl: no admin token: set --token or %s (an administrator gets one with llmgw ctl login)\n", EnvToken)
		return nil, exitUsage, false
	}
	if c.timeout <= 0 {
		fmt.Fprintf(a.stderr, "llmgw ctl: --timeout must be positive, got %s\n", c.timeout)
		return nil, exitUsage, false
	}
	cfg, err := pki.ClientTLS(c.caCert, "", "", c.serverName)
	if err != nil {
		return nil, a.errorf("--ca-cert / %s: %v", EnvCACert, err), false
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg)), grpc.WithUserAgent(buildinfo.UserAgent("llmgw-ctl"))}
	if !c.anonymous {
		opts = append(opts, grpc.WithPerRPCCredentials(bearerToken(c.token)))
	}
	conn, err := grpc.NewClient(c.endpoint, opts...)
	if err != nil {
		return nil, a.errorf("connecting to %s: %v", c.endpoint, err), false
	}
	return &client{
		ManageServiceClient: managev1.NewManageServiceClient(conn),
		conn:                conn,
		endpoint:            c.endpoint,
		timeout:             c.timeout,
	}, exitOK, true
}

// close releases the connection.
func (c *client) close() { _ = c.conn.Close() }

// callCtx bounds one call by --timeout.
func (c *client) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}

// rpcError prints a failed call as `llmgw ctl: <doing>: <message>`, with a
// hint for the failures an operator fixes on their side, and returns 1.
func (a *app) rpcError(c *client, doing string, err error) int {
	st, ok := status.FromError(err)
	if !ok {
		return a.errorf("%s: %v", doing, err)
	}
	msg := st.Message()
	if msg == "" {
		msg = st.Code().String()
	}
	fmt.Fprintf(a.stderr, "llmgw ctl: %s: %s\n", doing, msg)
	switch st.Code() {
	case codes.Unauthenticated, codes.PermissionDenied:
		fmt.Fprintf(a.stderr, "hint: the control plane refused the admin token; check %s (or --token); a token from llmgw ctl login expires: log in again\n", EnvToken)
	case codes.Unavailable:
		fmt.Fprintf(a.stderr, "hint: the management API at %s is unreachable; check %s (or --endpoint), that the control plane runs, and its certificate (--ca-cert, --server-name)\n", c.endpoint, EnvEndpoint)
	case codes.DeadlineExceeded:
		fmt.Fprintf(a.stderr, "hint: no answer from %s within %s (--timeout)\n", c.endpoint, c.timeout)
	}
	return exitError
}

// isCode reports whether err is a gRPC status with code.
func isCode(err error, code codes.Code) bool {
	var se interface{ GRPCStatus() *status.Status }
	return errors.As(err, &se) && se.GRPCStatus().Code() == code
}
