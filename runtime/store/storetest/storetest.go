// Package storetest is the behaviour every store.Store backend must show.
// A backend's own test calls Run with a function that opens a fresh, empty
// store, and RunReopen with a function that returns the DSN of a fresh
// database:
//
//	func TestStore(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { ... })
//	}
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/spec"
)

// Run runs the backend-independent suite. open must return a new, empty
// store for each call; Run closes it.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"ModelCRUD", testModelCRUD},
		{"ModelNotFound", testModelNotFound},
		{"ModelRevisionIncrements", testModelRevisionIncrements},
		{"ModelRejectsBadInput", testModelRejectsBadInput},
		{"APIKeyLifecycle", testAPIKeyLifecycle},
		{"APIKeyDuplicate", testAPIKeyDuplicate},
		{"APIKeyTouch", testAPIKeyTouch},
		{"APIKeyNotFound", testAPIKeyNotFound},
		{"AdminTokenLifecycle", testAdminTokenLifecycle},
		{"AdminTokenExpiry", testAdminTokenExpiry},
		{"AdminTokenRevokeByUser", testAdminTokenRevokeByUser},
		{"AdminTokenOfDemotedUser", testAdminTokenOfDemotedUser},
		{"NodeCRUD", testNodeCRUD},
		{"NodeRevocation", testNodeRevocation},
		{"ConcurrentWriters", testConcurrentWriters},
		{"Meta", testMeta},
		{"FabricCRUD", testFabricCRUD},
		{"ProjectCRUD", testProjectCRUD},
		{"APIKeyNeedsProject", testAPIKeyNeedsProject},
		{"APIKeyLimits", testAPIKeyLimits},
		{"BudgetCRUD", testBudgetCRUD},
		{"Users", testUsers},
		{"UsageInsertAndQuery", testUsageInsertAndQuery},
		{"UsageLargeBatch", testUsageLargeBatch},
		{"ProjectDeleteRacesKeyCreate", testProjectDeleteRacesKeyCreate},
		{"ContentRetention", testContentRetention},
		{"StoredResponses", testStoredResponses},
		{"Threads", testThreads},
		{"MemoryNotes", testMemoryNotes},
		{"ThreadRevisionRace", testThreadRevisionRace},
		{"NoteCapRace", testNoteCapRace},
		{"ContentRetentionCut", testContentRetentionCut},
		{"LeaseTakeover", testLeaseTakeover},
		{"LeaseRace", testLeaseRace},
		{"DrainsAndControlPlanes", testDrainsAndControlPlanes},
		{"ControlPlaneDemand", testControlPlaneDemand},
		{"QuotaSlices", testQuotaSlices},
		{"QuotaSliceRace", testQuotaSliceRace},
		{"QuotaSliceWithUsage", testQuotaSliceWithUsage},
		{"QuotaRateLinger", testQuotaRateLinger},
		{"QuotaBudgetAsStored", testQuotaBudgetAsStored},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("closing store: %v", err)
				}
			})
			tt.fn(t, s)
		})
	}
}

