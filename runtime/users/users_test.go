package users

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/spec"
)

const goodPassword = "correct horse battery"

func newAdmin(t *testing.T) (*Admin, store.Store) {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "llmgw.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return New(st, bcrypt.MinCost), st
}

func TestCreateAndAuthenticate(t *testing.T) {
	a, st := newAdmin(t)
	ctx := context.Background()
	u, err := a.Create(ctx, " Ada@Example.com ", goodPassword, false)
	if err != nil {
		t.Fatal(err)
	}
	if u.Email != "ada@example.com" || u.Admin || u.PasswordHash != "" || !strings.HasPrefix(u.ID, "usr-") {
		t.Fatalf("created = %+v (canonical email, not admin, no hash handed back)", u)
	}
	stored, err := st.GetUser(ctx, u.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(stored.PasswordHash, "$2") || strings.Contains(stored.PasswordHash, goodPassword) {
		t.Fatalf("stored hash %q is not a bcrypt hash", stored.PasswordHash)
	}
	if _, err := a.Create(ctx, "ada@example.com", goodPassword, false); err == nil || !strings.Contains(err.Error(), "user ada@example.com already exists") {
		t.Fatalf("duplicate create: %v", err)
	}
	tests := []struct {
		name, email, pw string
		ok              bool
	}{
		{"right", "ada@example.com", goodPassword, true},
		{"email in other case", "ADA@example.com", goodPassword, true},
		{"wrong password", "ada@example.com", goodPassword + "x", false},
		{"unknown user", "bob@example.com", goodPassword, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := a.Authenticate(ctx, tt.email, tt.pw)
			if tt.ok && (err != nil || got.ID != u.ID || got.PasswordHash != "") {
				t.Fatalf("Authenticate = %+v, %v", got, err)
			}
			if !tt.ok && !errors.Is(err, ErrWrongPassword) {
				t.Fatalf("err = %v, want ErrWrongPassword", err)
			}
		})
	}
}

func TestPromoteDemote(t *testing.T) {
	a, _ := newAdmin(t)
	ctx := context.Background()
	u, err := a.Create(ctx, "ada@example.com", goodPassword, false)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := a.SetAdmin(ctx, "ADA@example.com", true); err != nil || !got.Admin {
		t.Fatalf("promote by email = %+v, %v", got, err)
	}
	if got, _ := a.Get(ctx, u.ID); !got.Admin {
		t.Fatal("promotion not stored")
	}
	if got, err := a.SetAdmin(ctx, u.ID, false); err != nil || got.Admin {
		t.Fatalf("demote by id = %+v, %v", got, err)
	}
	list, err := a.List(ctx)
	if err != nil || len(list) != 1 || list[0].Admin || list[0].PasswordHash != "" {
		t.Fatalf("list = %+v, %v", list, err)
	}
	if _, err := a.SetAdmin(ctx, "bob@example.com", true); !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "bob@example.com") {
		t.Fatalf("promoting an unknown user: %v", err)
	}
}

func TestCreateRefuses(t *testing.T) {
	a, _ := newAdmin(t)
	tests := []struct {
		name, email, pw, want string
	}{
		{"no email", "", goodPassword, "email is required"},
		{"not an address", "ada", goodPassword, `email "ada" is not a plain address`},
		{"display name", "Ada <ada@example.com>", goodPassword, "not a plain address"},
		{"short", "ada@example.com", "pw-9x7q", "at least 12 characters"},
		{"long", "ada@example.com", strings.Repeat("x", 73), "at most 72 bytes"},
		{"trailing newline", "ada@example.com", goodPassword + "\n", "whitespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := a.Create(context.Background(), tt.email, tt.pw, false)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			if len(tt.pw) > 3 && strings.Contains(err.Error(), strings.TrimSpace(tt.pw)) {
				t.Fatalf("error %q quotes the password", err)
			}
		})
	}
}

func TestDemoteRevokesLoginTokens(t *testing.T) {
	a, st := newAdmin(t)
	ctx := context.Background()
	u, err := a.Create(ctx, "ada@example.com", goodPassword, true)
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	_, loginHash := spec.NewAdminToken()
	_, hostHash := spec.NewAdminToken()
	for _, tok := range []store.AdminToken{
		{ID: "adm-login", Hash: loginHash, UserID: u.ID, ExpiresAt: &later},
		{ID: "adm-host", Name: "terraform", Hash: hostHash},
	} {
		if err := st.CreateAdminToken(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.SetAdmin(ctx, u.Email, false); err != nil {
		t.Fatalf("demote: %v", err)
	}
	// Promoting again does not bring the login back: it was revoked.
	if _, err := a.SetAdmin(ctx, u.Email, true); err != nil {
		t.Fatalf("promote: %v", err)
	}
	if _, err := st.LookupAdminToken(ctx, loginHash); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("login token after demote and promote: err = %v, want ErrNotFound", err)
	}
	if _, err := st.LookupAdminToken(ctx, hostHash); err != nil {
		t.Errorf("a host token (nobody's) stopped working on demotion: %v", err)
	}
}

func TestAuthenticateUnknownEmailCostsABcrypt(t *testing.T) {
	a, _ := newAdmin(t)
	if _, err := a.Authenticate(context.Background(), "nobody@example.com", goodPassword); !errors.Is(err, ErrWrongPassword) {
		t.Fatalf("err = %v, want ErrWrongPassword", err)
	}
	if len(a.dummyHash) == 0 {
		t.Error("an unknown email was answered without comparing against a bcrypt hash")
	}
}
