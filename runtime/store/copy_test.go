package store_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/spec"
	"github.com/llmgw/llmgw/testkit/pgtest"
)

// usageRows is more than one INSERT batch of Copy.
const usageRows = 1234

// installation is everything a store holds, read through the Store API.
type installation struct {
	Models      []store.StoredModel
	APIKeys     []store.APIKey
	AdminTokens []store.AdminToken
	Nodes       []store.StoredNode
	Revocations map[string]time.Time
	Meta        map[string]string
	Fabrics     []store.StoredFabric
	Projects    []store.Project
	Budgets     []store.Budget
	Users       []store.User
	Usage       []store.UsageRow
}

var (
	metaKeys  = []string{"live-replicas", "empty"}
	nodeNames = []string{"gpu-1", "gpu-2", "gone"}
)

// fill stores one of everything (several of some) in s and returns the
// plaintext of a live API key and a live admin token.
func fill(t *testing.T, s store.Store) (apiKey, adminToken string) {
	t.Helper()
	ctx := t.Context()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	at := time.Date(2026, 3, 4, 5, 6, 7, 123456000, time.UTC)
	later := at.Add(90 * 24 * time.Hour)

	for _, name := range []string{"llama", "qwen"} {
		_, err := s.PutModel(ctx, name, []byte(`{"name":"`+name+`","shards":2}`))
		must("PutModel", err)
	}
	_, err := s.PutModel(ctx, "qwen", []byte(`{"name":"qwen","shards":4}`)) // revision 2
	must("PutModel", err)

	must("CreateProject", s.CreateProject(ctx, store.Project{Name: "research", RPM: 60, TPM: 10000, AllowedModels: []string{"llama"}}))
	must("UpdateProject default", s.UpdateProject(ctx, store.Project{Name: store.DefaultProject, TPM: 5}))
	must("PutBudget", s.PutBudget(ctx, store.Budget{Project: "research", Period: store.PeriodMonth, Amount: 12.5, OnExhausted: store.OnExhaustedFallback, FallbackModel: "llama"}))
	must("PutBudget", s.PutBudget(ctx, store.Budget{Project: store.DefaultProject, Period: store.PeriodDay, Amount: 1, OnExhausted: store.OnExhaustedRefuse}))
	must("SetRetention", s.SetRetention(ctx, "research", store.ContentThreads, 24))
	must("PutResponse", s.PutResponse(ctx, store.StoredResponse{Project: "research", ID: "resp_1", Model: "llama",
		Body: []byte(`{"id":"resp_1"}`), History: []byte(`[]`), CreatedAt: at, ExpiresAt: later}))
	_, err = s.PutThread(ctx, "research", "t1", []byte(`[]`), later, 0, "")
	must("PutThread", err)
	must("PutNote", s.PutNote(ctx, store.Note{Project: "research", Agent: "bot", ID: "n1", Text: "x", CreatedAt: at, UpdatedAt: at, ExpiresAt: later}))

	apiKey, prefix, hash := spec.NewAPIKey()
	must("CreateAPIKey", s.CreateAPIKey(ctx, store.APIKey{ID: "key-live", Name: "live", Prefix: prefix, Hash: hash, Project: "research", RPM: 7, TPM: 70, CreatedAt: at, ExpiresAt: &later}))
	must("TouchAPIKey", s.TouchAPIKey(ctx, "key-live", at.Add(time.Hour)))
	_, prefix2, hash2 := spec.NewAPIKey()
	must("CreateAPIKey", s.CreateAPIKey(ctx, store.APIKey{ID: "key-revoked", Name: "old", Prefix: prefix2, Hash: hash2, CreatedAt: at.Add(time.Minute)}))
	must("RevokeAPIKey", s.RevokeAPIKey(ctx, "key-revoked"))

	adminToken, _, adminHash := spec.NewAPIKey()
	must("CreateAdminToken", s.CreateAdminToken(ctx, store.AdminToken{ID: "adm-1", Name: "terraform", Hash: adminHash, CreatedAt: at}))
	_, _, adminHash2 := spec.NewAPIKey()
	must("CreateAdminToken", s.CreateAdminToken(ctx, store.AdminToken{ID: "adm-2", Name: "old", Hash: adminHash2}))
	must("RevokeAdminToken", s.RevokeAdminToken(ctx, "adm-2"))
	_, _, loginHash := spec.NewAPIKey()
	must("CreateAdminToken", s.CreateAdminToken(ctx, store.AdminToken{ID: "adm-login", Name: "login", Hash: loginHash, UserID: "u-1", CreatedAt: at, ExpiresAt: &later}))

	for _, name := range nodeNames[:2] {
		_, err := s.PutNode(ctx, name, []byte(`{"gpus":8}`))
		must("PutNode", err)
	}
	_, err = s.PutNode(ctx, "gpu-1", []byte(`{"gpus":4}`))
	must("PutNode", err)
	must("RevokeNodeIdentity", s.RevokeNodeIdentity(ctx, "gone", at))

	must("PutMeta", s.PutMeta(ctx, "live-replicas", `["llama/0"]`))
	must("PutMeta", s.PutMeta(ctx, "empty", ""))
	must("PutFabric", s.PutFabric(ctx, store.StoredFabric{Name: "ib-a", Description: "rack A"}))

	must("CreateUser", s.CreateUser(ctx, store.User{ID: "u-1", Email: "ops@example.com", PasswordHash: "$2a$10$abc", Admin: true, CreatedAt: at}))
	must("CreateUser", s.CreateUser(ctx, store.User{ID: "u-2", Email: "dev@example.com", PasswordHash: "$2a$10$def", CreatedAt: at.Add(time.Second)}))

	rows := make([]store.UsageRow, usageRows)
	for i := range rows {
		rows[i] = store.UsageRow{
			At: at.Add(time.Duration(i) * time.Second), RequestID: fmt.Sprintf("req-%d", i), Project: "research",
			KeyID: "key-live", Model: "llama", Replica: "llama/0", Endpoint: "/v1/chat/completions", Status: 200,
			PromptTokens: int64(i), CompletionTokens: 2 * int64(i), Cost: float64(i) / 1000,
			Latency: time.Duration(i) * time.Millisecond, TTFT: time.Duration(i) * time.Microsecond, Stream: i%2 == 0,
		}
	}
	must("InsertUsage", s.InsertUsage(ctx, rows))
	return apiKey, adminToken
}

