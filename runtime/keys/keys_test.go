package keys

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/spec"
)

func TestCreateLookupRevoke(t *testing.T) {
	ctx := context.Background()
	a, err := Open(ctx, filepath.Join(t.TempDir(), "llmgw.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	k, err := a.CreateAPIKey(ctx, "ci", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(k.Secret, spec.APIKeyPrefix) {
		t.Fatalf("secret %q lacks the recognisable prefix", k.Secret)
	}
	got, err := a.st.LookupAPIKey(ctx, spec.HashSecret(k.Secret))
	if err != nil || got.ID != k.ID {
		t.Fatalf("lookup by hash = %+v, %v", got, err)
	}
	list, err := a.ListAPIKeys(ctx)
	if err != nil || len(list) != 1 || list[0].Hash != "" {
		t.Fatalf("list = %+v, %v; want one key without its hash", list, err)
	}
	if err := a.RevokeAPIKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.st.LookupAPIKey(ctx, spec.HashSecret(k.Secret)); err == nil {
		t.Fatal("revoked key still found")
	}
	tok, err := a.CreateAdminToken(ctx, "ops")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.st.LookupAdminToken(ctx, spec.HashSecret(tok.Secret)); err != nil {
		t.Fatalf("admin token not found by hash: %v", err)
	}
}

// TestUsable: a created key and token are usable; revoked, expired or
// unknown ones are not, and none of these is an error.
func TestUsable(t *testing.T) {
	ctx := context.Background()
	a, err := Open(ctx, filepath.Join(t.TempDir(), "llmgw.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	live, err := a.CreateAPIKey(ctx, "live", nil)
	if err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Minute)
	expired, err := a.CreateAPIKey(ctx, "expired", &past)
	if err != nil {
		t.Fatal(err)
	}
	revoked, err := a.CreateAPIKey(ctx, "revoked", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.RevokeAPIKey(ctx, revoked.ID); err != nil {
		t.Fatal(err)
	}
	tok, err := a.CreateAdminToken(ctx, "ops")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		usable func(context.Context, string) (bool, error)
		secret string
		want   bool
	}{
		{"live key", a.APIKeyUsable, live.Secret, true},
		{"expired key", a.APIKeyUsable, expired.Secret, false},
		{"revoked key", a.APIKeyUsable, revoked.Secret, false},
		{"unknown key", a.APIKeyUsable, "llmgw-unknown", false},
		{"token", a.AdminTokenUsable, tok.Secret, true},
		{"unknown token", a.AdminTokenUsable, "llmgwadm-unknown", false},
		{"a key is no token", a.AdminTokenUsable, live.Secret, false},
	} {
		if got, err := tt.usable(ctx, tt.secret); got != tt.want || err != nil {
			t.Errorf("%s: usable = %v, %v; want %v, nil", tt.name, got, err, tt.want)
		}
	}
}
