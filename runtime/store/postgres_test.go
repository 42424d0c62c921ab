package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/runtime/store/storetest"
	"github.com/llmgw/llmgw/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func openPostgres(t *testing.T, dsn string) store.Store {
	t.Helper()
	s, err := store.Open(t.Context(), dsn)
	if err != nil {
		t.Fatalf("opening PostgreSQL store: %v", err)
	}
	return s
}

func TestPostgresStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return openPostgres(t, pgtest.NewDatabase(t))
	})
}

func TestPostgresStoreReopen(t *testing.T) {
	storetest.RunReopen(t, func(t *testing.T) string { return pgtest.NewDatabase(t) })
}

func TestPostgresDSNFromFile(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	file := filepath.Join(t.TempDir(), "store-dsn")
	if err := os.WriteFile(file, []byte("\n  "+dsn+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := openPostgres(t, "@"+file)
	if _, err := s.PutModel(t.Context(), "m", []byte(`{}`)); err != nil {
		t.Fatalf("PutModel: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The model is in the database the file names.
	s = openPostgres(t, dsn)
	defer s.Close()
	if _, err := s.GetModel(t.Context(), "m"); err != nil {
		t.Errorf("GetModel through the DSN itself: %v", err)
	}
}

func TestPostgresOpenErrorsKeepPasswordSecret(t *testing.T) {
	const password = "s3cretPassw0rd"
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad-dsn")
	if err := os.WriteFile(bad, []byte("postgres://llmgw:"+password+"@127.0.0.1:99999999/llmgw"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		dsn     string
		wantErr []string
	}{
		{name: "unparsable URL", dsn: "postgres://llmgw:" + password + "@db:notaport/llmgw", wantErr: []string{"does not parse"}},
		{name: "unparsable URL from file", dsn: "@" + bad, wantErr: []string{bad, "does not parse"}},
		// Port 1 on loopback refuses connections quickly.
		{name: "unreachable server", dsn: "postgres://llmgw:" + password + "@127.0.0.1:1/llmgw?connect_timeout=5", wantErr: []string{"connecting to PostgreSQL store llmgw@127.0.0.1:1/llmgw"}},
		{name: "missing file", dsn: "@" + filepath.Join(dir, "nope"), wantErr: []string{filepath.Join(dir, "nope")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := store.Open(t.Context(), tt.dsn)
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded, want an error")
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			if strings.Contains(err.Error(), password) {
				t.Errorf("error %q leaks the password", err)
			}
		})
	}
}

// Control planes starting together against a new database apply each
// migration once and all open.
func TestPostgresConcurrentOpenMigratesOnce(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	const n = 4
	var wg sync.WaitGroup
	errs := make([]error, n)
	stores := make([]store.Store, n)
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = store.Open(t.Context(), dsn) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Errorf("Open #%d: %v", i, errs[i])
			continue
		}
		if err := stores[i].Close(); err != nil {
			t.Error(err)
		}
	}
	db := rawPostgres(t, dsn)
	rows, err := db.QueryContext(t.Context(), `SELECT version, COUNT(*) FROM schema_migrations GROUP BY version ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var versions []int64
	for rows.Next() {
		var v, count int64
		if err := rows.Scan(&v, &count); err != nil {
			t.Fatal(err)
		}
		if count != 1 {
			t.Errorf("migration %d recorded %d times", v, count)
		}
		versions = append(versions, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// Every migration file, each once, in order (numbers may skip one
	// that another branch holds).
	files, err := filepath.Glob("migrations/postgres/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	var want []int64
	for _, f := range files {
		var v int64
		if _, err := fmt.Sscanf(filepath.Base(f), "%d_", &v); err != nil {
			t.Fatalf("migration file %s: %v", f, err)
		}
		want = append(want, v)
	}
	if !slices.Equal(versions, want) {
		t.Fatalf("applied versions = %v, want the files' %v", versions, want)
	}
	if len(versions) < 3 {
		t.Errorf("applied versions = %v, want at least 1..3", versions)
	}
}

func TestPostgresMustExist(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	if _, err := store.Open(t.Context(), dsn, store.MustExist()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("MustExist on an empty database: err = %v, want ErrNotFound", err)
	}
	if err := openPostgres(t, dsn).Close(); err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(t.Context(), dsn, store.MustExist())
	if err != nil {
		t.Fatalf("MustExist on an llmgw database: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestPostgresRefusesFutureSchema(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	if err := openPostgres(t, dsn).Close(); err != nil {
		t.Fatal(err)
	}
	db := rawPostgres(t, dsn)
	if _, err := db.ExecContext(t.Context(), `INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, '9999_from_the_future', 0)`); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Open(t.Context(), dsn); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("Open of a future schema: err = %v, want ErrSchemaTooNew", err)
	}
	// The failed open released the migration lock: a lock attempt from
	// another session succeeds at once (the key is pgMigrationLock).
	var got bool
	if err := db.QueryRowContext(context.WithoutCancel(t.Context()), `SELECT pg_try_advisory_lock($1)`, int64(0x6c6c6d677701)).Scan(&got); err != nil || !got {
		t.Errorf("pg_try_advisory_lock after a failed open = %v, %v; want true", got, err)
	}
}

func rawPostgres(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}