// RunReopen checks that data survives closing and reopening the store with
// store.Open, and that reopening (which re-runs migrations) is idempotent.
// newDSN must return the DSN of a new, empty database for each call.
func RunReopen(t *testing.T, newDSN func(t *testing.T) string) {
	t.Helper()
	t.Run("SurvivesRestart", func(t *testing.T) {
		ctx := t.Context()
		dsn := newDSN(t)
		reopen := func() store.Store {
			t.Helper()
			s, err := store.Open(ctx, dsn)
			if err != nil {
				t.Fatalf("opening store: %v", err)
			}
			return s
		}

		s := reopen()
		if _, err := s.PutModel(ctx, "m", []byte(`{"v":1}`)); err != nil {
			t.Fatalf("PutModel: %v", err)
		}
		_, _, hash := spec.NewAPIKey()
		if err := s.CreateAPIKey(ctx, store.APIKey{ID: "k1", Name: "ci", Prefix: "llmgw-abc", Hash: hash}); err != nil {
			t.Fatalf("CreateAPIKey: %v", err)
		}
		if _, err := s.PutNode(ctx, "node01", []byte(`{}`)); err != nil {
			t.Fatalf("PutNode: %v", err)
		}
		if err := s.RevokeNodeIdentity(ctx, "node02", time.Now()); err != nil {
			t.Fatalf("RevokeNodeIdentity: %v", err)
		}
		mustClose(t, s)

		for round := 2; round <= 3; round++ {
			s := reopen()
			m, err := s.GetModel(ctx, "m")
			if err != nil {
				t.Fatalf("round %d: GetModel after reopen: %v", round, err)
			}
			if want := int64(round - 1); m.Revision != want {
				t.Errorf("round %d: revision = %d, want %d", round, m.Revision, want)
			}
			rev, err := s.PutModel(ctx, "m", []byte(`{"v":2}`))
			if err != nil {
				t.Fatalf("round %d: PutModel after reopen: %v", round, err)
			}
			if rev != int64(round) {
				t.Errorf("round %d: revision after put = %d, want %d", round, rev, round)
			}
			if k, err := s.LookupAPIKey(ctx, hash); err != nil || k.ID != "k1" {
				t.Errorf("round %d: LookupAPIKey = %+v, %v; want k1", round, k, err)
			}
			if n, err := s.GetNode(ctx, "node01"); err != nil || n.Revision != 1 {
				t.Errorf("round %d: GetNode = %+v, %v; want revision 1", round, n, err)
			}
			if revoked, err := s.IsNodeRevoked(ctx, "node02"); err != nil || !revoked {
				t.Errorf("round %d: IsNodeRevoked(node02) = %v, %v; want true", round, revoked, err)
			}
			mustClose(t, s)
		}
	})
}

func mustClose(t *testing.T, s store.Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("closing store: %v", err)
	}
}

// between checks that got lies in [before, after] at the store's
// microsecond precision.
func between(t *testing.T, what string, got, before, after time.Time) {
	t.Helper()
	lo := before.Truncate(time.Microsecond)
	if got.Before(lo) || got.After(after) {
		t.Errorf("%s = %v, want between %v and %v", what, got, lo, after)
	}
}

func testModelCRUD(t *testing.T, s store.Store) {
	ctx := t.Context()
	before := time.Now()
	for _, name := range []string{"qwen-7b", "llama-70b", "embed"} {
		rev, err := s.PutModel(ctx, name, []byte(fmt.Sprintf(`{"name":%q}`, name)))
		if err != nil {
			t.Fatalf("PutModel(%s): %v", name, err)
		}
		if rev != 1 {
			t.Errorf("PutModel(%s) revision = %d, want 1", name, rev)
		}
	}
	after := time.Now()

	m, err := s.GetModel(ctx, "llama-70b")
	if err != nil {
		t.Fatalf("GetModel: %v", err)
	}
	if m.Name != "llama-70b" || string(m.Spec) != `{"name":"llama-70b"}` || m.Revision != 1 {
		t.Errorf("GetModel = %+v", m)
	}
	between(t, "CreatedAt", m.CreatedAt, before, after)
	if !m.UpdatedAt.Equal(m.CreatedAt) {
		t.Errorf("new model UpdatedAt %v != CreatedAt %v", m.UpdatedAt, m.CreatedAt)
	}

	list, err := s.ListModels(ctx)
	if err != nil {
		t.Fatalf("ListModels: %v", err)
	}
	var names []string
	for _, m := range list {
		names = append(names, m.Name)
	}
	if want := []string{"embed", "llama-70b", "qwen-7b"}; !slices.Equal(names, want) {
		t.Errorf("ListModels names = %v, want %v", names, want)
	}

	if err := s.DeleteModel(ctx, "embed"); err != nil {
		t.Fatalf("DeleteModel: %v", err)
	}
	if _, err := s.GetModel(ctx, "embed"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetModel after delete: err = %v, want ErrNotFound", err)
	}
	list, err = s.ListModels(ctx)
	if err != nil {
		t.Fatalf("ListModels: %v", err)
	}
	if len(list) != 2 {
		t.Errorf("ListModels after delete has %d models, want 2", len(list))
	}
}

