package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/spec"
)

func testProjectCRUD(t *testing.T, s store.Store) {
	ctx := t.Context()
	def, err := s.GetProject(ctx, store.DefaultProject)
	if err != nil {
		t.Fatalf("the default project must always exist: %v", err)
	}
	if def.RPM != 0 || def.TPM != 0 || def.AllowedModels != nil {
		t.Errorf("default project = %+v, want no limits", def)
	}
	p := store.Project{Name: "research", RPM: 60, TPM: 10000, AllowedModels: []string{"llama", "qwen"}}
	if err := s.CreateProject(ctx, p); err != nil {
		t.Fatalf("CreateProject: %v", err)
	}
	if err := s.CreateProject(ctx, p); !errors.Is(err, store.ErrAlreadyExists) {
		t.Errorf("second CreateProject = %v, want ErrAlreadyExists", err)
	}
	got, err := s.GetProject(ctx, "research")
	if err != nil {
		t.Fatalf("GetProject: %v", err)
	}
	if got.RPM != 60 || got.TPM != 10000 || !slices.Equal(got.AllowedModels, []string{"llama", "qwen"}) {
		t.Errorf("GetProject = %+v", got)
	}
	p.RPM, p.TPM, p.AllowedModels = 0, 500, nil
	if err := s.UpdateProject(ctx, p); err != nil {
		t.Fatalf("UpdateProject: %v", err)
	}
	got, _ = s.GetProject(ctx, "research")
	if got.RPM != 0 || got.TPM != 500 || got.AllowedModels != nil {
		t.Errorf("after update = %+v", got)
	}
	if err := s.UpdateProject(ctx, store.Project{Name: "nope"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdateProject unknown = %v, want ErrNotFound", err)
	}
	if err := s.CreateProject(ctx, store.Project{Name: "bad", RPM: -1}); err == nil {
		t.Error("CreateProject with negative rpm succeeded")
	}
	list, err := s.ListProjects(ctx)
	if err != nil {
		t.Fatalf("ListProjects: %v", err)
	}
	var names []string
	for _, p := range list {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, []string{"default", "research"}) {
		t.Errorf("ListProjects = %v", names)
	}

	// A project with a live key cannot go; once the key is revoked it can,
	// and its budgets go with it.
	_, prefix, hash := spec.NewAPIKey()
	if err := s.CreateAPIKey(ctx, store.APIKey{ID: "k", Prefix: prefix, Hash: hash, Project: "research"}); err != nil {
		t.Fatalf("CreateAPIKey: %v", err)
	}
	if err := s.PutBudget(ctx, store.Budget{Project: "research", Period: store.PeriodDay, Amount: 1, OnExhausted: store.OnExhaustedRefuse}); err != nil {
		t.Fatalf("PutBudget: %v", err)
	}
	if err := s.DeleteProject(ctx, "research"); !errors.Is(err, store.ErrInUse) {
		t.Errorf("DeleteProject with a live key = %v, want ErrInUse", err)
	}
	if err := s.RevokeAPIKey(ctx, "k"); err != nil {
		t.Fatalf("RevokeAPIKey: %v", err)
	}
	if err := s.DeleteProject(ctx, "research"); err != nil {
		t.Fatalf("DeleteProject: %v", err)
	}
	if _, err := s.GetBudget(ctx, "research", store.PeriodDay); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("budget of a deleted project = %v, want ErrNotFound", err)
	}
	if err := s.DeleteProject(ctx, "research"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second DeleteProject = %v, want ErrNotFound", err)
	}
	if err := s.DeleteProject(ctx, store.DefaultProject); !errors.Is(err, store.ErrInUse) {
		t.Errorf("DeleteProject default = %v, want ErrInUse", err)
	}
}

func testAPIKeyNeedsProject(t *testing.T, s store.Store) {
	_, prefix, hash := spec.NewAPIKey()
	err := s.CreateAPIKey(t.Context(), store.APIKey{ID: "k", Prefix: prefix, Hash: hash, Project: "ghost"})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("CreateAPIKey in a missing project = %v, want ErrNotFound", err)
	}
	if _, err := s.GetAPIKey(t.Context(), "k"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the refused key was stored: %v", err)
	}
}