func snapshot(t *testing.T, s store.Store) installation {
	t.Helper()
	ctx := t.Context()
	var in installation
	var err error
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	in.Models, err = s.ListModels(ctx)
	must("ListModels", err)
	in.APIKeys, err = s.ListAPIKeys(ctx)
	must("ListAPIKeys", err)
	in.AdminTokens, err = s.ListAdminTokens(ctx)
	must("ListAdminTokens", err)
	in.Nodes, err = s.ListNodes(ctx)
	must("ListNodes", err)
	in.Revocations = map[string]time.Time{}
	for _, name := range nodeNames {
		at, err := s.NodeRevokedAt(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		must("NodeRevokedAt", err)
		in.Revocations[name] = at
	}
	in.Meta = map[string]string{}
	for _, k := range metaKeys {
		v, err := s.GetMeta(ctx, k)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		must("GetMeta", err)
		in.Meta[k] = v
	}
	in.Fabrics, err = s.ListFabrics(ctx)
	must("ListFabrics", err)
	in.Projects, err = s.ListProjects(ctx)
	must("ListProjects", err)
	in.Budgets, err = s.ListBudgets(ctx, "")
	must("ListBudgets", err)
	in.Users, err = s.ListUsers(ctx)
	must("ListUsers", err)
	in.Usage, err = s.ListUsage(ctx, store.UsageQuery{}, 0, 0)
	must("ListUsage", err)
	return in
}

// compare fails the test naming each part of the installations that
// differs.
func compare(t *testing.T, what string, got, want installation) {
	t.Helper()
	g, w := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := range g.NumField() {
		if !reflect.DeepEqual(g.Field(i).Interface(), w.Field(i).Interface()) {
			t.Errorf("%s: %s differ:\n got %+v\nwant %+v", what, g.Type().Field(i).Name, g.Field(i).Interface(), w.Field(i).Interface())
		}
	}
}

func copyStore(t *testing.T, dst, src store.Store) []store.TableCount {
	t.Helper()
	counts, err := store.Copy(t.Context(), dst, src)
	if err != nil {
		t.Fatalf("Copy: %v", err)
	}
	return counts
}

func openSQLite(t *testing.T, path string) store.Store {
	t.Helper()
	s, err := store.Open(t.Context(), path)
	if err != nil {
		t.Fatalf("opening %s: %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// A whole installation survives SQLite → PostgreSQL → SQLite, and keys
// hashed in the first store authenticate in every copy.
func TestCopyRoundTripThroughPostgres(t *testing.T) {
	pgDSN := pgtest.NewDatabase(t)
	dir := t.TempDir()
	src := openSQLite(t, filepath.Join(dir, "src.db"))
	apiKey, adminToken := fill(t, src)
	want := snapshot(t, src)
	if len(want.Usage) != usageRows || len(want.APIKeys) != 2 || len(want.Projects) != 2 {
		t.Fatalf("filled source holds %d usage rows, %d keys, %d projects", len(want.Usage), len(want.APIKeys), len(want.Projects))
	}

	pg := openPostgres(t, pgDSN)
	t.Cleanup(func() { pg.Close() })
	counts := copyStore(t, pg, src)
	wantCounts := map[string]int64{"models": 2, "api_keys": 2, "admin_tokens": 3, "nodes": 2, "node_revocations": 1,
		"meta": 2, "fabrics": 1, "projects": 2, "budgets": 2, "users": 2, "usage_records": usageRows, "node_drains": 0,
		"content_retention": 1, "stored_responses": 1, "threads": 1, "memory_notes": 1}
	for _, c := range counts {
		if w, ok := wantCounts[c.Table]; !ok || c.Rows != w {
			t.Errorf("Copy wrote %d rows to %s, want %d", c.Rows, c.Table, w)
		}
		delete(wantCounts, c.Table)
	}
	if len(wantCounts) != 0 {
		t.Errorf("Copy reported no count for %v", wantCounts)
	}
	compare(t, "PostgreSQL copy", snapshot(t, pg), want)

	back := openSQLite(t, filepath.Join(dir, "back.db"))
	copyStore(t, back, pg)
	compare(t, "SQLite copy of the PostgreSQL copy", snapshot(t, back), want)
	compare(t, "source after copying", snapshot(t, src), want)

	for name, s := range map[string]store.Store{"PostgreSQL": pg, "SQLite": back} {
		k, err := s.LookupAPIKey(t.Context(), spec.HashSecret(apiKey))
		if err != nil || k.ID != "key-live" {
			t.Errorf("%s: LookupAPIKey of the source's key = %+v, %v; want key-live", name, k, err)
		}
		if _, err := s.LookupAdminToken(t.Context(), spec.HashSecret(adminToken)); err != nil {
			t.Errorf("%s: LookupAdminToken of the source's token: %v", name, err)
		}
		// New usage rows get ids after the copied ones.
		if err := s.InsertUsage(t.Context(), []store.UsageRow{{At: time.Now(), RequestID: "after", Project: "research"}}); err != nil {
			t.Fatalf("%s: InsertUsage after the copy: %v", name, err)
		}
		rows, err := s.ListUsage(t.Context(), store.UsageQuery{}, want.Usage[len(want.Usage)-1].ID, 0)
		if err != nil || len(rows) != 1 || rows[0].RequestID != "after" {
			t.Errorf("%s: rows after the copied ones = %+v, %v; want the new row", name, rows, err)
		}
	}
}

func TestCopySQLiteToSQLite(t *testing.T) {
	dir := t.TempDir()
	src := openSQLite(t, filepath.Join(dir, "src.db"))
	fill(t, src)
	want := snapshot(t, src)
	dst := openSQLite(t, filepath.Join(dir, "dst.db"))
	copyStore(t, dst, src)
	compare(t, "copy", snapshot(t, dst), want)
}

func TestCopyRefuses(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, dst store.Store)
		same    bool
		wantErr []string
	}{
		{
			name: "destination with a model and a key",
			prepare: func(t *testing.T, dst store.Store) {
				if _, err := dst.PutModel(t.Context(), "m", []byte(`{}`)); err != nil {
					t.Fatal(err)
				}
				if err := dst.CreateAPIKey(t.Context(), store.APIKey{ID: "k", Hash: "h"}); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: []string{"not empty", "models (1 rows)", "api_keys (1 rows)", "dst.db"},
		},
		{
			name: "destination whose default project was changed",
			prepare: func(t *testing.T, dst store.Store) {
				if err := dst.UpdateProject(t.Context(), store.Project{Name: store.DefaultProject, RPM: 1}); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: []string{"not empty", "projects (1 rows)"},
		},
		{name: "same store", same: true, wantErr: []string{"same store"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			src := openSQLite(t, filepath.Join(dir, "src.db"))
			fill(t, src)
			dst := src
			if !tt.same {
				dst = openSQLite(t, filepath.Join(dir, "dst.db"))
				tt.prepare(t, dst)
			}
			before := snapshot(t, dst)
			_, err := store.Copy(t.Context(), dst, src)
			if err == nil {
				t.Fatal("Copy succeeded, want an error")
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			compare(t, "destination after a refused copy", snapshot(t, dst), before)
		})
	}
}

func TestMove(t *testing.T) {
	dir := t.TempDir()
	srcPath := filepath.Join(dir, "src.db")
	src := openSQLite(t, srcPath)
	apiKey, _ := fill(t, src)
	want := snapshot(t, src)
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	dstFile := filepath.Join(dir, "dst-dsn")
	if err := os.WriteFile(dstFile, []byte(filepath.Join(dir, "dst.db")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	missing := filepath.Join(dir, "typo.db")
	if _, err := store.Move(t.Context(), missing, "@"+dstFile); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Move from a missing file: err = %v, want one naming %s", err, missing)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Move created the missing source %s (stat: %v)", missing, err)
	}

	counts, err := store.Move(t.Context(), srcPath, "@"+dstFile)
	if err != nil {
		t.Fatalf("Move: %v", err)
	}
	if len(counts) == 0 {
		t.Error("Move reported no tables")
	}
	dst := openSQLite(t, filepath.Join(dir, "dst.db"))
	compare(t, "moved store", snapshot(t, dst), want)
	if _, err := dst.LookupAPIKey(t.Context(), spec.HashSecret(apiKey)); err != nil {
		t.Errorf("LookupAPIKey in the moved store: %v", err)
	}
	// Moving again finds the destination full.
	if _, err := store.Move(t.Context(), srcPath, "@"+dstFile); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("second Move: err = %v, want a non-empty destination refused", err)
	}
}
