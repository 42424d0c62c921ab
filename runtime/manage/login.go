package manage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/runtime/users"
	"github.com/llmgw/llmgw/spec"
)

// DefaultLoginTTL is how long a login's admin token works when
// Options.LoginTTL is zero (auth.login_ttl's default).
const DefaultLoginTTL = 12 * time.Hour

// Free login attempts before the limiter starts locking: per email (one
// person mistyping), and per remote address (which may be a whole office
// behind one NAT).
const (
	loginFreePerEmail   = 5
	loginFreePerAddress = 20
)

// Bounds on what Login reads, far above any real email or password.
const (
	maxLoginEmail    = 320
	maxLoginPassword = 1024
)

// errWrongLogin is the one answer to a wrong email and to a wrong password.
var errWrongLogin = status.Error(codes.Unauthenticated, "wrong email or password")

// Login trades an administrator's email and password for an admin token
// that expires after Options.LoginTTL. It is the only call the
// AuthInterceptor lets through without a token.
func (s *Service) Login(ctx context.Context, req *managev1.LoginRequest) (*managev1.LoginResponse, error) {
	if s.opts.Users == nil {
		return nil, status.Error(codes.Unimplemented, "logging in is not available on this control plane; use an admin token from llmgw keys admin-token")
	}
	email, password := strings.ToLower(strings.TrimSpace(req.GetEmail())), req.GetPassword()
	if email == "" || password == "" {
		return nil, status.Error(codes.InvalidArgument, "logging in needs an email and a password")
	}
	remote := remoteHost(ctx)
	// What is logged of the email: the address itself only when it is one,
	// so that a password typed into the email field is never written down.
	logEmail := "(not an email address)"
	if e, err := users.CheckEmail(email); err == nil && len(e) <= maxLoginEmail {
		logEmail = e
	}
	// The limiter's key is the email itself only when it is short enough
	// to be one: an attacker must not fill memory with megabyte "emails".
	emailKey, addrKey := "email:"+email, "addr:"+remote
	if len(email) > maxLoginEmail {
		emailKey = "email#" + spec.HashSecret(email)
	}
	if wait := s.logins.admit(s.now(), loginKey{emailKey, loginFreePerEmail}, loginKey{addrKey, loginFreePerAddress}); wait > 0 {
		s.log.Warn("login refused", "email", logEmail, "remote", remote, "reason", "too many failed attempts")
		return nil, status.Errorf(codes.ResourceExhausted, "too many failed logins for this email or from this address: try again in %s",
			wait.Round(time.Second)+time.Second)
	}
	if len(email) > maxLoginEmail || len(password) > maxLoginPassword {
		s.log.Warn("login refused", "email", logEmail, "remote", remote, "reason", "wrong email or password")
		return nil, errWrongLogin
	}
	u, err := s.opts.Users.Authenticate(ctx, email, password)
	if errors.Is(err, users.ErrWrongPassword) {
		s.log.Warn("login refused", "email", logEmail, "remote", remote, "reason", "wrong email or password")
		return nil, errWrongLogin
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "logging in %s: %v", logEmail, err)
	}
	// The password was right: this attempt does not count against anyone.
	s.logins.succeeded(emailKey, true)
	s.logins.succeeded(addrKey, false)
	if !u.Admin {
		s.log.Warn("login refused", "email", u.Email, "user", u.ID, "remote", remote, "reason", "not an administrator")
		return nil, status.Errorf(codes.PermissionDenied,
			"%s is not an administrator: an administrator must run `llmgw users promote %s` on the control-plane host", u.Email, u.Email)
	}

	now := s.now()
	expires := now.Add(s.opts.LoginTTL)
	plain, hash := spec.NewAdminToken()
	tok := store.AdminToken{ID: newTokenID(), Name: "login " + u.Email, Hash: hash, UserID: u.ID, CreatedAt: now, ExpiresAt: &expires}
	if err := s.opts.Tokens.CreateAdminToken(ctx, tok); err != nil {
		return nil, status.Errorf(codes.Internal, "issuing an admin token to %s: %v", u.Email, err)
	}
	s.log.Info("administrator logged in", "email", u.Email, "user", u.ID, "remote", remote, "token", tok.ID, "expires", expires.UTC().Format(time.RFC3339))
	return &managev1.LoginResponse{Token: plain, TokenId: tok.ID, ExpiresUnixMs: expires.UnixMilli(), UserId: u.ID, Email: u.Email}, nil
}

// Logout revokes the admin token the call was made with. Only tokens from
// Login can be revoked this way: a token made on the control-plane host
// (which CI or Terraform may share) is revoked there.
func (s *Service) Logout(ctx context.Context, _ *managev1.LogoutRequest) (*managev1.LogoutResponse, error) {
	tok, ok := ctx.Value(callerTokenKey{}).(store.AdminToken)
	if !ok {
		return nil, status.Error(codes.Unauthenticated, "logging out needs the admin token to revoke")
	}
	if tok.UserID == "" {
		return nil, status.Errorf(codes.FailedPrecondition,
			"admin token %s (%s) did not come from llmgw ctl login, so logout leaves it alone: revoke it on the control-plane host", tok.ID, tok.Name)
	}
	if err := s.opts.Tokens.RevokeAdminToken(ctx, tok.ID); err != nil {
		return nil, status.Errorf(codes.Internal, "logging out: %v", err)
	}
	s.log.Info("administrator logged out", "user", tok.UserID, "token", tok.ID, "remote", remoteHost(ctx))
	return &managev1.LogoutResponse{TokenId: tok.ID}, nil
}

// callerTokenKey is the context key of the admin token a call carries.
type callerTokenKey struct{}

// remoteHost is the caller's address without its port ("unknown" when the
// call did not come over a network).
func remoteHost(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "unknown"
	}
	if host, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
		return host
	}
	return p.Addr.String()
}

func newTokenID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "adm-" + hex.EncodeToString(b[:])
}
