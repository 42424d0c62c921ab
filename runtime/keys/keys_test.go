package keys

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

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