func testAPIKeyLimits(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, prefix, hash := spec.NewAPIKey()
	if err := s.CreateAPIKey(ctx, store.APIKey{ID: "k", Prefix: prefix, Hash: hash, RPM: 5, TPM: 600}); err != nil {
		t.Fatalf("CreateAPIKey: %v", err)
	}
	k, err := s.GetAPIKey(ctx, "k")
	if err != nil {
		t.Fatalf("GetAPIKey: %v", err)
	}
	if k.RPM != 5 || k.TPM != 600 || k.Hash != hash {
		t.Errorf("GetAPIKey = %+v", k)
	}
	if err := s.SetAPIKeyLimits(ctx, "k", 7, 0); err != nil {
		t.Fatalf("SetAPIKeyLimits: %v", err)
	}
	k, _ = s.LookupAPIKey(ctx, hash)
	if k.RPM != 7 || k.TPM != 0 {
		t.Errorf("after SetAPIKeyLimits = %+v", k)
	}
	if err := s.SetAPIKeyLimits(ctx, "nope", 1, 1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SetAPIKeyLimits unknown = %v, want ErrNotFound", err)
	}
	// A revoked key is still readable by ID (for listings and Terraform).
	if err := s.RevokeAPIKey(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	k, err = s.GetAPIKey(ctx, "k")
	if err != nil || k.RevokedAt == nil {
		t.Errorf("GetAPIKey of a revoked key = %+v, %v", k, err)
	}
}

func testBudgetCRUD(t *testing.T, s store.Store) {
	ctx := t.Context()
	b := store.Budget{Project: store.DefaultProject, Period: store.PeriodMonth, Amount: 12.5, OnExhausted: store.OnExhaustedRefuse}
	if err := s.PutBudget(ctx, b); err != nil {
		t.Fatalf("PutBudget: %v", err)
	}
	b.Amount, b.OnExhausted, b.FallbackModel, b.FallbackAllowance = 20, store.OnExhaustedFallback, "small", 2.5
	if err := s.PutBudget(ctx, b); err != nil {
		t.Fatalf("PutBudget replace: %v", err)
	}
	if err := s.PutBudget(ctx, store.Budget{Project: store.DefaultProject, Period: store.PeriodDay, Amount: 1, OnExhausted: store.OnExhaustedRefuse}); err != nil {
		t.Fatalf("PutBudget day: %v", err)
	}
	got, err := s.GetBudget(ctx, store.DefaultProject, store.PeriodMonth)
	if err != nil {
		t.Fatalf("GetBudget: %v", err)
	}
	if got.Amount != 20 || got.OnExhausted != store.OnExhaustedFallback || got.FallbackModel != "small" || got.FallbackAllowance != 2.5 {
		t.Errorf("GetBudget = %+v", got)
	}
	list, err := s.ListBudgets(ctx, store.DefaultProject)
	if err != nil || len(list) != 2 || list[0].Period != store.PeriodDay || list[1].Period != store.PeriodMonth {
		t.Errorf("ListBudgets = %+v, %v", list, err)
	}
	bad := []store.Budget{
		{Project: store.DefaultProject, Period: "week", Amount: 1, OnExhausted: store.OnExhaustedRefuse},
		{Project: store.DefaultProject, Period: store.PeriodDay, Amount: -1, OnExhausted: store.OnExhaustedRefuse},
		{Project: store.DefaultProject, Period: store.PeriodDay, Amount: 1, OnExhausted: store.OnExhaustedFallback},
		{Project: store.DefaultProject, Period: store.PeriodDay, Amount: 1, OnExhausted: "shrug"},
		{Project: store.DefaultProject, Period: store.PeriodDay, Amount: 1, OnExhausted: store.OnExhaustedRefuse, FallbackAllowance: 1},
		{Project: store.DefaultProject, Period: store.PeriodDay, Amount: 1, OnExhausted: store.OnExhaustedFallback, FallbackModel: "small", FallbackAllowance: -1},
	}
	for _, b := range bad {
		if err := s.PutBudget(ctx, b); err == nil {
			t.Errorf("PutBudget(%+v) succeeded", b)
		}
	}
	if err := s.PutBudget(ctx, store.Budget{Project: "ghost", Period: store.PeriodDay, Amount: 1, OnExhausted: store.OnExhaustedRefuse}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("PutBudget for a missing project = %v, want ErrNotFound", err)
	}
	if err := s.DeleteBudget(ctx, store.DefaultProject, store.PeriodDay); err != nil {
		t.Fatalf("DeleteBudget: %v", err)
	}
	if err := s.DeleteBudget(ctx, store.DefaultProject, store.PeriodDay); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second DeleteBudget = %v, want ErrNotFound", err)
	}
}

