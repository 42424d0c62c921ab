package manage

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/models"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/spec"
)

var tenancyNow = time.Date(2026, 3, 15, 10, 30, 0, 0, time.UTC)

// newTenancyService is a service over a fresh SQLite store with two models
// (one of them priced when priced is true) and the given default price.
func newTenancyService(t *testing.T, priced bool, def *spec.Pricing) (*Service, store.Store) {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "llmgw.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	big := spec.Model{Name: "big", Aliases: []string{"large"}, Source: "sim://b", Scaling: spec.Scaling{Max: 1},
		Profiles: []spec.Profile{{Name: "p", Engine: "sim", GPUClass: "h100-80g", TP: 1}}}
	small := big
	small.Name, small.Aliases, small.Source = "small", nil, "sim://s"
	if priced {
		big.Pricing = &spec.Pricing{PromptPer1K: 1, CompletionPer1K: 2}
	}
	reg, err := models.New([]spec.Model{big, small}, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Version: "test", Fleet: fleet.New(), Catalog: reg, Tokens: st, Store: st, DefaultPrice: def,
		Now: func() time.Time { return tenancyNow }})
	return s, st
}

// wantCode fails unless err has the code and its message says every want.
func wantCode(t *testing.T, err error, c codes.Code, want ...string) {
	t.Helper()
	if status.Code(err) != c {
		t.Fatalf("err = %v, want code %v", err, c)
	}
	for _, w := range want {
		if !strings.Contains(status.Convert(err).Message(), w) {
			t.Fatalf("message %q does not say %q", status.Convert(err).Message(), w)
		}
	}
}

