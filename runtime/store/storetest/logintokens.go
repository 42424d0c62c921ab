package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/spec"
)

// createAdmin stores an administrator with this id.
func createAdmin(t *testing.T, s store.Store, id string) {
	t.Helper()
	if err := s.CreateUser(t.Context(), store.User{ID: id, Email: id + "@example.com", PasswordHash: "$2a$hash", Admin: true}); err != nil {
		t.Fatalf("CreateUser %s: %v", id, err)
	}
}

// createToken stores a token and returns its hash.
func createToken(t *testing.T, s store.Store, tok store.AdminToken) string {
	t.Helper()
	_, tok.Hash = spec.NewAdminToken()
	if err := s.CreateAdminToken(t.Context(), tok); err != nil {
		t.Fatalf("CreateAdminToken %s: %v", tok.ID, err)
	}
	return tok.Hash
}

func testAdminTokenExpiry(t *testing.T, s store.Store) {
	ctx := t.Context()
	createAdmin(t, s, "u1")
	now := time.Now().UTC()
	past, future := now.Add(-time.Second), now.Add(time.Hour)
	tests := []struct {
		name    string
		tok     store.AdminToken
		wantErr error
	}{
		{"expired login", store.AdminToken{ID: "adm-expired", UserID: "u1", ExpiresAt: &past}, store.ErrNotFound},
		{"live login", store.AdminToken{ID: "adm-live", UserID: "u1", ExpiresAt: &future}, nil},
		{"host token without expiry", store.AdminToken{ID: "adm-host", Name: "terraform"}, nil},
		{"expired host token", store.AdminToken{ID: "adm-host-old", ExpiresAt: &past}, store.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hash := createToken(t, s, tt.tok)
			got, err := s.LookupAdminToken(ctx, hash)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("LookupAdminToken: err = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if got.ID != tt.tok.ID || got.UserID != tt.tok.UserID {
				t.Errorf("LookupAdminToken = %+v, want id %s user %q", got, tt.tok.ID, tt.tok.UserID)
			}
			switch {
			case tt.tok.ExpiresAt == nil && got.ExpiresAt != nil:
				t.Errorf("ExpiresAt = %v, want none", got.ExpiresAt)
			case tt.tok.ExpiresAt != nil && (got.ExpiresAt == nil || !got.ExpiresAt.Equal(tt.tok.ExpiresAt.Truncate(time.Microsecond))):
				t.Errorf("ExpiresAt = %v, want %v", got.ExpiresAt, tt.tok.ExpiresAt)
			}
			if got.Expired(now) {
				t.Errorf("a token Lookup returned reports Expired(%v)", now)
			}
		})
	}
	// Expired tokens stay listed, with their expiry, for the record.
	list, err := s.ListAdminTokens(ctx)
	if err != nil {
		t.Fatalf("ListAdminTokens: %v", err)
	}
	if len(list) != len(tests) {
		t.Fatalf("ListAdminTokens returned %d tokens, want %d", len(list), len(tests))
	}
	for _, tok := range list {
		if tok.ID == "adm-expired" && (tok.ExpiresAt == nil || !tok.Expired(now) || tok.UserID != "u1") {
			t.Errorf("listed expired token = %+v", tok)
		}
	}
}

func testAdminTokenRevokeByUser(t *testing.T, s store.Store) {
	ctx := t.Context()
	createAdmin(t, s, "u1")
	createAdmin(t, s, "u2")
	future := time.Now().Add(time.Hour)
	h1 := createToken(t, s, store.AdminToken{ID: "adm-u1-a", UserID: "u1", ExpiresAt: &future})
	h2 := createToken(t, s, store.AdminToken{ID: "adm-u1-b", UserID: "u1", ExpiresAt: &future})
	h3 := createToken(t, s, store.AdminToken{ID: "adm-u2", UserID: "u2", ExpiresAt: &future})
	h4 := createToken(t, s, store.AdminToken{ID: "adm-host", Name: "ci"})
	if err := s.RevokeAdminToken(ctx, "adm-u1-b"); err != nil {
		t.Fatalf("RevokeAdminToken: %v", err)
	}
	before, err := s.ListAdminTokens(ctx)
	if err != nil {
		t.Fatalf("ListAdminTokens: %v", err)
	}

	n, err := s.RevokeUserAdminTokens(ctx, "u1")
	if err != nil || n != 1 {
		t.Fatalf("RevokeUserAdminTokens(u1) = %d, %v; want 1 (the other was revoked already)", n, err)
	}
	for _, c := range []struct {
		hash string
		live bool
	}{{h1, false}, {h2, false}, {h3, true}, {h4, true}} {
		_, err := s.LookupAdminToken(ctx, c.hash)
		if c.live && err != nil {
			t.Errorf("a token of another owner stopped working: %v", err)
		}
		if !c.live && !errors.Is(err, store.ErrNotFound) {
			t.Errorf("a revoked token of u1: err = %v, want ErrNotFound", err)
		}
	}
	after, err := s.ListAdminTokens(ctx)
	if err != nil {
		t.Fatalf("ListAdminTokens: %v", err)
	}
	for i, tok := range after {
		if tok.ID == "adm-u1-b" && !tok.RevokedAt.Equal(*before[i].RevokedAt) {
			t.Errorf("revoking by user moved the earlier revocation from %v to %v", before[i].RevokedAt, tok.RevokedAt)
		}
	}
	if n, err := s.RevokeUserAdminTokens(ctx, "u1"); err != nil || n != 0 {
		t.Errorf("revoking again = %d, %v; want 0, nil", n, err)
	}
	if n, err := s.RevokeUserAdminTokens(ctx, "nobody"); err != nil || n != 0 {
		t.Errorf("RevokeUserAdminTokens(nobody) = %d, %v; want 0, nil", n, err)
	}
	if _, err := s.RevokeUserAdminTokens(ctx, ""); err == nil {
		t.Error("RevokeUserAdminTokens with an empty id succeeded (it must not revoke host tokens)")
	}
	if _, err := s.LookupAdminToken(ctx, h4); err != nil {
		t.Errorf("host token after revoking by user: %v", err)
	}
}

// A user's token stops working the moment the user is demoted, even before
// it is revoked, and a token naming a user that does not exist never works.
func testAdminTokenOfDemotedUser(t *testing.T, s store.Store) {
	ctx := t.Context()
	createAdmin(t, s, "u1")
	future := time.Now().Add(time.Hour)
	hash := createToken(t, s, store.AdminToken{ID: "adm-u1", UserID: "u1", ExpiresAt: &future})
	if _, err := s.LookupAdminToken(ctx, hash); err != nil {
		t.Fatalf("LookupAdminToken of an administrator's token: %v", err)
	}
	if err := s.SetUserAdmin(ctx, "u1", false); err != nil {
		t.Fatalf("SetUserAdmin: %v", err)
	}
	if _, err := s.LookupAdminToken(ctx, hash); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LookupAdminToken after demotion: err = %v, want ErrNotFound", err)
	}
	if err := s.SetUserAdmin(ctx, "u1", true); err != nil {
		t.Fatalf("SetUserAdmin: %v", err)
	}
	if _, err := s.LookupAdminToken(ctx, hash); err != nil {
		t.Errorf("LookupAdminToken after promotion again (not revoked): %v", err)
	}
	ghost := createToken(t, s, store.AdminToken{ID: "adm-ghost", UserID: "ghost", ExpiresAt: &future})
	if _, err := s.LookupAdminToken(ctx, ghost); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LookupAdminToken of a token of no user: err = %v, want ErrNotFound", err)
	}
}