func testUsers(t *testing.T, s store.Store) {
	ctx := t.Context()
	if err := s.CreateUser(ctx, store.User{ID: "u1", Email: "ada@example.com", PasswordHash: "$2a$hash"}); err != nil {
		t.Fatalf("CreateUser: %v", err)
	}
	if err := s.CreateUser(ctx, store.User{ID: "u2", Email: "ada@example.com", PasswordHash: "x"}); !errors.Is(err, store.ErrAlreadyExists) {
		t.Errorf("CreateUser with a taken email = %v, want ErrAlreadyExists", err)
	}
	for _, id := range []string{"u1", "ada@example.com"} {
		u, err := s.GetUser(ctx, id)
		if err != nil || u.ID != "u1" || u.Admin {
			t.Errorf("GetUser(%q) = %+v, %v", id, u, err)
		}
	}
	if err := s.SetUserAdmin(ctx, "u1", true); err != nil {
		t.Fatalf("SetUserAdmin: %v", err)
	}
	if u, _ := s.GetUser(ctx, "u1"); !u.Admin {
		t.Error("SetUserAdmin(true) did not stick")
	}
	if err := s.SetUserAdmin(ctx, "ghost", true); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SetUserAdmin unknown = %v, want ErrNotFound", err)
	}
	if _, err := s.GetUser(ctx, "ghost"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetUser unknown = %v, want ErrNotFound", err)
	}
	if list, err := s.ListUsers(ctx); err != nil || len(list) != 1 {
		t.Errorf("ListUsers = %+v, %v", list, err)
	}
}

func testUsageInsertAndQuery(t *testing.T, s store.Store) {
	ctx := t.Context()
	day1 := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	day2 := day1.Add(24 * time.Hour)
	rows := []store.UsageRow{
		{At: day1, RequestID: "r1", Project: "a", KeyID: "k1", Model: "m1", Replica: "m1-1", Endpoint: "/v1/chat/completions",
			Status: 200, PromptTokens: 10, CompletionTokens: 5, Cost: 0.25, Latency: 1500 * time.Microsecond, TTFT: 300 * time.Microsecond, Stream: true},
		{At: day1.Add(time.Hour), RequestID: "r2", Project: "a", KeyID: "k1", Model: "m1", Status: 200, PromptTokens: 1, CompletionTokens: 2, Cost: 0.5},
		{At: day2, RequestID: "r3", Project: "a", KeyID: "k2", Model: "m2", Status: 402},
		{At: day2, RequestID: "r4", Project: "b", KeyID: "k3", Model: "m1", Status: 200, PromptTokens: 3, CompletionTokens: 4, Cost: 1},
	}
	if err := s.InsertUsage(ctx, rows); err != nil {
		t.Fatalf("InsertUsage: %v", err)
	}
	if err := s.InsertUsage(ctx, nil); err != nil {
		t.Errorf("InsertUsage(nil) = %v", err)
	}
	got, err := s.ListUsage(ctx, store.UsageQuery{}, 0, 0)
	if err != nil || len(got) != 4 {
		t.Fatalf("ListUsage = %d rows, %v", len(got), err)
	}
	first := got[0]
	if first.ID == 0 || first.RequestID != "r1" || !first.At.Equal(day1) || first.Replica != "m1-1" || first.Status != 200 ||
		first.PromptTokens != 10 || first.CompletionTokens != 5 || first.Cost != 0.25 || first.Latency != 1500*time.Microsecond ||
		first.TTFT != 300*time.Microsecond || !first.Stream || first.Endpoint != "/v1/chat/completions" {
		t.Errorf("first row = %+v", first)
	}
	page, err := s.ListUsage(ctx, store.UsageQuery{Project: "a"}, got[0].ID, 1)
	if err != nil || len(page) != 1 || page[0].RequestID != "r2" {
		t.Errorf("ListUsage page = %+v, %v", page, err)
	}

	spent, err := s.ProjectSpend(ctx, "a", day1.Add(30*time.Minute))
	if err != nil || spent != 0.5 {
		t.Errorf("ProjectSpend(a, since r2) = %v, %v; want 0.5", spent, err)
	}
	if spent, _ := s.ProjectSpend(ctx, "nobody", time.Time{}); spent != 0 {
		t.Errorf("ProjectSpend of a project without rows = %v", spent)
	}

	totals, err := s.SummarizeUsage(ctx, store.UsageQuery{})
	if err != nil {
		t.Fatalf("SummarizeUsage: %v", err)
	}
	want := []store.UsageTotal{
		{Project: "a", Model: "m1", Requests: 2, PromptTokens: 11, CompletionTokens: 7, Cost: 0.75},
		{Project: "a", Model: "m2", Requests: 1},
		{Project: "b", Model: "m1", Requests: 1, PromptTokens: 3, CompletionTokens: 4, Cost: 1},
	}
	if !slices.Equal(totals, want) {
		t.Errorf("SummarizeUsage =\n%+v\nwant\n%+v", totals, want)
	}
	byDay, err := s.SummarizeUsage(ctx, store.UsageQuery{Model: "m1", ByDay: true})
	if err != nil {
		t.Fatalf("SummarizeUsage by day: %v", err)
	}
	midnight1 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	wantDay := []store.UsageTotal{
		{Project: "a", Model: "m1", Day: midnight1, Requests: 2, PromptTokens: 11, CompletionTokens: 7, Cost: 0.75},
		{Project: "b", Model: "m1", Day: midnight1.Add(24 * time.Hour), Requests: 1, PromptTokens: 3, CompletionTokens: 4, Cost: 1},
	}
	if !slices.Equal(byDay, wantDay) {
		t.Errorf("SummarizeUsage by day =\n%+v\nwant\n%+v", byDay, wantDay)
	}
	inDay2, err := s.SummarizeUsage(ctx, store.UsageQuery{Since: day2, Until: day2.Add(time.Second)})
	if err != nil || len(inDay2) != 2 {
		t.Errorf("SummarizeUsage in a window = %+v, %v", inDay2, err)
	}
}

