// Package store is the control plane's persistent state: models added through
// the management API, API keys, admin tokens, node declarations held for
// Terraform and node revocations. The rest of the control plane depends on
// the Store interface (or one of its narrower parts); Open picks the backend
// from the DSN.
//
// SQLite (modernc.org/sqlite, pure Go) is the default and is created on first
// start. PostgreSQL (pgx through database/sql) shares the SQL in this package:
// queries are written in the dialect both accept, with ? placeholders rebound
// per backend, and each backend keeps its own versioned migrations. Copy moves
// an installation between stores. The backend-independent test suite is in
// package storetest.
//
// Secrets never reach this package in plaintext: API keys and admin tokens are
// stored as hashes (see package secret), and every time is stored in UTC with
// microsecond precision.
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
)

// Errors callers test with errors.Is.
var (
	// ErrNotFound means the named object does not exist (or, for secrets,
	// has been revoked).
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists means an object with the same id or hash exists.
	ErrAlreadyExists = errors.New("already exists")
	// ErrSchemaTooNew means the database was migrated by a newer llmgw than
	// this binary; it is refused rather than misread.
	ErrSchemaTooNew = errors.New("store schema is newer than this binary")
	// ErrUnsupported means the DSN names a backend this build cannot use.
	ErrUnsupported = errors.New("unsupported store backend")
	// ErrConflict means the object changed since the caller read it (a
	// compare-and-set lost); nothing was written.
	ErrConflict = errors.New("changed since it was read")
)

// DefaultProject is the project an API key belongs to when none is given.
const DefaultProject = "default"

// Store is everything the control plane keeps across restarts.
// Implementations are safe for concurrent use.
type Store interface {
	ModelStore
	APIKeyStore
	AdminTokenStore
	NodeStore
	MetaStore
	FabricStore
	TenancyStore
	ContentStore
	LeaseStore
	DemandStore
	QuotaStore
	// Close releases the database. The Store must not be used afterwards.
	Close() error
}