func TestProjectCRUD(t *testing.T) {
	s, _ := newTenancyService(t, true, nil)
	ctx := context.Background()
	p, err := s.CreateProject(ctx, &managev1.CreateProjectRequest{Project: &managev1.Project{Name: "team-a", Rpm: 60, Tpm: 1000, AllowedModels: []string{"small", "big", "small"}}})
	if err != nil {
		t.Fatal(err)
	}
	if p.GetRpm() != 60 || p.GetTpm() != 1000 || strings.Join(p.GetAllowedModels(), ",") != "big,small" || p.GetCreatedUnixMs() == 0 || len(p.GetWarnings()) != 0 {
		t.Fatalf("created = %v (allowed models sorted and deduplicated, no warnings)", p)
	}
	_, err = s.CreateProject(ctx, &managev1.CreateProjectRequest{Project: &managev1.Project{Name: "team-a"}})
	wantCode(t, err, codes.AlreadyExists, `project "team-a" already exists`)

	p, err = s.UpdateProject(ctx, &managev1.UpdateProjectRequest{Project: &managev1.Project{Name: "team-a", Rpm: 5, AllowedModels: []string{"large", "nope"}}})
	if err != nil {
		t.Fatal(err)
	}
	// An alias is a fine way to name a model; only an unknown name warns.
	if p.GetRpm() != 5 || p.GetTpm() != 0 || len(p.GetWarnings()) != 1 ||
		!strings.Contains(p.GetWarnings()[0], `"nope" is not in the catalog`) {
		t.Fatalf("updated = %v", p)
	}
	_, err = s.UpdateProject(ctx, &managev1.UpdateProjectRequest{Project: &managev1.Project{Name: "ghost"}})
	wantCode(t, err, codes.NotFound, "ghost")

	list, err := s.ListProjects(ctx, &managev1.ListProjectsRequest{})
	if err != nil || len(list.GetProjects()) != 2 || list.GetProjects()[0].GetName() != store.DefaultProject {
		t.Fatalf("list = %v, %v (default and team-a)", list, err)
	}

	key, err := s.CreateApiKey(ctx, &managev1.CreateApiKeyRequest{Key: &managev1.ApiKey{Project: "team-a", Name: "ci"}})
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := s.GetProject(ctx, &managev1.GetProjectRequest{Name: "team-a"}); p.GetLiveKeys() != 1 {
		t.Fatalf("live keys = %d, want 1", p.GetLiveKeys())
	}
	_, err = s.DeleteProject(ctx, &managev1.DeleteProjectRequest{Name: "team-a"})
	wantCode(t, err, codes.FailedPrecondition, "team-a", "revoke them first")
	if _, err := s.RevokeApiKey(ctx, &managev1.RevokeApiKeyRequest{Id: key.GetKey().GetId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteProject(ctx, &managev1.DeleteProjectRequest{Name: "team-a"}); err != nil {
		t.Fatalf("delete after revoking its key: %v", err)
	}
	_, err = s.GetProject(ctx, &managev1.GetProjectRequest{Name: "team-a"})
	wantCode(t, err, codes.NotFound, "team-a")
	_, err = s.DeleteProject(ctx, &managev1.DeleteProjectRequest{Name: store.DefaultProject})
	wantCode(t, err, codes.FailedPrecondition, "default project always exists")
}

func TestProjectInvalid(t *testing.T) {
	s, _ := newTenancyService(t, true, nil)
	tests := []struct {
		name string
		p    *managev1.Project
		want string
	}{
		{"missing", nil, "project: is required"},
		{"no name", &managev1.Project{}, "project name: is required"},
		{"slash", &managev1.Project{Name: "a/b"}, `project name: "a/b"`},
		{"negative rpm", &managev1.Project{Name: "a", Rpm: -1}, "project a rpm: must not be negative"},
		{"negative tpm", &managev1.Project{Name: "a", Tpm: -5}, "project a tpm: must not be negative"},
		{"empty model", &managev1.Project{Name: "a", AllowedModels: []string{"big", " "}}, "project a allowed_models[1]: is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.CreateProject(context.Background(), &managev1.CreateProjectRequest{Project: tt.p})
			wantCode(t, err, codes.InvalidArgument, tt.want)
		})
	}
}

func TestAPIKeys(t *testing.T) {
	s, st := newTenancyService(t, true, nil)
	ctx := context.Background()
	if _, err := s.CreateProject(ctx, &managev1.CreateProjectRequest{Project: &managev1.Project{Name: "p1"}}); err != nil {
		t.Fatal(err)
	}
	exp := tenancyNow.Add(24 * time.Hour)
	created, err := s.CreateApiKey(ctx, &managev1.CreateApiKeyRequest{Key: &managev1.ApiKey{Project: "p1", Name: "ci", Rpm: 10, Tpm: 100, ExpiresUnixMs: exp.UnixMilli()}})
	if err != nil {
		t.Fatal(err)
	}
	k := created.GetKey()
	if _, _, err := spec.ParseAPIKey(created.GetSecret()); err != nil || !strings.HasPrefix(created.GetSecret(), k.GetPrefix()) {
		t.Fatalf("secret %q is not a well-formed key with prefix %q: %v", created.GetSecret(), k.GetPrefix(), err)
	}
	if k.GetProject() != "p1" || k.GetRpm() != 10 || k.GetTpm() != 100 || k.GetExpiresUnixMs() != exp.UnixMilli() {
		t.Fatalf("key = %v", k)
	}
	stored, err := st.LookupAPIKey(ctx, spec.HashSecret(created.GetSecret()))
	if err != nil || stored.ID != k.GetId() {
		t.Fatalf("the store does not find the key by the secret's hash: %v, %v", stored, err)
	}

	// A client-supplied secret: accepted, stored hashed, never sent back.
	plain, _, _ := spec.NewAPIKey()
	sup, err := s.CreateApiKey(ctx, &managev1.CreateApiKeyRequest{Key: &managev1.ApiKey{Name: "tf"}, Secret: plain})
	if err != nil {
		t.Fatal(err)
	}
	if sup.GetSecret() != "" || sup.GetKey().GetProject() != store.DefaultProject || !strings.HasPrefix(plain, sup.GetKey().GetPrefix()) {
		t.Fatalf("supplied-secret key = %v (secret must not be echoed; default project)", sup)
	}
	if got, err := st.LookupAPIKey(ctx, spec.HashSecret(plain)); err != nil || got.ID != sup.GetKey().GetId() {
		t.Fatalf("supplied secret does not authenticate: %v", err)
	}
	_, err = s.CreateApiKey(ctx, &managev1.CreateApiKeyRequest{Key: &managev1.ApiKey{Name: "again"}, Secret: plain})
	wantCode(t, err, codes.AlreadyExists, "already in use")

	got, err := s.GetApiKey(ctx, &managev1.GetApiKeyRequest{Id: k.GetId()})
	if err != nil || got.GetName() != "ci" {
		t.Fatalf("get = %v, %v", got, err)
	}
	upd, err := s.UpdateApiKey(ctx, &managev1.UpdateApiKeyRequest{Id: k.GetId(), Rpm: 1})
	if err != nil || upd.GetRpm() != 1 || upd.GetTpm() != 0 || upd.GetName() != "ci" {
		t.Fatalf("update = %v, %v", upd, err)
	}
	list, err := s.ListApiKeys(ctx, &managev1.ListApiKeysRequest{Project: "p1"})
	if err != nil || len(list.GetKeys()) != 1 || list.GetKeys()[0].GetId() != k.GetId() {
		t.Fatalf("list p1 = %v, %v", list, err)
	}
	rev, err := s.RevokeApiKey(ctx, &managev1.RevokeApiKeyRequest{Id: k.GetId()})
	if err != nil || rev.GetRevokedUnixMs() == 0 {
		t.Fatalf("revoke = %v, %v", rev, err)
	}
	if list, _ := s.ListApiKeys(ctx, &managev1.ListApiKeysRequest{Project: "p1"}); len(list.GetKeys()) != 0 {
		t.Fatalf("revoked key still listed without include_revoked: %v", list)
	}
	if list, _ := s.ListApiKeys(ctx, &managev1.ListApiKeysRequest{Project: "p1", IncludeRevoked: true}); len(list.GetKeys()) != 1 {
		t.Fatalf("include_revoked lists %v", list)
	}
	_, err = s.ListApiKeys(ctx, &managev1.ListApiKeysRequest{Project: "ghost"})
	wantCode(t, err, codes.NotFound, "ghost")
}

func TestAPIKeyInvalid(t *testing.T) {
	s, _ := newTenancyService(t, true, nil)
	good, _, _ := spec.NewAPIKey()
	tests := []struct {
		name string
		req  *managev1.CreateApiKeyRequest
		code codes.Code
		want string
	}{
		{"no key", &managev1.CreateApiKeyRequest{}, codes.InvalidArgument, "key: is required"},
		{"no name", &managev1.CreateApiKeyRequest{Key: &managev1.ApiKey{}}, codes.InvalidArgument, "key name: is required"},
		{"negative tpm", &managev1.CreateApiKeyRequest{Key: &managev1.ApiKey{Name: "k", Tpm: -1}}, codes.InvalidArgument, "key k tpm"},
		{"expired", &managev1.CreateApiKeyRequest{Key: &managev1.ApiKey{Name: "k", ExpiresUnixMs: tenancyNow.Add(-time.Hour).UnixMilli()}}, codes.InvalidArgument, "key k expires_at: 2026-03-15T09:30:00Z is not in the future"},
		{"unknown project", &managev1.CreateApiKeyRequest{Key: &managev1.ApiKey{Name: "k", Project: "ghost"}}, codes.NotFound, `project "ghost" does not exist`},
		{"short secret", &managev1.CreateApiKeyRequest{Key: &managev1.ApiKey{Name: "k"}, Secret: good[:30]}, codes.InvalidArgument, "key k secret: an API key is 58 characters long"},
		{"admin token as secret", &managev1.CreateApiKeyRequest{Key: &managev1.ApiKey{Name: "k"}, Secret: "llmgwadm-" + good[9:]}, codes.InvalidArgument, `starts with "llmgw-"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.CreateApiKey(context.Background(), tt.req)
			wantCode(t, err, tt.code, tt.want)
			if tt.req.GetSecret() != "" && strings.Contains(err.Error(), tt.req.GetSecret()) {
				t.Fatal("the error quotes the secret")
			}
		})
	}
	for _, id := range []string{"key-nope"} {
		_, err := s.GetApiKey(context.Background(), &managev1.GetApiKeyRequest{Id: id})
		wantCode(t, err, codes.NotFound, id)
		_, err = s.UpdateApiKey(context.Background(), &managev1.UpdateApiKeyRequest{Id: id, Rpm: 1})
		wantCode(t, err, codes.NotFound, id)
		_, err = s.RevokeApiKey(context.Background(), &managev1.RevokeApiKeyRequest{Id: id})
		wantCode(t, err, codes.NotFound, id)
	}
}

func TestBudgets(t *testing.T) {
	s, st := newTenancyService(t, true, nil)
	ctx := context.Background()
	if _, err := s.CreateProject(ctx, &managev1.CreateProjectRequest{Project: &managev1.Project{Name: "p1"}}); err != nil {
		t.Fatal(err)
	}
	// Spend before this month (not counted), this month and today.
	rows := []store.UsageRow{
		{At: time.Date(2026, 2, 20, 0, 0, 0, 0, time.UTC), Project: "p1", Model: "big", Cost: 100},
		{At: time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC), Project: "p1", Model: "big", Cost: 3},
		{At: tenancyNow.Add(-time.Hour), Project: "p1", Model: "big", Cost: 1.5},
	}
	if err := st.InsertUsage(ctx, rows); err != nil {
		t.Fatal(err)
	}
	b, err := s.PutBudget(ctx, &managev1.PutBudgetRequest{Budget: &managev1.Budget{Project: "p1", Period: "month", Amount: 50}})
	if err != nil {
		t.Fatal(err)
	}
	if b.GetOnExhausted() != "refuse" || b.GetSpent() != 4.5 || b.GetResetsUnixMs() != time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC).UnixMilli() || len(b.GetWarnings()) != 0 {
		t.Fatalf("month budget = %v (refuse by default, 4.5 spent this month, resets April 1st, no warning)", b)
	}
	b, err = s.PutBudget(ctx, &managev1.PutBudgetRequest{Budget: &managev1.Budget{Project: "p1", Period: "day", Amount: 2, OnExhausted: "fallback", FallbackModel: "small"}})
	if err != nil {
		t.Fatal(err)
	}
	if b.GetSpent() != 1.5 || b.GetFallbackModel() != "small" || b.GetResetsUnixMs() != time.Date(2026, 3, 16, 0, 0, 0, 0, time.UTC).UnixMilli() {
		t.Fatalf("day budget = %v", b)
	}
	// A fallback named by an alias is stored by the model's own name, with
	// its allowance; what was spent beyond the amount is shown.
	b, err = s.PutBudget(ctx, &managev1.PutBudgetRequest{Budget: &managev1.Budget{Project: "p1", Period: "day", Amount: 1,
		OnExhausted: "fallback", FallbackModel: "large", FallbackAllowance: 0.75}})
	if err != nil {
		t.Fatal(err)
	}
	if b.GetFallbackModel() != "big" || b.GetFallbackAllowance() != 0.75 || b.GetFallbackSpent() != 0.5 {
		t.Fatalf("day budget with a fallback alias = %v; want fallback big, allowance 0.75, 0.5 spent beyond the amount", b)
	}
	if got, err := st.GetBudget(ctx, "p1", "day"); err != nil || got.FallbackModel != "big" || got.FallbackAllowance != 0.75 {
		t.Fatalf("stored day budget = %+v, %v", got, err)
	}
	b, err = s.PutBudget(ctx, &managev1.PutBudgetRequest{Budget: &managev1.Budget{Project: "p1", Period: "total", Amount: 1000}})
	if err != nil || b.GetSpent() != 104.5 || b.GetResetsUnixMs() != 0 {
		t.Fatalf("total budget = %v, %v", b, err)
	}
	// Replacing keeps one budget per period.
	if _, err := s.PutBudget(ctx, &managev1.PutBudgetRequest{Budget: &managev1.Budget{Project: "p1", Period: "total", Amount: 2000}}); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListBudgets(ctx, &managev1.ListBudgetsRequest{Project: "p1"})
	if err != nil || len(list.GetBudgets()) != 3 {
		t.Fatalf("list = %v, %v", list, err)
	}
	got, err := s.GetBudget(ctx, &managev1.GetBudgetRequest{Project: "p1", Period: "total"})
	if err != nil || got.GetAmount() != 2000 {
		t.Fatalf("get = %v, %v", got, err)
	}
	if _, err := s.DeleteBudget(ctx, &managev1.DeleteBudgetRequest{Project: "p1", Period: "total"}); err != nil {
		t.Fatal(err)
	}
	_, err = s.GetBudget(ctx, &managev1.GetBudgetRequest{Project: "p1", Period: "total"})
	wantCode(t, err, codes.NotFound, "budget p1/total")
	_, err = s.DeleteBudget(ctx, &managev1.DeleteBudgetRequest{Project: "p1", Period: "total"})
	wantCode(t, err, codes.NotFound, "budget p1/total")
}

func TestBudgetInvalid(t *testing.T) {
	s, _ := newTenancyService(t, true, nil)
	tests := []struct {
		name string
		b    *managev1.Budget
		code codes.Code
		want string
	}{
		{"no project", &managev1.Budget{Period: "day"}, codes.InvalidArgument, "budget project: is required"},
		{"no period", &managev1.Budget{Project: "default"}, codes.InvalidArgument, "period: is required"},
		{"bad period", &managev1.Budget{Project: "default", Period: "week"}, codes.InvalidArgument, `budget default/week period: "week" is not a period`},
		{"negative", &managev1.Budget{Project: "default", Period: "day", Amount: -1}, codes.InvalidArgument, "budget default/day amount"},
		{"infinite", &managev1.Budget{Project: "default", Period: "day", Amount: math.Inf(1)}, codes.InvalidArgument, "budget default/day amount: must be a finite number of at least 0, got +Inf"},
		{"bad on_exhausted", &managev1.Budget{Project: "default", Period: "day", OnExhausted: "block"}, codes.InvalidArgument, `on_exhausted: "block" is not refuse or fallback`},
		{"fallback without model", &managev1.Budget{Project: "default", Period: "day", OnExhausted: "fallback"}, codes.InvalidArgument, "fallback_model: is required when on_exhausted is fallback"},
		{"model without fallback", &managev1.Budget{Project: "default", Period: "day", FallbackModel: "small"}, codes.InvalidArgument, "fallback_model: is only used when on_exhausted is fallback"},
		{"unknown fallback", &managev1.Budget{Project: "default", Period: "day", OnExhausted: "fallback", FallbackModel: "tiny"}, codes.FailedPrecondition, `fallback_model: model "tiny" is not in the catalog`},
		{"unknown project", &managev1.Budget{Project: "ghost", Period: "day", Amount: 1}, codes.NotFound, "budget ghost/day"},
		{"negative allowance", &managev1.Budget{Project: "default", Period: "day", OnExhausted: "fallback", FallbackModel: "small", FallbackAllowance: -1},
			codes.InvalidArgument, "budget default/day fallback_allowance: must be a finite number of at least 0, got -1"},
		{"NaN allowance", &managev1.Budget{Project: "default", Period: "day", OnExhausted: "fallback", FallbackModel: "small", FallbackAllowance: math.NaN()},
			codes.InvalidArgument, "fallback_allowance: must be a finite number of at least 0, got NaN"},
		{"allowance without fallback", &managev1.Budget{Project: "default", Period: "day", FallbackAllowance: 1},
			codes.InvalidArgument, "fallback_allowance: is only used when on_exhausted is fallback"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.PutBudget(context.Background(), &managev1.PutBudgetRequest{Budget: tt.b})
			wantCode(t, err, tt.code, tt.want)
		})
	}
}

func TestBudgetWarnings(t *testing.T) {
	tests := []struct {
		name    string
		priced  bool
		def     *spec.Pricing
		allowed []string
		budget  *managev1.Budget
		want    []string
	}{
		{name: "a model is priced", priced: true, budget: &managev1.Budget{Period: "day", Amount: 1}},
		{name: "only the default price", def: &spec.Pricing{PromptPer1K: 0.1}, budget: &managev1.Budget{Period: "day", Amount: 1}},
		{name: "no price anywhere", budget: &managev1.Budget{Period: "day", Amount: 1},
			want: []string{"no model the project may use has a price and auth.default_price is unset: this budget never binds"}},
		{name: "a zero default price", def: &spec.Pricing{}, budget: &managev1.Budget{Period: "day", Amount: 1},
			want: []string{"auth.default_price is zero: this budget never binds"}},
		{name: "the priced model is not allowed", priced: true, allowed: []string{"small"}, budget: &managev1.Budget{Period: "day", Amount: 1},
			want: []string{"never binds"}},
		{name: "fallback not allowed", priced: true, allowed: []string{"big"},
			budget: &managev1.Budget{Period: "month", Amount: 1, OnExhausted: "fallback", FallbackModel: "small"},
			want:   []string{`fallback model "small" is not among the project's allowed_models`}},
		{name: "fallback allowed by its alias", priced: true, allowed: []string{"large"},
			budget: &managev1.Budget{Period: "month", Amount: 1, OnExhausted: "fallback", FallbackModel: "big", FallbackAllowance: 1}},
		{name: "priced fallback without allowance", priced: true,
			budget: &managev1.Budget{Period: "month", Amount: 1, OnExhausted: "fallback", FallbackModel: "large"},
			want:   []string{`fallback model "big" has a price and fallback_allowance is 0: once the budget is spent, requests are refused (402)`}},
		{name: "free fallback without allowance", priced: true,
			budget: &managev1.Budget{Period: "month", Amount: 1, OnExhausted: "fallback", FallbackModel: "small"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newTenancyService(t, tt.priced, tt.def)
			ctx := context.Background()
			if _, err := s.CreateProject(ctx, &managev1.CreateProjectRequest{Project: &managev1.Project{Name: "p", AllowedModels: tt.allowed}}); err != nil {
				t.Fatal(err)
			}
			tt.budget.Project = "p"
			b, err := s.PutBudget(ctx, &managev1.PutBudgetRequest{Budget: tt.budget})
			if err != nil {
				t.Fatal(err)
			}
			if len(b.GetWarnings()) != len(tt.want) {
				t.Fatalf("warnings = %q, want %d", b.GetWarnings(), len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.Contains(b.GetWarnings()[i], w) {
					t.Errorf("warning %q does not say %q", b.GetWarnings()[i], w)
				}
			}
		})
	}
}

func TestListPrices(t *testing.T) {
	s, _ := newTenancyService(t, true, &spec.Pricing{PromptPer1K: 0.1, CompletionPer1K: 0.2})
	got, err := s.ListPrices(context.Background(), &managev1.ListPricesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetDefaultPrice().GetPromptPer_1K() != 0.1 || len(got.GetModels()) != 2 {
		t.Fatalf("prices = %v", got)
	}
	want := map[string]struct {
		source  string
		prompt  float64
		complet float64
	}{"big": {"model", 1, 2}, "small": {"default", 0.1, 0.2}}
	for _, m := range got.GetModels() {
		w := want[m.GetModel()]
		if m.GetSource() != w.source || m.GetPricing().GetPromptPer_1K() != w.prompt || m.GetPricing().GetCompletionPer_1K() != w.complet {
			t.Errorf("%s: %v, want %+v", m.GetModel(), m, w)
		}
	}
	s2, _ := newTenancyService(t, false, nil)
	got, _ = s2.ListPrices(context.Background(), &managev1.ListPricesRequest{})
	if got.GetDefaultPrice() != nil || got.GetModels()[0].GetSource() != "none" {
		t.Fatalf("unpriced = %v", got)
	}
}

func TestUsage(t *testing.T) {
	s, st := newTenancyService(t, true, nil)
	ctx := context.Background()
	day1 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	var rows []store.UsageRow
	for i := range 5 {
		rows = append(rows, store.UsageRow{At: day1.Add(time.Duration(i) * 12 * time.Hour), RequestID: "r", Project: "default", Model: "big",
			Status: 200, PromptTokens: 10, CompletionTokens: 5, Cost: 1, Latency: 1500 * time.Millisecond, TTFT: 200 * time.Millisecond})
	}
	rows = append(rows, store.UsageRow{At: day1, Project: "default", Model: "small", Status: 429})
	if err := st.InsertUsage(ctx, rows); err != nil {
		t.Fatal(err)
	}
	sum, err := s.SummarizeUsage(ctx, &managev1.SummarizeUsageRequest{Filter: &managev1.UsageFilter{Model: "big"}})
	if err != nil || len(sum.GetTotals()) != 1 || sum.GetTotals()[0].GetRequests() != 5 || sum.GetTotals()[0].GetPromptTokens() != 50 || sum.GetTotals()[0].GetCost() != 5 {
		t.Fatalf("summary = %v, %v", sum, err)
	}
	byDay, err := s.SummarizeUsage(ctx, &managev1.SummarizeUsageRequest{Filter: &managev1.UsageFilter{Model: "big"}, ByDay: true})
	if err != nil || len(byDay.GetTotals()) != 3 || byDay.GetTotals()[0].GetDay() != "2026-03-01" || byDay.GetTotals()[0].GetRequests() != 2 {
		t.Fatalf("by day = %v, %v", byDay, err)
	}
	since, err := s.SummarizeUsage(ctx, &managev1.SummarizeUsageRequest{Filter: &managev1.UsageFilter{
		SinceUnixMs: day1.Add(24 * time.Hour).UnixMilli(), UntilUnixMs: day1.Add(48 * time.Hour).UnixMilli()}})
	if err != nil || len(since.GetTotals()) != 1 || since.GetTotals()[0].GetRequests() != 2 {
		t.Fatalf("since/until = %v, %v", since, err)
	}
	_, err = s.SummarizeUsage(ctx, &managev1.SummarizeUsageRequest{Filter: &managev1.UsageFilter{SinceUnixMs: 2000, UntilUnixMs: 1000}})
	wantCode(t, err, codes.InvalidArgument, "usage until")

	// Paging: 6 rows by 4.
	page, err := s.ListUsage(ctx, &managev1.ListUsageRequest{PageSize: 4})
	if err != nil || len(page.GetRows()) != 4 || page.GetNextPageToken() == "" {
		t.Fatalf("page 1 = %v, %v", page, err)
	}
	r := page.GetRows()[0]
	if r.GetLatencyMs() != 1500 || r.GetTtftMs() != 200 || r.GetStatus() != 200 || r.GetModel() != "big" {
		t.Fatalf("row = %v", r)
	}
	page2, err := s.ListUsage(ctx, &managev1.ListUsageRequest{PageSize: 4, PageToken: page.GetNextPageToken()})
	if err != nil || len(page2.GetRows()) != 2 || page2.GetNextPageToken() != "" || page2.GetRows()[0].GetId() <= page.GetRows()[3].GetId() {
		t.Fatalf("page 2 = %v, %v", page2, err)
	}
	_, err = s.ListUsage(ctx, &managev1.ListUsageRequest{PageToken: "abc"})
	wantCode(t, err, codes.InvalidArgument, "page_token")
}

func TestModelPricingKeepsGeneration(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	created, err := s.CreateModel(ctx, &managev1.CreateModelRequest{Model: apiModel("m1")})
	if err != nil {
		t.Fatal(err)
	}
	priced := apiModel("m1")
	priced.Pricing = &managev1.Pricing{PromptPer_1K: 0.2, CompletionPer_1K: 0.4}
	got, err := s.UpdateModel(ctx, &managev1.UpdateModelRequest{Model: priced})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetPricing().GetCompletionPer_1K() != 0.4 || got.GetGeneration() != created.GetGeneration() {
		t.Fatalf("updated = %v: pricing must be stored and must not change the generation (%s)", got, created.GetGeneration())
	}
	back, err := s.GetModel(ctx, &managev1.GetModelRequest{Name: "m1"})
	if err != nil || back.GetPricing().GetPromptPer_1K() != 0.2 {
		t.Fatalf("get = %v, %v", back, err)
	}
}

// TestTenancyChangesReachAdmission: every change to a project or its
// budgets is announced, so admission does not wait for its cache.
func TestTenancyChangesReachAdmission(t *testing.T) {
	s, _ := newTenancyService(t, true, nil)
	var changed []string
	s.opts.TenancyChanged = func(project string) { changed = append(changed, project) }
	ctx := t.Context()
	if _, err := s.CreateProject(ctx, &managev1.CreateProjectRequest{Project: &managev1.Project{Name: "p"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateProject(ctx, &managev1.UpdateProjectRequest{Project: &managev1.Project{Name: "p", Rpm: 5}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutBudget(ctx, &managev1.PutBudgetRequest{Budget: &managev1.Budget{Project: "p", Period: "day", Amount: 1, OnExhausted: "refuse"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteBudget(ctx, &managev1.DeleteBudgetRequest{Project: "p", Period: "day"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteProject(ctx, &managev1.DeleteProjectRequest{Name: "p"}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"p", "p", "p", "p", "p"}; !slices.Equal(changed, want) {
		t.Errorf("announced %v, want %v", changed, want)
	}
}

// TestProjectRetention: a project's content retentions are set on create
// and update, left as they are when a request does not name them (an
// older client, or ctl's update), refused when negative, and read back.
func TestProjectRetention(t *testing.T) {
	s, st := newTenancyService(t, true, nil)
	ctx := context.Background()
	h := func(v int32) *int32 { return &v }
	p, err := s.CreateProject(ctx, &managev1.CreateProjectRequest{Project: &managev1.Project{Name: "team-a", ThreadsRetainHours: h(24)}})
	if err != nil {
		t.Fatal(err)
	}
	if p.GetThreadsRetainHours() != 24 || p.MemoryRetainHours == nil || p.GetMemoryRetainHours() != 0 {
		t.Fatalf("created = %v", p)
	}
	if hours, _ := st.Retention(ctx, "team-a", store.ContentThreads); hours != 24 {
		t.Fatalf("stored threads retention %d", hours)
	}
	p, err = s.UpdateProject(ctx, &managev1.UpdateProjectRequest{Project: &managev1.Project{Name: "team-a", Rpm: 5}})
	if err != nil || p.GetThreadsRetainHours() != 24 {
		t.Fatalf("an update without retention changed it: %v, %v", p, err)
	}
	p, err = s.UpdateProject(ctx, &managev1.UpdateProjectRequest{Project: &managev1.Project{Name: "team-a", ThreadsRetainHours: h(0), MemoryRetainHours: h(720)}})
	if err != nil || p.GetThreadsRetainHours() != 0 || p.GetMemoryRetainHours() != 720 {
		t.Fatalf("updated = %v, %v", p, err)
	}
	_, err = s.UpdateProject(ctx, &managev1.UpdateProjectRequest{Project: &managev1.Project{Name: "team-a", MemoryRetainHours: h(-1)}})
	wantCode(t, err, codes.InvalidArgument, "memory_retain_hours", "must not be negative")
	_, err = s.UpdateProject(ctx, &managev1.UpdateProjectRequest{Project: &managev1.Project{Name: "team-a", ThreadsRetainHours: h(3_000_000)}})
	wantCode(t, err, codes.InvalidArgument, "threads_retain_hours", "at most 87600")
	list, err := s.ListProjects(ctx, &managev1.ListProjectsRequest{})
	if err != nil || list.GetProjects()[1].GetMemoryRetainHours() != 720 {
		t.Fatalf("list = %v, %v", list, err)
	}
}
