package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// busyTimeoutMillis is how long a connection waits for another process's
// write lock before SQLITE_BUSY. Within one process writers never wait on
// each other in SQLite: they queue for the single writer connection.
const busyTimeoutMillis = 10000

// readerConns is the size of the read-only pool. WAL lets readers run
// alongside the writer.
const readerConns = 4

var sqliteDialect = dialect{
	name:              "sqlite",
	isUniqueViolation: isSQLiteUniqueViolation,
	migrationsDir:     "migrations/sqlite",
	tablesQuery:       `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name`,
	nowMicros:         `CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)`,
	// SQLite runs as Go code in this process: 8 rows are about a quarter
	// of a millisecond of a processor, not the 2-3 ms a batch of a few
	// hundred held it (tenancy.Recorder.flush).
	usageTxRows: 8,
}

func isSQLiteUniqueViolation(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return true
	}
	return false
}

// sqliteTarget is a parsed SQLite DSN.
type sqliteTarget struct {
	// base is the DSN without our connection parameters: a plain path or a
	// file: URI with the caller's own query.
	base string
	// path is the file on disk, empty for in-memory databases.
	path string
	// memory is true for in-memory databases, which live in one connection.
	memory bool
}

func parseSQLiteDSN(dsn string) (sqliteTarget, error) {
	if strings.HasPrefix(dsn, "file:") {
		rest := strings.TrimPrefix(dsn, "file:")
		p, query, _ := strings.Cut(rest, "?")
		q, err := url.ParseQuery(query)
		if err != nil {
			return sqliteTarget{}, fmt.Errorf("parsing SQLite DSN query %q: %w", query, err)
		}
		memory := p == ":memory:" || q.Get("mode") == "memory"
		if strings.HasPrefix(p, "//") { // file://host/path or file:///path
			u, err := url.Parse(dsn)
			if err != nil {
				return sqliteTarget{}, fmt.Errorf("parsing SQLite DSN: %w", err)
			}
			p = u.Path
		}
		t := sqliteTarget{base: dsn, memory: memory}
		if !memory {
			t.path = p
		}
		return t, nil
	}
	if dsn == ":memory:" {
		return sqliteTarget{base: dsn, memory: true}, nil
	}
	if strings.Contains(dsn, "?") {
		return sqliteTarget{}, fmt.Errorf("SQLite path %q contains '?'; use a file: URI to pass SQLite options", dsn)
	}
	return sqliteTarget{base: dsn, path: dsn}, nil
}

// withParams appends the driver's connection parameters to the DSN.
func (t sqliteTarget) withParams(params url.Values) string {
	sep := "?"
	if strings.Contains(t.base, "?") {
		sep = "&"
	}
	return t.base + sep + params.Encode()
}

// ensureFile creates the database's directory (0700) and an empty file
// (0600) if they do not exist, so the store holding key hashes is not
// readable by other users whatever the umask.
func ensureFile(path string) error {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("creating store directory %s: %w", dir, err)
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating store file %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("creating store file %s: %w", path, err)
	}
	return nil
}

func openSQLite(ctx context.Context, dsn string, o options) (_ Store, err error) {
	t, err := parseSQLiteDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("opening store: %w", err)
	}
	where := "SQLite store " + t.path
	if t.memory {
		where = "in-memory SQLite store"
	}
	if o.mustExist {
		if t.memory {
			return nil, fmt.Errorf("opening %s: %w: an in-memory database is always new", where, ErrNotFound)
		}
		if _, err := os.Stat(t.path); err != nil {
			return nil, fmt.Errorf("opening %s: %w", where, err)
		}
	}
	if t.path != "" {
		if err := ensureFile(t.path); err != nil {
			return nil, fmt.Errorf("opening %s: %w", where, err)
		}
	}

	common := url.Values{}
	common.Set("_busy_timeout", fmt.Sprint(busyTimeoutMillis))
	common.Set("_foreign_keys", "1")
	common.Set("_synchronous", "NORMAL")
	writerParams := url.Values{}
	for k, v := range common {
		writerParams[k] = v
	}
	if !t.memory {
		writerParams.Set("_journal_mode", "WAL")
	}
	// Transactions take the write lock when they begin, so a migration or
	// read-modify-write never has to upgrade a read lock (which can fail
	// with SQLITE_BUSY without waiting).
	writerParams.Set("_txlock", "immediate")

	w, err := sql.Open("sqlite", t.withParams(writerParams))
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", where, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	s := &sqlStore{r: w, w: w, d: sqliteDialect, where: where, now: o.now}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Close())
		}
	}()
	// The first connection switches the file to WAL before readers open it.
	if err := w.PingContext(ctx); err != nil {
		return nil, fmt.Errorf("opening %s: %w", where, err)
	}

	if !t.memory {
		readerParams := url.Values{}
		for k, v := range common {
			readerParams[k] = v
		}
		readerParams.Set("_query_only", "1")
		r, err := sql.Open("sqlite", t.withParams(readerParams))
		if err != nil {
			return nil, fmt.Errorf("opening %s for reading: %w", where, err)
		}
		r.SetMaxOpenConns(readerConns)
		r.SetMaxIdleConns(readerConns)
		s.r = r
	}

	ms, err := loadMigrations(migrationsFS, sqliteDialect.migrationsDir)
	if err != nil {
		return nil, err
	}
	if err := migrate(ctx, w, sqliteDialect, ms, where, o.now, o.logger); err != nil {
		return nil, err
	}
	return s, nil
}
