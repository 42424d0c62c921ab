// Package manageapi starts the real management API (runtime/manage) for the
// tests of its clients, so that they test against the service the control
// plane runs without importing the control plane themselves: gRPC over TLS
// on a loopback port, with the service's own admin-token check and logins,
// on a SQLite store in a temporary directory.
//
//	api := manageapi.Start(t, manageapi.Options{Models: ...})
//	// dial api.Addr trusting api.CAFile, with api.AdminToken as the bearer
//
// Everything is stopped and removed when the test ends.
package manageapi

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/pki"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/keys"
	"github.com/llmgw/llmgw/runtime/manage"
	"github.com/llmgw/llmgw/runtime/models"
	"github.com/llmgw/llmgw/runtime/reconcile"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/runtime/users"
	"github.com/llmgw/llmgw/spec"
)

// User is an account created before the API starts.
type User struct {
	Email, Password string
	Admin           bool
}

// Options configure the management API.
type Options struct {
	// Models is the catalog as server.yaml would declare it.
	Models []spec.Model
	// DefaultPrice is auth.default_price.
	DefaultPrice *spec.Pricing
	// Users are created first (bcrypt at its lowest cost); anyone can
	// log in who is an administrator.
	Users []User
	// LoginTTL is auth.login_ttl (the service's default when zero).
	LoginTTL time.Duration
	// TokenName names the admin token made on the host (AdminToken);
	// "test" when empty.
	TokenName string
	// Now is the service's clock; nil is time.Now.
	Now func() time.Time
}

// API is a running management API.
type API struct {
	// Addr is the host:port it listens on (127.0.0.1).
	Addr string
	// CAFile is the PEM file of the CA that signed its certificate.
	CAFile string
	// AdminToken is an admin token made on the host, as `llmgw keys
	// admin-token` makes one.
	AdminToken string

	st store.Store
}

// Start serves the management API until the test ends.
func Start(t testing.TB, opts Options) *API {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "llmgw.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	reg, err := models.New(opts.Models, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	ua := users.New(st, bcrypt.MinCost)
	for _, u := range opts.Users {
		if _, err := ua.Create(ctx, u.Email, u.Password, u.Admin); err != nil {
			t.Fatal(err)
		}
	}
	name := opts.TokenName
	if name == "" {
		name = "test"
	}
	tok, err := keys.New(st).CreateAdminToken(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	// The reconciler is not run: it only answers placement questions
	// (explain-placement, what the empty fleet can hold).
	fl := fleet.New()
	rec := reconcile.New(reconcile.Options{Fleet: fl, Catalog: reg, Logger: slog.New(slog.DiscardHandler)})
	svc := manage.New(manage.Options{Version: "test", Fleet: fl, Catalog: reg, Reconciler: rec, Tokens: st, Store: st,
		DefaultPrice: opts.DefaultPrice, Users: ua, LoginTTL: opts.LoginTTL, Now: opts.Now,
		Logger: slog.New(slog.DiscardHandler)})

	caFile, serverTLS := newPKI(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(serverTLS)), grpc.UnaryInterceptor(svc.AuthInterceptor()))
	managev1.RegisterManageServiceServer(srv, svc)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return &API{Addr: lis.Addr().String(), CAFile: caFile, AdminToken: tok.Secret, st: st}
}

// newPKI makes a throwaway CA and a server certificate for 127.0.0.1.
func newPKI(t testing.TB) (caFile string, server *tls.Config) {
	t.Helper()
	caDir := t.TempDir()
	caFile, _, err := pki.InitCA(caDir, pki.CAOptions{Validity: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath, err := pki.IssueServer(caDir, "llmgw-manage", []string{"127.0.0.1"}, t.TempDir(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pki.ServerTLS(certPath, keyPath, "", false)
	if err != nil {
		t.Fatal(err)
	}
	return caFile, cfg
}

// Usage is one usage row, as the gateway's recorder writes it.
type Usage struct {
	At                             time.Time
	Project, KeyID, Model          string
	Status                         int
	PromptTokens, CompletionTokens int64
	Cost                           float64
	Latency                        time.Duration
}

// AddUsage writes usage rows to the store, as requests served earlier
// would have.
func (a *API) AddUsage(t testing.TB, rows ...Usage) {
	t.Helper()
	out := make([]store.UsageRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, store.UsageRow{At: r.At, Project: r.Project, KeyID: r.KeyID, Model: r.Model, Status: r.Status,
			PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens, Cost: r.Cost, Latency: r.Latency})
	}
	if err := a.st.InsertUsage(context.Background(), out); err != nil {
		t.Fatal(err)
	}
}

// Key is an API key as the store holds it.
type Key struct {
	ID, Name, Prefix, Hash, Project string
	RPM, TPM                        int64
	ExpiresAt, RevokedAt            *time.Time
}

// LookupKey returns the stored API key whose secret is plain, or an error
// when no key has it.
func (a *API) LookupKey(plain string) (Key, error) {
	k, err := a.st.LookupAPIKey(context.Background(), spec.HashSecret(plain))
	if err != nil {
		return Key{}, err
	}
	return Key{ID: k.ID, Name: k.Name, Prefix: k.Prefix, Hash: k.Hash, Project: k.Project, RPM: k.RPM, TPM: k.TPM,
		ExpiresAt: k.ExpiresAt, RevokedAt: k.RevokedAt}, nil
}