func testModelNotFound(t *testing.T, s store.Store) {
	ctx := t.Context()
	if _, err := s.GetModel(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetModel(nope): err = %v, want ErrNotFound", err)
	}
	if err := s.DeleteModel(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteModel(nope): err = %v, want ErrNotFound", err)
	}
	list, err := s.ListModels(ctx)
	if err != nil || len(list) != 0 {
		t.Errorf("ListModels on empty store = %v, %v; want none", list, err)
	}
}

func testModelRevisionIncrements(t *testing.T, s store.Store) {
	ctx := t.Context()
	var first store.StoredModel
	for want := int64(1); want <= 4; want++ {
		spec := fmt.Sprintf(`{"replicas":%d}`, want)
		rev, err := s.PutModel(ctx, "m", []byte(spec))
		if err != nil {
			t.Fatalf("PutModel #%d: %v", want, err)
		}
		if rev != want {
			t.Errorf("PutModel #%d revision = %d, want %d", want, rev, want)
		}
		m, err := s.GetModel(ctx, "m")
		if err != nil {
			t.Fatalf("GetModel: %v", err)
		}
		if m.Revision != want || string(m.Spec) != spec {
			t.Errorf("after put #%d GetModel = rev %d spec %s", want, m.Revision, m.Spec)
		}
		if want == 1 {
			first = m
			continue
		}
		if !m.CreatedAt.Equal(first.CreatedAt) {
			t.Errorf("CreatedAt changed on update: %v -> %v", first.CreatedAt, m.CreatedAt)
		}
		if m.UpdatedAt.Before(m.CreatedAt) {
			t.Errorf("UpdatedAt %v before CreatedAt %v", m.UpdatedAt, m.CreatedAt)
		}
	}
	// Deleting and re-creating starts over.
	if err := s.DeleteModel(ctx, "m"); err != nil {
		t.Fatalf("DeleteModel: %v", err)
	}
	if rev, err := s.PutModel(ctx, "m", []byte(`{}`)); err != nil || rev != 1 {
		t.Errorf("PutModel after delete = %d, %v; want 1", rev, err)
	}
}

func testModelRejectsBadInput(t *testing.T, s store.Store) {
	ctx := t.Context()
	tests := []struct {
		name, model string
		spec        []byte
	}{
		{"empty name", "", []byte(`{}`)},
		{"empty spec", "m", nil},
		{"invalid JSON", "m", []byte(`{"a":`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := s.PutModel(ctx, tt.model, tt.spec); err == nil {
				t.Errorf("PutModel(%q, %q) succeeded, want an error", tt.model, tt.spec)
			}
		})
	}
	if list, err := s.ListModels(ctx); err != nil || len(list) != 0 {
		t.Errorf("rejected puts left models behind: %v, %v", list, err)
	}
}