// StoredModel is a catalog model added through the management API. Spec is
// the JSON of the catalog's model type; this package does not interpret it
// beyond checking that it is valid JSON.
type StoredModel struct {
	Name      string
	Spec      []byte
	Revision  int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ModelStore holds models added through the management API. Models declared
// in server.yaml are not stored.
type ModelStore interface {
	// PutModel creates the model or replaces its spec, and returns the new
	// revision: 1 on creation, one more on every later put (even when the
	// spec is unchanged).
	PutModel(ctx context.Context, name string, spec []byte) (revision int64, err error)
	// GetModel returns the model or an error wrapping ErrNotFound.
	GetModel(ctx context.Context, name string) (StoredModel, error)
	// ListModels returns every stored model ordered by name.
	ListModels(ctx context.Context) ([]StoredModel, error)
	// DeleteModel removes the model or returns an error wrapping ErrNotFound.
	DeleteModel(ctx context.Context, name string) error
}

// APIKey is a client API key. Hash is secret.HashSecret of the key; Prefix
// is its first characters, kept to tell keys apart in listings.
type APIKey struct {
	ID      string
	Name    string
	Prefix  string
	Hash    string
	Project string // DefaultProject when created empty; must exist
	// RPM and TPM limit the key on its own; zero means "not set".
	RPM int64
	TPM int64
	// CreatedAt is set by the store when zero.
	CreatedAt  time.Time
	ExpiresAt  *time.Time
	LastUsedAt *time.Time
	RevokedAt  *time.Time
}

// Expired reports whether the key has an expiry at or before now.
func (k APIKey) Expired(now time.Time) bool {
	return k.ExpiresAt != nil && !now.Before(*k.ExpiresAt)
}

// APIKeyStore holds client API keys.
type APIKeyStore interface {
	// CreateAPIKey stores a new key. A duplicate ID or hash returns an error
	// wrapping ErrAlreadyExists; a project that does not exist, one
	// wrapping ErrNotFound.
	CreateAPIKey(ctx context.Context, k APIKey) error
	// GetAPIKey returns the key with this ID, revoked or not, or an error
	// wrapping ErrNotFound.
	GetAPIKey(ctx context.Context, id string) (APIKey, error)
	// SetAPIKeyLimits replaces the key's own RPM and TPM.
	SetAPIKeyLimits(ctx context.Context, id string, rpm, tpm int64) error
	// LookupAPIKey finds a key by hash. Unknown and revoked keys both return
	// an error wrapping ErrNotFound. Expiry is the caller's to check
	// (APIKey.Expired), because a cached key must be checked again anyway.
	LookupAPIKey(ctx context.Context, hash string) (APIKey, error)
	// ListAPIKeys returns every key, revoked ones included, oldest first.
	ListAPIKeys(ctx context.Context) ([]APIKey, error)
	// RevokeAPIKey revokes the key with this ID; revoking twice keeps the
	// first time. An unknown ID returns an error wrapping ErrNotFound.
	RevokeAPIKey(ctx context.Context, id string) error
	// TouchAPIKey records that the key was last used at the given time. It
	// never moves the time backwards.
	TouchAPIKey(ctx context.Context, id string, at time.Time) error
}

// AdminToken is a bearer token for the management API. Hash is
// secret.HashSecret of the token.
type AdminToken struct {
	ID   string
	Name string
	Hash string
	// UserID is the user a login issued the token to; empty for tokens made
	// on the control-plane host (`llmgw keys admin-token`), which belong to
	// nobody.
	UserID string
	// CreatedAt is set by the store when zero.
	CreatedAt time.Time
	// ExpiresAt is when the token stops working; nil: never.
	ExpiresAt *time.Time
	RevokedAt *time.Time
}

// Expired reports whether the token has an expiry at or before now.
func (t AdminToken) Expired(now time.Time) bool {
	return t.ExpiresAt != nil && !now.Before(*t.ExpiresAt)
}

// AdminTokenStore holds management API tokens.
type AdminTokenStore interface {
	// CreateAdminToken stores a new token. A duplicate ID or hash returns an
	// error wrapping ErrAlreadyExists.
	CreateAdminToken(ctx context.Context, t AdminToken) error
	// LookupAdminToken finds a usable token by hash. Unknown, revoked and
	// expired tokens, and tokens of a user who is no longer an administrator
	// (or no longer exists), all return an error wrapping ErrNotFound.
	LookupAdminToken(ctx context.Context, hash string) (AdminToken, error)
	// ListAdminTokens returns every token, revoked ones included, oldest
	// first.
	ListAdminTokens(ctx context.Context) ([]AdminToken, error)
	// RevokeAdminToken revokes the token with this ID; revoking twice keeps
	// the first time. An unknown ID returns an error wrapping ErrNotFound.
	RevokeAdminToken(ctx context.Context, id string) error
	// RevokeUserAdminTokens revokes every unrevoked token of the user with
	// this ID (their logins) and returns how many it revoked; a user with
	// none is not an error.
	RevokeUserAdminTokens(ctx context.Context, userID string) (int64, error)
}

// StoredNode is a node declaration held by the control plane. Declaration
// is the JSON of the agent's declaration type.
type StoredNode struct {
	Name        string
	Declaration []byte
	Revision    int64
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// NodeStore holds node declarations and revoked node identities.
type NodeStore interface {
	// PutNode creates or replaces the node's declaration and returns the new
	// revision (1 on creation).
	PutNode(ctx context.Context, name string, declaration []byte) (revision int64, err error)
	// GetNode returns the node or an error wrapping ErrNotFound.
	GetNode(ctx context.Context, name string) (StoredNode, error)
	// ListNodes returns every declared node ordered by name.
	ListNodes(ctx context.Context) ([]StoredNode, error)
	// DeleteNode removes the declaration or returns an error wrapping
	// ErrNotFound. It does not revoke the identity; call RevokeNodeIdentity
	// for that.
	DeleteNode(ctx context.Context, name string) error
	// RevokeNodeIdentity records that the node's identity was revoked at the
	// given time. Revoking again moves the time forward, never back.
	RevokeNodeIdentity(ctx context.Context, name string, at time.Time) error
	// IsNodeRevoked reports whether the node's identity has been revoked.
	IsNodeRevoked(ctx context.Context, name string) (bool, error)
	// NodeRevokedAt returns when the node's identity was revoked, or an
	// error wrapping ErrNotFound when it has not been. A caller may accept
	// a certificate issued (NotBefore) after that time.
	NodeRevokedAt(ctx context.Context, name string) (time.Time, error)
}

// StoredFabric is an InfiniBand fabric declared through the API.
type StoredFabric struct {
	Name        string
	Description string
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// FabricStore holds declared fabrics.
type FabricStore interface {
	// PutFabric creates the fabric or replaces its description.
	PutFabric(ctx context.Context, f StoredFabric) error
	// GetFabric returns the fabric or an error wrapping ErrNotFound.
	GetFabric(ctx context.Context, name string) (StoredFabric, error)
	// ListFabrics returns every fabric ordered by name.
	ListFabrics(ctx context.Context) ([]StoredFabric, error)
	// DeleteFabric removes the fabric or returns an error wrapping
	// ErrNotFound. Whether nodes still use it is the caller's to check.
	DeleteFabric(ctx context.Context, name string) error
}

// MetaStore keeps small facts the control plane records about itself
// between runs. Values are opaque strings.
type MetaStore interface {
	// GetMeta returns the value of key or an error wrapping ErrNotFound.
	GetMeta(ctx context.Context, key string) (string, error)
	// PutMeta sets key to value.
	PutMeta(ctx context.Context, key, value string) error
}

// Option changes how Open builds a store.
type Option func(*options)

type options struct {
	logger    *slog.Logger
	now       func() time.Time
	mustExist bool
}

// WithLogger sets the logger for migrations and other rare events. The
// default discards them.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithClock sets the clock used for created/updated times (tests).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// MustExist makes Open refuse to create a store: a SQLite file must exist
// and a PostgreSQL database must already hold an llmgw schema. It is for
// reading an existing installation (a mistyped path must not read as an
// empty store). An older schema is still migrated.
func MustExist() Option { return func(o *options) { o.mustExist = true } }

// Open opens (creating and migrating if needed) the store the DSN names:
//
//   - a file path or a "file:" URI: SQLite;
//   - "postgres://" or "postgresql://": PostgreSQL;
//   - "@" followed by a path: the DSN held in that file (trimmed), which
//     keeps a password out of configuration files and command lines.
//
// Errors never repeat a PostgreSQL DSN, which may hold a password.
func Open(ctx context.Context, dsn string, opts ...Option) (Store, error) {
	o := options{
		logger: slog.New(slog.DiscardHandler),
		now:    time.Now,
	}
	for _, opt := range opts {
		opt(&o)
	}
	file, ok := strings.CutPrefix(dsn, "@")
	if !ok {
		return openDSN(ctx, dsn, o)
	}
	dsn, err := readDSNFile(file)
	if err != nil {
		return nil, fmt.Errorf("opening store: %w", err)
	}
	s, err := openDSN(ctx, dsn, o)
	if err != nil {
		return nil, fmt.Errorf("store address from %s: %w", file, err)
	}
	return s, nil
}

// readDSNFile returns the trimmed DSN held in path.
func readDSNFile(path string) (string, error) {
	if path == "" {
		return "", errors.New(`"@" must be followed by the path of a file holding the store address`)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the store address file: %w", err)
	}
	dsn := strings.TrimSpace(string(b))
	switch {
	case dsn == "":
		return "", fmt.Errorf("store address file %s is empty", path)
	case strings.HasPrefix(dsn, "@"):
		return "", fmt.Errorf("store address file %s names another file; give the address itself", path)
	}
	return dsn, nil
}

func openDSN(ctx context.Context, dsn string, o options) (Store, error) {
	switch {
	case strings.TrimSpace(dsn) == "":
		return nil, errors.New("opening store: the store DSN is empty; give a SQLite file path or a postgres:// URL")
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return openPostgres(ctx, dsn, o)
	case strings.Contains(dsn, "://"):
		scheme, _, _ := strings.Cut(dsn, "://")
		return nil, fmt.Errorf("opening store: %w: scheme %q; give a SQLite file path or a postgres:// URL", ErrUnsupported, scheme)
	default:
		return openSQLite(ctx, dsn, o)
	}
}
