package pgtest

import (
	"database/sql"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func openDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("parsing %s: %v", dsn, err)
	}
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	return db
}

func TestNewDatabase(t *testing.T) {
	var names []string
	for _, sub := range []string{"first", "second"} {
		t.Run(sub, func(t *testing.T) {
			dsn := NewDatabase(t)
			u, err := url.Parse(dsn)
			if err != nil {
				t.Fatalf("NewDatabase returned %q: %v", dsn, err)
			}
			names = append(names, strings.TrimPrefix(u.Path, "/"))
			db := openDB(t, dsn)
			// Each database starts empty: the table made by the
			// first subtest is not in the second's database.
			if _, err := db.ExecContext(t.Context(), `CREATE TABLE probe (x INT)`); err != nil {
				t.Fatalf("creating a table in a fresh database: %v", err)
			}
			var got string
			if err := db.QueryRowContext(t.Context(), `SELECT current_database()`).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if want := names[len(names)-1]; got != want {
				t.Errorf("connected to %q, want %q", got, want)
			}
		})
	}
	if t.Failed() || t.Skipped() {
		return
	}
	if len(names) != 2 || names[0] == names[1] {
		t.Fatalf("database names = %q, want two distinct names", names)
	}
	// The subtests' databases were dropped when they ended.
	srv, _, err := sharedServer()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		var n int
		if err := srv.admin.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM pg_database WHERE datname = $1`, name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("database %s still exists after its test ended", name)
		}
	}
}

func TestFindBin(t *testing.T) {
	root := t.TempDir()
	mk := func(version string, files ...string) string {
		dir := filepath.Join(root, version, "bin")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(dir, f), nil, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	v96 := mk("9.6", "initdb", "postgres")
	v15 := mk("15", "initdb", "postgres")
	mk("17", "initdb") // incomplete: no server binary
	empty := t.TempDir()

	tests := []struct {
		name    string
		env     string
		root    string
		want    string
		wantErr string
		noPG    bool
	}{
		{name: "newest complete version", root: root, want: v15},
		{name: "env wins", env: v96, root: root, want: v96},
		{name: "env without binaries", env: empty, root: root, wantErr: EnvBin},
		{name: "nothing installed", root: empty, noPG: true, wantErr: "initdb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := findBin(tt.env, tt.root)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("findBin = %q, %v; want an error containing %q", got, err, tt.wantErr)
				}
				if errors.Is(err, errNoPostgres) != tt.noPG {
					t.Errorf("errors.Is(err, errNoPostgres) = %v, want %v (err %v)", !tt.noPG, tt.noPG, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("findBin = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestCompareVersions(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"9.6", "15", -1},
		{"16", "15", 1},
		{"15", "15", 0},
		{"15.2", "15", 1},
		{"devel", "9", -1},
	}
	for _, tt := range tests {
		if got := compareVersions(tt.a, tt.b); got != tt.want {
			t.Errorf("compareVersions(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestDatabaseName(t *testing.T) {
	tests := []struct {
		test string
		want string
	}{
		{"TestX", "llmgw_t42_7_testx"},
		{"TestStore/Model CRUD#01", "llmgw_t42_7_teststore_model_crud_01"},
		{strings.Repeat("TestLong", 20), "llmgw_t42_7_" + strings.Repeat("testlong", 20)[:63-len("llmgw_t42_7_")]},
	}
	for _, tt := range tests {
		got := databaseName(42, 7, tt.test)
		if got != tt.want {
			t.Errorf("databaseName(%q) = %q, want %q", tt.test, got, tt.want)
		}
		if len(got) > 63 {
			t.Errorf("databaseName(%q) is %d bytes, PostgreSQL allows 63", tt.test, len(got))
		}
	}
}