func testAPIKeyLifecycle(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, prefix1, hash1 := spec.NewAPIKey()
	_, prefix2, hash2 := spec.NewAPIKey()
	expires := time.Now().Add(24 * time.Hour).UTC().Truncate(time.Microsecond)
	if err := s.CreateProject(ctx, store.Project{Name: "research"}); err != nil {
		t.Fatalf("CreateProject: %v", err)
	}
	before := time.Now()
	if err := s.CreateAPIKey(ctx, store.APIKey{ID: "key-1", Name: "ci", Prefix: prefix1, Hash: hash1}); err != nil {
		t.Fatalf("CreateAPIKey key-1: %v", err)
	}
	if err := s.CreateAPIKey(ctx, store.APIKey{ID: "key-2", Name: "app", Prefix: prefix2, Hash: hash2, Project: "research", ExpiresAt: &expires}); err != nil {
		t.Fatalf("CreateAPIKey key-2: %v", err)
	}
	after := time.Now()

	k, err := s.LookupAPIKey(ctx, hash1)
	if err != nil {
		t.Fatalf("LookupAPIKey key-1: %v", err)
	}
	if k.ID != "key-1" || k.Name != "ci" || k.Prefix != prefix1 || k.Hash != hash1 {
		t.Errorf("LookupAPIKey = %+v", k)
	}
	if k.Project != store.DefaultProject {
		t.Errorf("Project = %q, want %q", k.Project, store.DefaultProject)
	}
	if k.ExpiresAt != nil || k.LastUsedAt != nil || k.RevokedAt != nil {
		t.Errorf("new key has times set: %+v", k)
	}
	between(t, "CreatedAt", k.CreatedAt, before, after)

	k2, err := s.LookupAPIKey(ctx, hash2)
	if err != nil {
		t.Fatalf("LookupAPIKey key-2: %v", err)
	}
	if k2.Project != "research" || k2.ExpiresAt == nil || !k2.ExpiresAt.Equal(expires) {
		t.Errorf("key-2 = %+v, want project research expiring %v", k2, expires)
	}
	if k2.Expired(time.Now()) || !k2.Expired(expires) || !k2.Expired(expires.Add(time.Second)) {
		t.Errorf("Expired() wrong around %v", expires)
	}

	if err := s.RevokeAPIKey(ctx, "key-1"); err != nil {
		t.Fatalf("RevokeAPIKey: %v", err)
	}
	if _, err := s.LookupAPIKey(ctx, hash1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LookupAPIKey of revoked key: err = %v, want ErrNotFound", err)
	}
	list, err := s.ListAPIKeys(ctx)
	if err != nil {
		t.Fatalf("ListAPIKeys: %v", err)
	}
	if len(list) != 2 || list[0].ID != "key-1" || list[1].ID != "key-2" {
		t.Fatalf("ListAPIKeys = %+v, want key-1, key-2", list)
	}
	if list[0].RevokedAt == nil || list[1].RevokedAt != nil {
		t.Errorf("RevokedAt in list: key-1 %v, key-2 %v; want set, unset", list[0].RevokedAt, list[1].RevokedAt)
	}
	firstRevoke := *list[0].RevokedAt
	if err := s.RevokeAPIKey(ctx, "key-1"); err != nil {
		t.Fatalf("revoking twice: %v", err)
	}
	list, err = s.ListAPIKeys(ctx)
	if err != nil {
		t.Fatalf("ListAPIKeys: %v", err)
	}
	if !list[0].RevokedAt.Equal(firstRevoke) {
		t.Errorf("second revoke moved RevokedAt from %v to %v", firstRevoke, list[0].RevokedAt)
	}
}

func testAPIKeyDuplicate(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, _, hash := spec.NewAPIKey()
	_, _, other := spec.NewAPIKey()
	if err := s.CreateAPIKey(ctx, store.APIKey{ID: "a", Hash: hash}); err != nil {
		t.Fatalf("CreateAPIKey: %v", err)
	}
	tests := []struct {
		name string
		key  store.APIKey
	}{
		{"same id", store.APIKey{ID: "a", Hash: other}},
		{"same hash", store.APIKey{ID: "b", Hash: hash}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.CreateAPIKey(ctx, tt.key); !errors.Is(err, store.ErrAlreadyExists) {
				t.Errorf("CreateAPIKey: err = %v, want ErrAlreadyExists", err)
			}
		})
	}
	if err := s.CreateAPIKey(ctx, store.APIKey{ID: "", Hash: other}); err == nil {
		t.Error("CreateAPIKey without ID succeeded")
	}
	if err := s.CreateAPIKey(ctx, store.APIKey{ID: "c"}); err == nil {
		t.Error("CreateAPIKey without hash succeeded")
	}
}

