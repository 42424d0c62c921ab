// Package keys creates and administers client API keys and management
// tokens in the store. The secret is returned once, at creation; only its
// hash is stored.
package keys

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/spec"
)

// Admin administers keys in one store.
type Admin struct {
	st    store.Store
	owned bool
}

// Open opens the store the DSN names.
func Open(ctx context.Context, dsn string) (*Admin, error) {
	st, err := store.Open(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("opening store: %w", err)
	}
	return &Admin{st: st, owned: true}, nil
}

// New administers an already open store (not closed by Close).
func New(st store.Store) *Admin { return &Admin{st: st} }

// Close closes the store if Open opened it.
func (a *Admin) Close() error {
	if a.owned {
		return a.st.Close()
	}
	return nil
}

// Created is a newly created key or token with its secret, shown once.
type Created struct {
	ID     string
	Name   string
	Secret string
}

func newID(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// CreateAPIKey creates a client API key in the default project.
func (a *Admin) CreateAPIKey(ctx context.Context, name string, expires *time.Time) (Created, error) {
	plain, prefix, hash := spec.NewAPIKey()
	k := store.APIKey{ID: newID("key-"), Name: name, Prefix: prefix, Hash: hash, Project: store.DefaultProject, ExpiresAt: expires}
	if err := a.st.CreateAPIKey(ctx, k); err != nil {
		return Created{}, fmt.Errorf("storing API key %q: %w", name, err)
	}
	return Created{ID: k.ID, Name: name, Secret: plain}, nil
}

// CreateAdminToken creates a management API token.
func (a *Admin) CreateAdminToken(ctx context.Context, name string) (Created, error) {
	plain, hash := spec.NewAdminToken()
	t := store.AdminToken{ID: newID("adm-"), Name: name, Hash: hash}
	if err := a.st.CreateAdminToken(ctx, t); err != nil {
		return Created{}, fmt.Errorf("storing admin token %q: %w", name, err)
	}
	return Created{ID: t.ID, Name: name, Secret: plain}, nil
}

// APIKeyUsable reports whether secret is an API key the store still
// accepts: known, neither revoked nor expired. An unknown secret is not an
// error.
func (a *Admin) APIKeyUsable(ctx context.Context, secret string) (bool, error) {
	k, err := a.st.LookupAPIKey(ctx, spec.HashSecret(secret))
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return !k.Expired(time.Now()), nil
}

// AdminTokenUsable reports whether secret is an admin token the store still
// accepts: known, neither revoked nor expired, and not a demoted user's. An
// unknown secret is not an error.
func (a *Admin) AdminTokenUsable(ctx context.Context, secret string) (bool, error) {
	_, err := a.st.LookupAdminToken(ctx, spec.HashSecret(secret))
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// ListAPIKeys lists keys without their secrets.
func (a *Admin) ListAPIKeys(ctx context.Context) ([]store.APIKey, error) {
	list, err := a.st.ListAPIKeys(ctx)
	for i := range list {
		list[i].Hash = ""
	}
	return list, err
}

// RevokeAPIKey revokes a key by id.
func (a *Admin) RevokeAPIKey(ctx context.Context, id string) error {
	if err := a.st.RevokeAPIKey(ctx, id); err != nil {
		return fmt.Errorf("revoking %s: %w", id, err)
	}
	return nil
}
