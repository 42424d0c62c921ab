package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// sqlStore implements Store over database/sql for every SQL backend. Writes
// go through w, reads through r; for SQLite w holds a single connection
// (one writer at a time, so writers queue instead of failing with
// SQLITE_BUSY) and r holds several read-only ones. They may be the same
// pool.
type sqlStore struct {
	r, w  *sql.DB
	d     dialect
	where string
	now   func() time.Time
}

var _ Store = (*sqlStore)(nil)

// Close closes both pools.
func (s *sqlStore) Close() error {
	var errs []error
	if s.r != s.w {
		if err := s.r.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing %s readers: %w", s.where, err))
		}
	}
	if err := s.w.Close(); err != nil {
		errs = append(errs, fmt.Errorf("closing %s: %w", s.where, err))
	}
	return errors.Join(errs...)
}

func (s *sqlStore) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return s.w.ExecContext(ctx, s.d.rebind(query), args...)
}

func (s *sqlStore) queryRowW(ctx context.Context, query string, args ...any) *sql.Row {
	return s.w.QueryRowContext(ctx, s.d.rebind(query), args...)
}

func (s *sqlStore) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	return s.r.QueryRowContext(ctx, s.d.rebind(query), args...)
}

func (s *sqlStore) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return s.r.QueryContext(ctx, s.d.rebind(query), args...)
}

// Times are stored as microseconds since the epoch, so both backends hold
// them in a BIGINT and compare them as numbers.
func toDB(t time.Time) int64 { return t.UnixMicro() }

func fromDB(v int64) time.Time { return time.UnixMicro(v).UTC() }

func toDBPtr(t *time.Time) sql.NullInt64 {
	if t == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: toDB(*t), Valid: true}
}

func fromDBPtr(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromDB(v.Int64)
	return &t
}