func testAPIKeyTouch(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, _, hash := spec.NewAPIKey()
	if err := s.CreateAPIKey(ctx, store.APIKey{ID: "k", Hash: hash}); err != nil {
		t.Fatalf("CreateAPIKey: %v", err)
	}
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC)
	steps := []struct {
		at, want time.Time
	}{
		{t0, t0},
		{t0.Add(time.Minute), t0.Add(time.Minute)},
		{t0, t0.Add(time.Minute)}, // never backwards: batched touches may arrive out of order
	}
	for i, st := range steps {
		if err := s.TouchAPIKey(ctx, "k", st.at); err != nil {
			t.Fatalf("TouchAPIKey #%d: %v", i, err)
		}
		k, err := s.LookupAPIKey(ctx, hash)
		if err != nil {
			t.Fatalf("LookupAPIKey: %v", err)
		}
		if k.LastUsedAt == nil || !k.LastUsedAt.Equal(st.want) {
			t.Errorf("after touch #%d LastUsedAt = %v, want %v", i, k.LastUsedAt, st.want)
		}
	}
	if err := s.TouchAPIKey(ctx, "missing", t0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("TouchAPIKey(missing): err = %v, want ErrNotFound", err)
	}
}

func testAPIKeyNotFound(t *testing.T, s store.Store) {
	ctx := t.Context()
	if _, err := s.LookupAPIKey(ctx, spec.HashSecret("nope")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LookupAPIKey: err = %v, want ErrNotFound", err)
	}
	if err := s.RevokeAPIKey(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RevokeAPIKey: err = %v, want ErrNotFound", err)
	}
	if list, err := s.ListAPIKeys(ctx); err != nil || len(list) != 0 {
		t.Errorf("ListAPIKeys on empty store = %v, %v", list, err)
	}
}

func testAdminTokenLifecycle(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, hash1 := spec.NewAdminToken()
	_, hash2 := spec.NewAdminToken()
	before := time.Now()
	for _, tok := range []store.AdminToken{{ID: "adm-1", Name: "terraform", Hash: hash1}, {ID: "adm-2", Name: "ci", Hash: hash2}} {
		if err := s.CreateAdminToken(ctx, tok); err != nil {
			t.Fatalf("CreateAdminToken %s: %v", tok.ID, err)
		}
	}
	after := time.Now()
	if err := s.CreateAdminToken(ctx, store.AdminToken{ID: "adm-3", Hash: hash1}); !errors.Is(err, store.ErrAlreadyExists) {
		t.Errorf("CreateAdminToken with a duplicate hash: err = %v, want ErrAlreadyExists", err)
	}
	if err := s.CreateAdminToken(ctx, store.AdminToken{ID: "adm-4"}); err == nil {
		t.Error("CreateAdminToken without hash succeeded")
	}

	tok, err := s.LookupAdminToken(ctx, hash1)
	if err != nil {
		t.Fatalf("LookupAdminToken: %v", err)
	}
	if tok.ID != "adm-1" || tok.Name != "terraform" || tok.Hash != hash1 || tok.RevokedAt != nil {
		t.Errorf("LookupAdminToken = %+v", tok)
	}
	between(t, "CreatedAt", tok.CreatedAt, before, after)

	if err := s.RevokeAdminToken(ctx, "adm-1"); err != nil {
		t.Fatalf("RevokeAdminToken: %v", err)
	}
	if _, err := s.LookupAdminToken(ctx, hash1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LookupAdminToken of revoked token: err = %v, want ErrNotFound", err)
	}
	if _, err := s.LookupAdminToken(ctx, hash2); err != nil {
		t.Errorf("revoking adm-1 affected adm-2: %v", err)
	}
	if err := s.RevokeAdminToken(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RevokeAdminToken(nope): err = %v, want ErrNotFound", err)
	}
	list, err := s.ListAdminTokens(ctx)
	if err != nil {
		t.Fatalf("ListAdminTokens: %v", err)
	}
	if len(list) != 2 || list[0].ID != "adm-1" || list[0].RevokedAt == nil || list[1].RevokedAt != nil {
		t.Errorf("ListAdminTokens = %+v", list)
	}
}

