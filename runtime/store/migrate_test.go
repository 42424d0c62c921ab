package store

import (
	"database/sql"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

func openRaw(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_txlock=immediate&_busy_timeout=5000")
	if err != nil {
		t.Fatalf("opening %s: %v", path, err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func mustOpen(t *testing.T, dsn string) Store {
	t.Helper()
	s, err := Open(t.Context(), dsn)
	if err != nil {
		t.Fatalf("Open(%q): %v", dsn, err)
	}
	return s
}

func TestOpenRefusesFutureSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "llmgw.db")
	if err := mustOpen(t, path).Close(); err != nil {
		t.Fatal(err)
	}
	db := openRaw(t, path)
	if _, err := db.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, '9999_from_the_future', 0)`); err != nil {
		t.Fatalf("planting a future version: %v", err)
	}
	db.Close()

	_, err := Open(t.Context(), path)
	if !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("Open of a future schema: err = %v, want ErrSchemaTooNew", err)
	}
	for _, want := range []string{path, "9999", "newer"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestMigrationsIdempotentOnReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "llmgw.db")
	ms, err := loadMigrations(migrationsFS, sqliteDialect.migrationsDir)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := mustOpen(t, path).Close(); err != nil {
			t.Fatal(err)
		}
	}
	db := openRaw(t, path)
	var n, max int64
	if err := db.QueryRow(`SELECT COUNT(*), MAX(version) FROM schema_migrations`).Scan(&n, &max); err != nil {
		t.Fatal(err)
	}
	if n != int64(len(ms)) || max != ms[len(ms)-1].version {
		t.Errorf("schema_migrations has %d rows up to %d, want %d up to %d", n, max, len(ms), ms[len(ms)-1].version)
	}
}

func TestMigrateAppliesOnlyNewAndRollsBackFailures(t *testing.T) {
	ctx := t.Context()
	db := openRaw(t, filepath.Join(t.TempDir(), "m.db"))
	now := func() time.Time { return time.Unix(100, 0) }
	log := discardLogger()
	v1 := []migration{{1, "0001_a", "CREATE TABLE a (x TEXT)"}}
	if err := migrate(ctx, db, sqliteDialect, v1, "test db", now, log); err != nil {
		t.Fatalf("migrating to 1: %v", err)
	}
	// Version 2 creates a table and then fails: both must be rolled back.
	bad := append(v1, migration{2, "0002_bad", "CREATE TABLE b (x TEXT); INSERT INTO nowhere VALUES (1)"})
	if err := migrate(ctx, db, sqliteDialect, bad, "test db", now, log); err == nil || !strings.Contains(err.Error(), "0002_bad") {
		t.Fatalf("failing migration: err = %v, want an error naming 0002_bad", err)
	}
	if v, err := schemaVersion(ctx, db); err != nil || v != 1 {
		t.Errorf("version after failed migration = %d, %v; want 1", v, err)
	}
	if _, err := db.Exec(`INSERT INTO b VALUES ('x')`); err == nil {
		t.Error("table b from the failed migration exists")
	}
	good := append(v1, migration{2, "0002_good", "CREATE TABLE b (x TEXT)"})
	if err := migrate(ctx, db, sqliteDialect, good, "test db", now, log); err != nil {
		t.Fatalf("migrating to 2: %v", err)
	}
	// Re-running with the same list is a no-op (version 1 is not re-run,
	// which would fail on CREATE TABLE a).
	if err := migrate(ctx, db, sqliteDialect, good, "test db", now, log); err != nil {
		t.Fatalf("re-running migrations: %v", err)
	}
	if v, err := schemaVersion(ctx, db); err != nil || v != 2 {
		t.Errorf("version = %d, %v; want 2", v, err)
	}
	// An older binary (knowing only version 1) is refused.
	if err := migrate(ctx, db, sqliteDialect, v1, "test db", now, log); !errors.Is(err, ErrSchemaTooNew) {
		t.Errorf("older binary: err = %v, want ErrSchemaTooNew", err)
	}
}

func TestLoadMigrations(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	tests := []struct {
		name    string
		fs      fstest.MapFS
		want    []int64
		wantErr string
	}{
		{
			name: "ordered by number",
			fs:   fstest.MapFS{"m/0010_c.sql": file("c"), "m/0002_b.sql": file("b"), "m/0001_a.sql": file("a"), "m/README": file("x")},
			want: []int64{1, 2, 10},
		},
		{name: "duplicate version", fs: fstest.MapFS{"m/0001_a.sql": file("a"), "m/1_b.sql": file("b")}, wantErr: "share version 1"},
		{name: "no number", fs: fstest.MapFS{"m/init.sql": file("a")}, wantErr: "init.sql"},
		{name: "zero", fs: fstest.MapFS{"m/0000_a.sql": file("a")}, wantErr: "0000_a.sql"},
		{name: "missing dir", fs: fstest.MapFS{}, wantErr: "reading migrations m"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms, err := loadMigrations(tt.fs, "m")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, m := range ms {
				got = append(got, m.version)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("versions = %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("versions = %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestEmbeddedMigrationsLoad(t *testing.T) {
	ms, err := loadMigrations(migrationsFS, sqliteDialect.migrationsDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 || ms[0].version != 1 {
		t.Fatalf("embedded SQLite migrations = %+v, want to start at version 1", ms)
	}
}

func TestOpenDispatch(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		dsn     string
		wantErr string
		is      error
	}{
		{name: "plain path", dsn: filepath.Join(dir, "a.db")},
		{name: "nested path is created", dsn: filepath.Join(dir, "x", "y", "b.db")},
		{name: "file URI", dsn: "file:" + filepath.Join(dir, "c.db")},
		{name: "memory", dsn: ":memory:"},
		{name: "empty", dsn: "", wantErr: "empty"},
		{name: "postgres", dsn: "postgres://llmgw:s3cret@db:port/llmgw", wantErr: "does not parse as a PostgreSQL URL"},
		{name: "postgresql", dsn: "postgresql://llmgw:s3cret@127.0.0.1:1/llmgw?connect_timeout=5", wantErr: "connecting to PostgreSQL store llmgw@127.0.0.1:1/llmgw"},
		{name: "address file", dsn: "@" + writeFile(t, filepath.Join(dir, "dsn"), " "+filepath.Join(dir, "e.db")+"\n")},
		{name: "empty address file", dsn: "@" + writeFile(t, filepath.Join(dir, "empty"), "\n"), wantErr: "store address file " + filepath.Join(dir, "empty") + " is empty"},
		{name: "address file naming a file", dsn: "@" + writeFile(t, filepath.Join(dir, "nested"), "@/x"), wantErr: "names another file"},
		{name: "missing address file", dsn: "@" + filepath.Join(dir, "missing"), wantErr: filepath.Join(dir, "missing")},
		{name: "bare @", dsn: "@", wantErr: "must be followed by"},
		{name: "unknown scheme", dsn: "mysql://db/llmgw", wantErr: `"mysql"`, is: ErrUnsupported},
		{name: "question mark in path", dsn: filepath.Join(dir, "d.db?x=1"), wantErr: "file: URI"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(t.Context(), tt.dsn)
			if tt.wantErr == "" && tt.is == nil {
				if err != nil {
					t.Fatalf("Open(%q): %v", tt.dsn, err)
				}
				if _, err := s.PutModel(t.Context(), "m", []byte(`{}`)); err != nil {
					t.Errorf("PutModel: %v", err)
				}
				if _, err := s.GetModel(t.Context(), "m"); err != nil {
					t.Errorf("GetModel: %v", err)
				}
				if err := s.Close(); err != nil {
					t.Error(err)
				}
				return
			}
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded, want an error", tt.dsn)
			}
			if tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %q, want it to contain %q", err, tt.wantErr)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("err = %v, want errors.Is %v", err, tt.is)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error %q leaks the DSN password", err)
			}
		})
	}
}

func TestSQLiteFileSettings(t *testing.T) {
	path := filepath.Join(t.TempDir(), "llmgw.db")
	s := mustOpen(t, path)
	defer s.Close()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("store file mode = %o, want 600", perm)
	}
	ss := s.(*sqlStore)
	var mode string
	if err := ss.r.QueryRowContext(t.Context(), "PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" {
		t.Errorf("journal_mode = %q, want wal", mode)
	}
	var fk, busy int
	if err := ss.w.QueryRowContext(t.Context(), "PRAGMA foreign_keys").Scan(&fk); err != nil {
		t.Fatal(err)
	}
	if err := ss.w.QueryRowContext(t.Context(), "PRAGMA busy_timeout").Scan(&busy); err != nil {
		t.Fatal(err)
	}
	if fk != 1 || busy != busyTimeoutMillis {
		t.Errorf("foreign_keys = %d, busy_timeout = %d; want 1, %d", fk, busy, busyTimeoutMillis)
	}
	if _, err := ss.r.ExecContext(t.Context(), "DELETE FROM models"); err == nil {
		t.Error("the read pool accepted a write")
	}
	if got := ss.w.Stats().MaxOpenConnections; got != 1 {
		t.Errorf("writer pool allows %d connections, want 1", got)
	}
}

// TestTwoStoresOneFile opens the same file twice (as two processes would)
// and writes from both at once: busy_timeout and immediate transactions must
// make them wait for each other instead of failing.
func TestTwoStoresOneFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "llmgw.db")
	a, b := mustOpen(t, path), mustOpen(t, path)
	defer a.Close()
	defer b.Close()
	ctx := t.Context()
	errs := make(chan error, 2)
	for _, s := range []Store{a, b} {
		go func() {
			for range 30 {
				if _, err := s.PutModel(ctx, "shared", []byte(`{}`)); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("concurrent writer: %v", err)
		}
	}
	m, err := a.GetModel(ctx, "shared")
	if err != nil || m.Revision != 60 {
		t.Errorf("shared = rev %d, %v; want 60", m.Revision, err)
	}
}

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// Every SQLite migration has a PostgreSQL twin of the same version and name.
func TestPostgresMigrationsMirrorSQLite(t *testing.T) {
	lite, err := loadMigrations(migrationsFS, sqliteDialect.migrationsDir)
	if err != nil {
		t.Fatal(err)
	}
	pg, err := loadMigrations(migrationsFS, postgresDialect.migrationsDir)
	if err != nil {
		t.Fatal(err)
	}
	names := func(ms []migration) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.name)
		}
		return out
	}
	if got, want := names(pg), names(lite); !slices.Equal(got, want) {
		t.Errorf("PostgreSQL migrations %v, want the twins of SQLite's %v", got, want)
	}
}
