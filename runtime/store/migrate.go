package store

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// migrationsFS holds each backend's migrations as NNNN_description.sql files
// under migrations/<backend>/. A migration is never edited once released;
// a change is a new file with the next number.
//
//go:embed migrations
var migrationsFS embed.FS

// migration is one schema step.
type migration struct {
	version int64
	name    string
	sql     string
}

// loadMigrations reads dir's NNNN_description.sql files, ordered by version.
// Versions must be unique and positive.
func loadMigrations(fsys fs.FS, dir string) ([]migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("reading migrations %s: %w", dir, err)
	}
	var ms []migration
	seen := map[int64]string{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.ParseInt(num, 10, 64)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration file %s/%s: name must be NNNN_description.sql with NNNN > 0", dir, e.Name())
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations %s and %s in %s share version %d", prev, e.Name(), dir, v)
		}
		seen[v] = e.Name()
		body, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("reading migration %s/%s: %w", dir, e.Name(), err)
		}
		ms = append(ms, migration{version: v, name: strings.TrimSuffix(e.Name(), ".sql"), sql: string(body)})
	}
	slices.SortFunc(ms, func(a, b migration) int { return cmp.Compare(a.version, b.version) })
	return ms, nil
}

// createMigrationsTable is valid in SQLite and PostgreSQL.
const createMigrationsTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
	version BIGINT PRIMARY KEY,
	name TEXT NOT NULL,
	applied_at BIGINT NOT NULL
)`

// schemaVersion returns the highest applied migration version, 0 for a new
// database.
func schemaVersion(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (int64, error) {
	var v int64
	if err := q.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("reading schema version: %w", err)
	}
	return v, nil
}

// migrationDB is what migrations run on: a pool (SQLite, whose writer pool
// holds one connection) or one connection holding PostgreSQL's migration
// lock.
type migrationDB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// migrate is hand-written rather than pressly/goose or golang-migrate: those
// keep their own version tables (goose_db_version with a version-0 row;
// schema_migrations(version, dirty)), so every database this runner migrated
// would need an adapter, released files would need goose annotations, and
// neither refuses a database newer than the binary (ErrSchemaTooNew).
//
// migrate brings db up to the last of ms, each migration in its own
// transaction together with its schema_migrations row. It refuses a database
// whose version is newer than the last migration it knows. where names the
// database in messages (never a DSN with credentials).
//
// Concurrent migrators are safe when a transaction takes the write lock on
// begin (SQLite with _txlock=immediate) or when the caller holds a lock
// around the whole run (PostgreSQL's advisory lock, see migratePostgres):
// the version is read again inside each transaction.
func migrate(ctx context.Context, db migrationDB, d dialect, ms []migration, where string, now func() time.Time, log *slog.Logger) error {
	if _, err := db.ExecContext(ctx, createMigrationsTable); err != nil {
		return fmt.Errorf("creating schema_migrations in %s: %w", where, err)
	}
	var latest int64
	if len(ms) > 0 {
		latest = ms[len(ms)-1].version
	}
	current, err := schemaVersion(ctx, db)
	if err != nil {
		return fmt.Errorf("migrating %s: %w", where, err)
	}
	if err := checkNotNewer(current, latest, where); err != nil {
		return err
	}
	for _, m := range ms {
		if m.version <= current {
			continue
		}
		applied, err := applyMigration(ctx, db, d, m, now)
		if err != nil {
			return fmt.Errorf("applying migration %s to %s: %w", m.name, where, err)
		}
		if applied {
			log.Info("store migrated", "store", where, "version", m.version, "migration", m.name)
		}
		current = m.version
	}
	return nil
}

func checkNotNewer(current, latest int64, where string) error {
	if current > latest {
		return fmt.Errorf("opening %s: %w: the database is at schema version %d but this llmgw knows versions up to %d; run the llmgw release that last wrote it (or newer), or restore a backup", where, ErrSchemaTooNew, current, latest)
	}
	return nil
}

// applyMigration runs m in a transaction unless another process got there
// first; it reports whether it applied m.
func applyMigration(ctx context.Context, db migrationDB, d dialect, m migration, now func() time.Time) (applied bool, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("beginning transaction: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, rollback(tx))
		}
	}()
	current, err := schemaVersion(ctx, tx)
	if err != nil {
		return false, err
	}
	if current >= m.version {
		return false, tx.Rollback()
	}
	if _, err := tx.ExecContext(ctx, m.sql); err != nil {
		return false, fmt.Errorf("executing: %w", err)
	}
	if _, err := tx.ExecContext(ctx, d.rebind(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`),
		m.version, m.name, now().UnixMicro()); err != nil {
		return false, fmt.Errorf("recording version %d: %w", m.version, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("committing: %w", err)
	}
	return true, nil
}

func rollback(tx *sql.Tx) error {
	if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("rolling back: %w", err)
	}
	return nil
}