func testNodeCRUD(t *testing.T, s store.Store) {
	ctx := t.Context()
	if _, err := s.GetNode(ctx, "node01"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetNode on empty store: err = %v, want ErrNotFound", err)
	}
	for i, decl := range []string{`{"labels":{"rack":"a"}}`, `{"labels":{"rack":"b"}}`} {
		rev, err := s.PutNode(ctx, "node01", []byte(decl))
		if err != nil {
			t.Fatalf("PutNode: %v", err)
		}
		if want := int64(i + 1); rev != want {
			t.Errorf("PutNode revision = %d, want %d", rev, want)
		}
	}
	if _, err := s.PutNode(ctx, "node00", []byte(`{}`)); err != nil {
		t.Fatalf("PutNode node00: %v", err)
	}
	if _, err := s.PutNode(ctx, "bad", []byte(`not json`)); err == nil {
		t.Error("PutNode with invalid JSON succeeded")
	}
	n, err := s.GetNode(ctx, "node01")
	if err != nil {
		t.Fatalf("GetNode: %v", err)
	}
	if n.Name != "node01" || n.Revision != 2 || string(n.Declaration) != `{"labels":{"rack":"b"}}` {
		t.Errorf("GetNode = %+v", n)
	}
	list, err := s.ListNodes(ctx)
	if err != nil {
		t.Fatalf("ListNodes: %v", err)
	}
	if len(list) != 2 || list[0].Name != "node00" || list[1].Name != "node01" {
		t.Errorf("ListNodes = %+v, want node00, node01", list)
	}
	if err := s.DeleteNode(ctx, "node01"); err != nil {
		t.Fatalf("DeleteNode: %v", err)
	}
	if err := s.DeleteNode(ctx, "node01"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteNode twice: err = %v, want ErrNotFound", err)
	}
	if revoked, err := s.IsNodeRevoked(ctx, "node01"); err != nil || revoked {
		t.Errorf("DeleteNode revoked the identity: %v, %v", revoked, err)
	}
}

func testNodeRevocation(t *testing.T, s store.Store) {
	ctx := t.Context()
	t0 := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	if revoked, err := s.IsNodeRevoked(ctx, "node07"); err != nil || revoked {
		t.Fatalf("IsNodeRevoked before revocation = %v, %v; want false", revoked, err)
	}
	if _, err := s.NodeRevokedAt(ctx, "node07"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("NodeRevokedAt before revocation: err = %v, want ErrNotFound", err)
	}
	steps := []struct {
		at, want time.Time
	}{
		{t0, t0},
		{t0.Add(time.Hour), t0.Add(time.Hour)},
		{t0, t0.Add(time.Hour)}, // never moves back
	}
	for i, st := range steps {
		if err := s.RevokeNodeIdentity(ctx, "node07", st.at); err != nil {
			t.Fatalf("RevokeNodeIdentity #%d: %v", i, err)
		}
		revoked, err := s.IsNodeRevoked(ctx, "node07")
		if err != nil || !revoked {
			t.Errorf("IsNodeRevoked after revocation #%d = %v, %v; want true", i, revoked, err)
		}
		at, err := s.NodeRevokedAt(ctx, "node07")
		if err != nil || !at.Equal(st.want) {
			t.Errorf("NodeRevokedAt after #%d = %v, %v; want %v", i, at, err, st.want)
		}
	}
	if revoked, err := s.IsNodeRevoked(ctx, "node08"); err != nil || revoked {
		t.Errorf("revoking node07 revoked node08: %v, %v", revoked, err)
	}
	if err := s.RevokeNodeIdentity(ctx, "", t0); err == nil {
		t.Error("RevokeNodeIdentity with an empty name succeeded")
	}
}

