package auth

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/keys"
	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/spec"
)

func TestKeys(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "llmgw.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	admin := keys.New(st)
	good, err := admin.CreateAPIKey(ctx, "good", nil)
	if err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	expired, err := admin.CreateAPIKey(ctx, "old", &past)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	k := NewKeys(st, time.Minute, nil)
	k.now = func() time.Time { return now }

	p, err := k.Authenticate(ctx, good.Secret)
	if err != nil || p.KeyID != good.ID || p.Project != store.DefaultProject {
		t.Fatalf("good key: %+v, %v", p, err)
	}
	for name, bearer := range map[string]string{"empty": "", "unknown": "llmgw-nope", "expired": expired.Secret} {
		if _, err := k.Authenticate(ctx, bearer); !errors.Is(err, request.ErrUnauthenticated) {
			t.Errorf("%s key: err = %v, want ErrUnauthenticated", name, err)
		}
	}

	// Revocation takes effect once the cached lookup expires.
	if err := admin.RevokeAPIKey(ctx, good.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Authenticate(ctx, good.Secret); err != nil {
		t.Fatalf("within the TTL the cached key still works: %v", err)
	}
	now = now.Add(2 * time.Minute)
	if _, err := k.Authenticate(ctx, good.Secret); !errors.Is(err, request.ErrUnauthenticated) {
		t.Fatalf("revoked key after the TTL: err = %v", err)
	}
}

func TestAnonymous(t *testing.T) {
	p, err := Anonymous{}.Authenticate(context.Background(), "")
	if err != nil || p.Project != store.DefaultProject {
		t.Fatalf("anonymous = %+v, %v", p, err)
	}
}

// countingStore knows one key and counts lookups.
type countingStore struct {
	store.APIKeyStore
	hash    string
	lookups int
}

func (c *countingStore) LookupAPIKey(_ context.Context, hash string) (store.APIKey, error) {
	c.lookups++
	if hash == c.hash {
		return store.APIKey{ID: "k", Project: store.DefaultProject}, nil
	}
	return store.APIKey{}, store.ErrNotFound
}

func (c *countingStore) TouchAPIKey(context.Context, string, time.Time) error { return nil }

// TestFloodKeepsRealKeys: a flood of made-up keys fills the cache, but the
// real key stays cached (no store lookup for it afterwards).
func TestFloodKeepsRealKeys(t *testing.T) {
	const real = "llmgw-real-key"
	st := &countingStore{hash: spec.HashSecret(real)}
	k := NewKeys(st, time.Hour, nil)
	ctx := context.Background()
	if _, err := k.Authenticate(ctx, real); err != nil {
		t.Fatal(err)
	}
	for i := range maxCached + 10 {
		if _, err := k.Authenticate(ctx, fmt.Sprintf("guess-%d", i)); !errors.Is(err, request.ErrUnauthenticated) {
			t.Fatalf("guess %d: %v", i, err)
		}
	}
	before := st.lookups
	if _, err := k.Authenticate(ctx, real); err != nil {
		t.Fatal(err)
	}
	if st.lookups != before {
		t.Error("the real key was evicted by the flood")
	}
	if len(k.cache) > maxCached {
		t.Errorf("cache holds %d entries", len(k.cache))
	}
}