// requireRow turns "no row affected" into ErrNotFound.
func requireRow(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("counting affected rows: %w", err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

func checkName(kind, name string) error {
	if name == "" {
		return fmt.Errorf("%s name is empty", kind)
	}
	return nil
}

func checkJSON(kind, name string, b []byte) error {
	if len(b) == 0 {
		return fmt.Errorf("%s %q: document is empty", kind, name)
	}
	if !json.Valid(b) {
		return fmt.Errorf("%s %q: document is not valid JSON", kind, name)
	}
	return nil
}

// ---- models -----------------------------------------------------------

// PutModel creates or updates a model and returns its new revision.
func (s *sqlStore) PutModel(ctx context.Context, name string, spec []byte) (int64, error) {
	if err := checkName("model", name); err != nil {
		return 0, fmt.Errorf("putting model: %w", err)
	}
	if err := checkJSON("model", name, spec); err != nil {
		return 0, fmt.Errorf("putting model: %w", err)
	}
	now := toDB(s.now())
	var rev int64
	err := s.queryRowW(ctx, `INSERT INTO models (name, spec, revision, created_at, updated_at)
		VALUES (?, ?, 1, ?, ?)
		ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, revision = models.revision + 1, updated_at = excluded.updated_at
		RETURNING revision`, name, spec, now, now).Scan(&rev)
	if err != nil {
		return 0, fmt.Errorf("putting model %q: %w", name, err)
	}
	return rev, nil
}

// GetModel returns one model.
func (s *sqlStore) GetModel(ctx context.Context, name string) (StoredModel, error) {
	m, err := scanModel(s.queryRow(ctx, `SELECT name, spec, revision, created_at, updated_at FROM models WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return StoredModel{}, fmt.Errorf("getting model %q: %w", name, err)
	}
	return m, nil
}

// ListModels returns every model ordered by name.
func (s *sqlStore) ListModels(ctx context.Context) ([]StoredModel, error) {
	return queryAll(ctx, s, "listing models", `SELECT name, spec, revision, created_at, updated_at FROM models ORDER BY name`, scanModel)
}

// DeleteModel removes a model.
func (s *sqlStore) DeleteModel(ctx context.Context, name string) error {
	if err := requireRow(s.exec(ctx, `DELETE FROM models WHERE name = ?`, name)); err != nil {
		return fmt.Errorf("deleting model %q: %w", name, err)
	}
	return nil
}

type scanner interface{ Scan(dest ...any) error }

// queryAll runs a read query and scans every row; what names the operation
// in errors.
func queryAll[T any](ctx context.Context, s *sqlStore, what, query string, scan func(scanner) (T, error), args ...any) (_ []T, err error) {
	rows, err := s.query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer func() {
		if cerr := rows.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("%s: closing rows: %w", what, cerr)
		}
	}()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

func scanModel(r scanner) (StoredModel, error) {
	var m StoredModel
	var created, updated int64
	if err := r.Scan(&m.Name, &m.Spec, &m.Revision, &created, &updated); err != nil {
		return StoredModel{}, err
	}
	m.CreatedAt, m.UpdatedAt = fromDB(created), fromDB(updated)
	return m, nil
}

// ---- API keys ---------------------------------------------------------

const apiKeyColumns = `id, name, prefix, hash, project, created_at, expires_at, last_used_at, revoked_at, rpm, tpm`

// CreateAPIKey stores a new API key.
func (s *sqlStore) CreateAPIKey(ctx context.Context, k APIKey) error {
	if k.ID == "" || k.Hash == "" {
		return fmt.Errorf("creating API key %q: id and hash are required", k.ID)
	}
	if k.Project == "" {
		k.Project = DefaultProject
	}
	if k.CreatedAt.IsZero() {
		k.CreatedAt = s.now()
	}
	// The project check and the insert are one statement, under the
	// project's lock, so a project deleted at the same time cannot leave an
	// orphan key. The casts give PostgreSQL the parameter types a bare
	// SELECT list lacks.
	err := s.inProjectTx(ctx, k.Project, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO api_keys (`+apiKeyColumns+`)
		SELECT CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT),
			CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS BIGINT)
		WHERE EXISTS (SELECT 1 FROM projects WHERE name = ?)`),
			k.ID, k.Name, k.Prefix, k.Hash, k.Project, toDB(k.CreatedAt), toDBPtr(k.ExpiresAt), toDBPtr(k.LastUsedAt), toDBPtr(k.RevokedAt),
			k.RPM, k.TPM, k.Project)
		if err != nil {
			if s.d.isUniqueViolation(err) {
				return ErrAlreadyExists
			}
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("project %q: %w", k.Project, ErrNotFound)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("creating API key %q: %w", k.ID, err)
	}
	return nil
}

// GetAPIKey returns a key by ID, revoked or not.
func (s *sqlStore) GetAPIKey(ctx context.Context, id string) (APIKey, error) {
	k, err := scanAPIKey(s.queryRow(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return APIKey{}, fmt.Errorf("getting API key %q: %w", id, err)
	}
	return k, nil
}

// SetAPIKeyLimits replaces a key's own limits.
func (s *sqlStore) SetAPIKeyLimits(ctx context.Context, id string, rpm, tpm int64) error {
	if rpm < 0 || tpm < 0 {
		return fmt.Errorf("setting limits of API key %q: rpm and tpm must not be negative", id)
	}
	if err := requireRow(s.exec(ctx, `UPDATE api_keys SET rpm = ?, tpm = ? WHERE id = ?`, rpm, tpm, id)); err != nil {
		return fmt.Errorf("setting limits of API key %q: %w", id, err)
	}
	return nil
}

// LookupAPIKey finds an unrevoked key by hash.
func (s *sqlStore) LookupAPIKey(ctx context.Context, hash string) (APIKey, error) {
	k, err := scanAPIKey(s.queryRow(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE hash = ? AND revoked_at IS NULL`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		// Never put the hash in the message: it identifies a credential.
		return APIKey{}, fmt.Errorf("looking up API key: %w", err)
	}
	return k, nil
}

// ListAPIKeys returns every key, oldest first.
func (s *sqlStore) ListAPIKeys(ctx context.Context) ([]APIKey, error) {
	return queryAll(ctx, s, "listing API keys", `SELECT `+apiKeyColumns+` FROM api_keys ORDER BY created_at, id`, scanAPIKey)
}

// RevokeAPIKey revokes a key by ID.
func (s *sqlStore) RevokeAPIKey(ctx context.Context, id string) error {
	if err := requireRow(s.exec(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?`, toDB(s.now()), id)); err != nil {
		return fmt.Errorf("revoking API key %q: %w", id, err)
	}
	return nil
}

// TouchAPIKey records a key's last use.
func (s *sqlStore) TouchAPIKey(ctx context.Context, id string, at time.Time) error {
	err := requireRow(s.exec(ctx, `UPDATE api_keys
		SET last_used_at = CASE WHEN last_used_at IS NULL OR last_used_at < ? THEN ? ELSE last_used_at END
		WHERE id = ?`, toDB(at), toDB(at), id))
	if err != nil {
		return fmt.Errorf("recording use of API key %q: %w", id, err)
	}
	return nil
}

func scanAPIKey(r scanner) (APIKey, error) {
	var k APIKey
	var created int64
	var expires, lastUsed, revoked sql.NullInt64
	if err := r.Scan(&k.ID, &k.Name, &k.Prefix, &k.Hash, &k.Project, &created, &expires, &lastUsed, &revoked, &k.RPM, &k.TPM); err != nil {
		return APIKey{}, err
	}
	k.CreatedAt = fromDB(created)
	k.ExpiresAt, k.LastUsedAt, k.RevokedAt = fromDBPtr(expires), fromDBPtr(lastUsed), fromDBPtr(revoked)
	return k, nil
}

// ---- admin tokens -----------------------------------------------------

const adminTokenColumns = `id, name, hash, created_at, revoked_at, user_id, expires_at`

// CreateAdminToken stores a new admin token.
func (s *sqlStore) CreateAdminToken(ctx context.Context, t AdminToken) error {
	if t.ID == "" || t.Hash == "" {
		return fmt.Errorf("creating admin token %q: id and hash are required", t.ID)
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = s.now()
	}
	userID := sql.NullString{String: t.UserID, Valid: t.UserID != ""}
	_, err := s.exec(ctx, `INSERT INTO admin_tokens (`+adminTokenColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		t.ID, t.Name, t.Hash, toDB(t.CreatedAt), toDBPtr(t.RevokedAt), userID, toDBPtr(t.ExpiresAt))
	if err != nil {
		if s.d.isUniqueViolation(err) {
			err = ErrAlreadyExists
		}
		return fmt.Errorf("creating admin token %q: %w", t.ID, err)
	}
	return nil
}

// LookupAdminToken finds a usable token by hash: unrevoked, unexpired, and
// either nobody's or an administrator's. The user check makes a demotion
// take effect at once, even before the user's tokens are revoked.
func (s *sqlStore) LookupAdminToken(ctx context.Context, hash string) (AdminToken, error) {
	t, err := scanAdminToken(s.queryRow(ctx, `SELECT `+adminTokenColumns+` FROM admin_tokens
		WHERE hash = ? AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)
		AND (user_id IS NULL OR EXISTS (SELECT 1 FROM users WHERE users.id = admin_tokens.user_id AND users.admin <> 0))`,
		hash, toDB(s.now())))
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return AdminToken{}, fmt.Errorf("looking up admin token: %w", err)
	}
	return t, nil
}

// ListAdminTokens returns every token, oldest first.
func (s *sqlStore) ListAdminTokens(ctx context.Context) ([]AdminToken, error) {
	return queryAll(ctx, s, "listing admin tokens", `SELECT `+adminTokenColumns+` FROM admin_tokens ORDER BY created_at, id`, scanAdminToken)
}

// RevokeAdminToken revokes a token by ID.
func (s *sqlStore) RevokeAdminToken(ctx context.Context, id string) error {
	if err := requireRow(s.exec(ctx, `UPDATE admin_tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?`, toDB(s.now()), id)); err != nil {
		return fmt.Errorf("revoking admin token %q: %w", id, err)
	}
	return nil
}

// RevokeUserAdminTokens revokes every unrevoked token of a user.
func (s *sqlStore) RevokeUserAdminTokens(ctx context.Context, userID string) (int64, error) {
	if userID == "" {
		return 0, errors.New("revoking the admin tokens of a user: the user id is empty")
	}
	res, err := s.exec(ctx, `UPDATE admin_tokens SET revoked_at = ? WHERE user_id = ? AND revoked_at IS NULL`, toDB(s.now()), userID)
	if err != nil {
		return 0, fmt.Errorf("revoking the admin tokens of user %q: %w", userID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("revoking the admin tokens of user %q: counting them: %w", userID, err)
	}
	return n, nil
}

func scanAdminToken(r scanner) (AdminToken, error) {
	var t AdminToken
	var created int64
	var revoked, expires sql.NullInt64
	var userID sql.NullString
	if err := r.Scan(&t.ID, &t.Name, &t.Hash, &created, &revoked, &userID, &expires); err != nil {
		return AdminToken{}, err
	}
	t.CreatedAt, t.RevokedAt, t.ExpiresAt = fromDB(created), fromDBPtr(revoked), fromDBPtr(expires)
	t.UserID = userID.String
	return t, nil
}

// ---- nodes ------------------------------------------------------------

// PutNode creates or replaces a node declaration.
func (s *sqlStore) PutNode(ctx context.Context, name string, declaration []byte) (int64, error) {
	if err := checkName("node", name); err != nil {
		return 0, fmt.Errorf("putting node: %w", err)
	}
	if err := checkJSON("node", name, declaration); err != nil {
		return 0, fmt.Errorf("putting node: %w", err)
	}
	now := toDB(s.now())
	var rev int64
	err := s.queryRowW(ctx, `INSERT INTO nodes (name, declaration, revision, created_at, updated_at)
		VALUES (?, ?, 1, ?, ?)
		ON CONFLICT (name) DO UPDATE SET declaration = excluded.declaration, revision = nodes.revision + 1, updated_at = excluded.updated_at
		RETURNING revision`, name, declaration, now, now).Scan(&rev)
	if err != nil {
		return 0, fmt.Errorf("putting node %q: %w", name, err)
	}
	return rev, nil
}

// GetNode returns one node declaration.
func (s *sqlStore) GetNode(ctx context.Context, name string) (StoredNode, error) {
	n, err := scanNode(s.queryRow(ctx, `SELECT name, declaration, revision, created_at, updated_at FROM nodes WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return StoredNode{}, fmt.Errorf("getting node %q: %w", name, err)
	}
	return n, nil
}

// ListNodes returns every node declaration ordered by name.
func (s *sqlStore) ListNodes(ctx context.Context) ([]StoredNode, error) {
	return queryAll(ctx, s, "listing nodes", `SELECT name, declaration, revision, created_at, updated_at FROM nodes ORDER BY name`, scanNode)
}

// DeleteNode removes a node declaration.
func (s *sqlStore) DeleteNode(ctx context.Context, name string) error {
	if err := requireRow(s.exec(ctx, `DELETE FROM nodes WHERE name = ?`, name)); err != nil {
		return fmt.Errorf("deleting node %q: %w", name, err)
	}
	return nil
}

// RevokeNodeIdentity records a node identity's revocation.
func (s *sqlStore) RevokeNodeIdentity(ctx context.Context, name string, at time.Time) error {
	if err := checkName("node", name); err != nil {
		return fmt.Errorf("revoking node identity: %w", err)
	}
	_, err := s.exec(ctx, `INSERT INTO node_revocations (name, revoked_at) VALUES (?, ?)
		ON CONFLICT (name) DO UPDATE SET revoked_at = CASE WHEN excluded.revoked_at > node_revocations.revoked_at THEN excluded.revoked_at ELSE node_revocations.revoked_at END`,
		name, toDB(at))
	if err != nil {
		return fmt.Errorf("revoking identity of node %q: %w", name, err)
	}
	return nil
}

// IsNodeRevoked reports whether a node identity was revoked.
func (s *sqlStore) IsNodeRevoked(ctx context.Context, name string) (bool, error) {
	_, err := s.NodeRevokedAt(ctx, name)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrNotFound):
		return false, nil
	default:
		return false, err
	}
}

// NodeRevokedAt returns when a node identity was revoked.
func (s *sqlStore) NodeRevokedAt(ctx context.Context, name string) (time.Time, error) {
	var at int64
	err := s.queryRow(ctx, `SELECT revoked_at FROM node_revocations WHERE name = ?`, name).Scan(&at)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("reading revocation of node %q: %w", name, err)
	}
	return fromDB(at), nil
}

func scanNode(r scanner) (StoredNode, error) {
	var n StoredNode
	var created, updated int64
	if err := r.Scan(&n.Name, &n.Declaration, &n.Revision, &created, &updated); err != nil {
		return StoredNode{}, err
	}
	n.CreatedAt, n.UpdatedAt = fromDB(created), fromDB(updated)
	return n, nil
}

// GetMeta returns one meta value.
func (s *sqlStore) GetMeta(ctx context.Context, key string) (string, error) {
	var v string
	err := s.queryRow(ctx, `SELECT value FROM meta WHERE key = ?`, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("getting meta %q: %w", key, err)
	}
	return v, nil
}

// PutMeta sets one meta value.
func (s *sqlStore) PutMeta(ctx context.Context, key, value string) error {
	if key == "" {
		return errors.New("putting meta: empty key")
	}
	_, err := s.exec(ctx, `INSERT INTO meta (key, value, updated_at) VALUES (?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`, key, value, toDB(s.now()))
	if err != nil {
		return fmt.Errorf("putting meta %q: %w", key, err)
	}
	return nil
}

// ---- fabrics -----------------------------------------------------------

// PutFabric creates or updates a fabric.
func (s *sqlStore) PutFabric(ctx context.Context, f StoredFabric) error {
	if err := checkName("fabric", f.Name); err != nil {
		return fmt.Errorf("putting fabric: %w", err)
	}
	now := toDB(s.now())
	_, err := s.exec(ctx, `INSERT INTO fabrics (name, description, created_at, updated_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET description = excluded.description, updated_at = excluded.updated_at`,
		f.Name, f.Description, now, now)
	if err != nil {
		return fmt.Errorf("putting fabric %q: %w", f.Name, err)
	}
	return nil
}

// GetFabric returns one fabric.
func (s *sqlStore) GetFabric(ctx context.Context, name string) (StoredFabric, error) {
	f, err := scanFabric(s.queryRow(ctx, `SELECT name, description, created_at, updated_at FROM fabrics WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return StoredFabric{}, fmt.Errorf("getting fabric %q: %w", name, err)
	}
	return f, nil
}

// ListFabrics returns every fabric.
func (s *sqlStore) ListFabrics(ctx context.Context) ([]StoredFabric, error) {
	rows, err := s.query(ctx, `SELECT name, description, created_at, updated_at FROM fabrics ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("listing fabrics: %w", err)
	}
	defer rows.Close()
	var out []StoredFabric
	for rows.Next() {
		f, err := scanFabric(rows)
		if err != nil {
			return nil, fmt.Errorf("listing fabrics: %w", err)
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// DeleteFabric removes a fabric.
func (s *sqlStore) DeleteFabric(ctx context.Context, name string) error {
	res, err := s.exec(ctx, `DELETE FROM fabrics WHERE name = ?`, name)
	if err != nil {
		return fmt.Errorf("deleting fabric %q: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("deleting fabric %q: %w", name, ErrNotFound)
	}
	return nil
}

func scanFabric(r scanner) (StoredFabric, error) {
	var f StoredFabric
	var created, updated int64
	if err := r.Scan(&f.Name, &f.Description, &created, &updated); err != nil {
		return StoredFabric{}, err
	}
	f.CreatedAt, f.UpdatedAt = fromDB(created), fromDB(updated)
	return f, nil
}