// testConcurrentWriters has 8 goroutines write at once: a shared model (the
// read-modify-write of its revision must not lose updates), their own
// models, keys and touches. No write may fail (e.g. with SQLITE_BUSY).
func testConcurrentWriters(t *testing.T, s store.Store) {
	ctx := t.Context()
	const workers, rounds = 8, 15
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds*5)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				if _, err := s.PutModel(ctx, "shared", []byte(fmt.Sprintf(`{"w":%d,"r":%d}`, w, r))); err != nil {
					errs <- fmt.Errorf("worker %d: PutModel shared: %w", w, err)
				}
				if _, err := s.PutModel(ctx, fmt.Sprintf("own-%d", w), []byte(`{}`)); err != nil {
					errs <- fmt.Errorf("worker %d: PutModel own: %w", w, err)
				}
				id := fmt.Sprintf("key-%d-%d", w, r)
				if err := s.CreateAPIKey(ctx, store.APIKey{ID: id, Hash: spec.HashSecret(id)}); err != nil {
					errs <- fmt.Errorf("worker %d: CreateAPIKey: %w", w, err)
				}
				if err := s.TouchAPIKey(ctx, id, time.Now()); err != nil {
					errs <- fmt.Errorf("worker %d: TouchAPIKey: %w", w, err)
				}
				if _, err := s.ListModels(ctx); err != nil {
					errs <- fmt.Errorf("worker %d: ListModels: %w", w, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	m, err := s.GetModel(ctx, "shared")
	if err != nil {
		t.Fatalf("GetModel shared: %v", err)
	}
	if want := int64(workers * rounds); m.Revision != want {
		t.Errorf("shared revision = %d after %d puts: updates were lost", m.Revision, want)
	}
	for w := range workers {
		m, err := s.GetModel(ctx, fmt.Sprintf("own-%d", w))
		if err != nil || m.Revision != rounds {
			t.Errorf("own-%d = rev %d, %v; want %d", w, m.Revision, err, rounds)
		}
	}
	keys, err := s.ListAPIKeys(ctx)
	if err != nil {
		t.Fatalf("ListAPIKeys: %v", err)
	}
	if len(keys) != workers*rounds {
		t.Errorf("ListAPIKeys has %d keys, want %d", len(keys), workers*rounds)
	}
	for _, k := range keys {
		if k.LastUsedAt == nil {
			t.Errorf("key %s was never touched", k.ID)
		}
	}
}

func testMeta(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.GetMeta(ctx, "live_replicas"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetMeta of a missing key: err = %v, want ErrNotFound", err)
	}
	for _, v := range []string{`["r-1"]`, `[]`} {
		if err := s.PutMeta(ctx, "live_replicas", v); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetMeta(ctx, "live_replicas")
		if err != nil || got != v {
			t.Fatalf("GetMeta = %q, %v; want %q", got, err, v)
		}
	}
	if err := s.PutMeta(ctx, "", "x"); err == nil {
		t.Fatal("PutMeta accepted an empty key")
	}
}

func testFabricCRUD(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.GetFabric(ctx, "ib-a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetFabric of a missing fabric: %v", err)
	}
	if err := s.PutFabric(ctx, store.StoredFabric{Name: "ib-a", Description: "rack 1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutFabric(ctx, store.StoredFabric{Name: "ib-a", Description: "rack 1 and 2"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutFabric(ctx, store.StoredFabric{Name: "ib-b"}); err != nil {
		t.Fatal(err)
	}
	f, err := s.GetFabric(ctx, "ib-a")
	if err != nil || f.Description != "rack 1 and 2" || f.CreatedAt.IsZero() {
		t.Fatalf("GetFabric = %+v, %v", f, err)
	}
	list, err := s.ListFabrics(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "ib-a" || list[1].Name != "ib-b" {
		t.Fatalf("ListFabrics = %+v, %v", list, err)
	}
	if err := s.DeleteFabric(ctx, "ib-a"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteFabric(ctx, "ib-a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if err := s.PutFabric(ctx, store.StoredFabric{}); err == nil {
		t.Fatal("a fabric without a name was stored")
	}
}