// testUsageLargeBatch checks that a batch bigger than one INSERT statement
// goes in whole.
func testUsageLargeBatch(t *testing.T, s store.Store) {
	ctx := t.Context()
	rows := make([]store.UsageRow, 1234)
	at := time.Now().UTC()
	for i := range rows {
		rows[i] = store.UsageRow{At: at, RequestID: fmt.Sprintf("r%d", i), Project: "p", Model: "m", Status: 200, CompletionTokens: 1, Cost: 0.001}
	}
	if err := s.InsertUsage(ctx, rows); err != nil {
		t.Fatalf("InsertUsage: %v", err)
	}
	totals, err := s.SummarizeUsage(ctx, store.UsageQuery{Project: "p"})
	if err != nil || len(totals) != 1 || totals[0].Requests != 1234 || totals[0].CompletionTokens != 1234 {
		t.Errorf("SummarizeUsage = %+v, %v", totals, err)
	}
	last, err := s.ListUsage(ctx, store.UsageQuery{}, 0, 0)
	if err != nil || len(last) != 1234 || last[1233].RequestID != "r1233" {
		t.Errorf("ListUsage order broken: %d rows, %v", len(last), err)
	}
}

// testProjectDeleteRacesKeyCreate: creating a key in a project while the
// project is deleted never leaves a live key in a project that is gone.
func testProjectDeleteRacesKeyCreate(t *testing.T, s store.Store) {
	ctx := t.Context()
	for round := range 20 {
		name := fmt.Sprintf("race-%d", round)
		if err := s.CreateProject(ctx, store.Project{Name: name}); err != nil {
			t.Fatal(err)
		}
		_, prefix, hash := spec.NewAPIKey()
		var wg sync.WaitGroup
		var keyErr, delErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			keyErr = s.CreateAPIKey(ctx, store.APIKey{ID: "k-" + name, Prefix: prefix, Hash: hash, Project: name})
		}()
		go func() {
			defer wg.Done()
			delErr = s.DeleteProject(ctx, name)
		}()
		wg.Wait()
		if keyErr == nil && delErr == nil {
			t.Fatalf("round %d: both the key and the project's deletion succeeded: a live key in a deleted project", round)
		}
		if keyErr != nil && !errors.Is(keyErr, store.ErrNotFound) {
			t.Fatalf("round %d: creating the key: %v", round, keyErr)
		}
		if delErr != nil && !errors.Is(delErr, store.ErrInUse) {
			t.Fatalf("round %d: deleting the project: %v", round, delErr)
		}
	}
}
