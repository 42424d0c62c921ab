package tenancy

import (
	"errors"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/spec"
)

// fakeModels prices models from a map.
type fakeModels map[string]spec.Pricing

func (m fakeModels) Terms(name string) (*spec.Pricing, request.Limits, bool) {
	p, ok := m[name]
	if !ok {
		return nil, request.Limits{}, true
	}
	return &p, request.Limits{}, true
}

// limitedModels are priced models with limits.
type limitedModels map[string]struct {
	price  spec.Pricing
	limits request.Limits
}

func (m limitedModels) Terms(name string) (*spec.Pricing, request.Limits, bool) {
	t, ok := m[name]
	return &t.price, t.limits, ok
}

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), "llmgw.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func chat(maxTokens, promptEstimate int) request.Info {
	return request.Info{Endpoint: "/v1/chat/completions", MaxTokens: maxTokens, PromptEstimate: promptEstimate}
}

func rejection(t *testing.T, err error) *request.Rejection {
	t.Helper()
	rej, ok := errors.AsType[*request.Rejection](err)
	if !ok {
		t.Fatalf("error %v is not a rejection", err)
	}
	return rej
}

// TestBudgetHoldsUnderConcurrency: 100 parallel requests against a budget
// that admits 10 worst cases. The settled spend never passes the budget and
// the other 90 get the budget error.
func TestBudgetHoldsUnderConcurrency(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	if err := st.CreateProject(ctx, store.Project{Name: "team"}); err != nil {
		t.Fatal(err)
	}
	// Worst case: 100 prompt + 100 completion tokens at 1 per 1k = 0.2;
	// a budget of 2 admits exactly 10.
	if err := st.PutBudget(ctx, store.Budget{Project: "team", Period: store.PeriodDay, Amount: 2, OnExhausted: store.OnExhaustedRefuse}); err != nil {
		t.Fatal(err)
	}
	a := NewAdmission(Options{Store: st, Models: fakeModels{"m": {PromptPer1K: 1, CompletionPer1K: 1}}})
	var admitted, refused atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	tickets := make(chan request.Ticket, 100)
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			tk, err := a.Admit(ctx, request.Principal{KeyID: "k", Project: "team"}, "m", chat(100, 100))
			if err != nil {
				rej := rejection(t, err)
				if rej.Status != http.StatusPaymentRequired || rej.Code != "budget_exceeded" || rej.Reason != "budget" {
					t.Errorf("refusal = %+v, want 402 budget_exceeded", rej)
				}
				refused.Add(1)
				return
			}
			admitted.Add(1)
			tickets <- tk
		}()
	}
	close(start)
	wg.Wait()
	close(tickets)
	if admitted.Load() != 10 || refused.Load() != 90 {
		t.Fatalf("admitted %d, refused %d; want 10 and 90", admitted.Load(), refused.Load())
	}
	// Each used its whole worst case: the spend is exactly the budget.
	for tk := range tickets {
		tk.Settle(request.Usage{PromptTokens: 100, CompletionTokens: 100, Reported: true})
	}
	states := a.Budgets()
	if len(states) != 1 || states[0].Spent > 2+1e-9 || states[0].Reserved != 0 {
		t.Fatalf("budget state after settling = %+v; want spent <= 2, nothing reserved", states)
	}
	if _, err := a.Admit(ctx, request.Principal{KeyID: "k", Project: "team"}, "m", chat(1, 1)); err == nil {
		t.Error("a spent budget admitted another request")
	} else if msg := rejection(t, err).Message; !strings.Contains(msg, `project "team"`) || !strings.Contains(msg, "resets at") {
		t.Errorf("budget message %q does not name the project and the reset", msg)
	}
}

// TestSettleReleasesUnusedReservation: a request that used less than its
// worst case frees the rest for others.
func TestSettleReleasesUnusedReservation(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	if err := st.PutBudget(ctx, store.Budget{Project: store.DefaultProject, Period: store.PeriodTotal, Amount: 1, OnExhausted: store.OnExhaustedRefuse}); err != nil {
		t.Fatal(err)
	}
	a := NewAdmission(Options{Store: st, Models: fakeModels{"m": {CompletionPer1K: 1}}})
	p := request.Principal{Project: store.DefaultProject}
	tk, err := a.Admit(ctx, p, "m", chat(1000, 0)) // reserves the whole budget
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Admit(ctx, p, "m", chat(1, 0)); err == nil {
		t.Fatal("admitted past a fully reserved budget")
	}
	tk.Settle(request.Usage{CompletionTokens: 100, Reported: true})
	tk.Settle(request.Usage{CompletionTokens: 1000, Reported: true}) // a second settle is ignored
	if _, err := a.Admit(ctx, p, "m", chat(900, 0)); err != nil {
		t.Fatalf("the unused 0.9 was not released: %v", err)
	}
	if _, err := a.Admit(ctx, p, "m", chat(1, 0)); err == nil {
		t.Error("admitted past the budget after the release")
	}
}

// TestTPMHoldsUnderConcurrency: 20 parallel requests against a 100 TPM
// limit; the tokens admitted stay within it.
func TestTPMHoldsUnderConcurrency(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	if err := st.CreateProject(ctx, store.Project{Name: "p", TPM: 100}); err != nil {
		t.Fatal(err)
	}
	a := NewAdmission(Options{Store: st})
	var admittedTokens atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := a.Admit(ctx, request.Principal{KeyID: "k", Project: "p"}, "m", chat(20, 5))
			if err == nil {
				admittedTokens.Add(25)
				return
			}
			rej := rejection(t, err)
			if rej.Status != http.StatusTooManyRequests || rej.RetryAfter <= 0 || rej.Header.Get("X-Ratelimit-Limit-Tokens") != "100" {
				t.Errorf("refusal = %+v", rej)
			}
		}()
	}
	close(start)
	wg.Wait()
	if got := admittedTokens.Load(); got != 100 {
		t.Errorf("admitted %d worst-case tokens, want exactly the limit 100", got)
	}
}

func TestRateLimits(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	clk := &clock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	if err := st.CreateProject(ctx, store.Project{Name: "p", RPM: 5}); err != nil {
		t.Fatal(err)
	}
	a := NewAdmission(Options{Store: st, DefaultRPM: 100, DefaultTPM: 1000, Now: clk.now})
	key := request.Principal{KeyID: "k1", Project: "p", RPM: 2}
	for i := 0; i < 2; i++ {
		tk, err := a.Admit(ctx, key, "m", chat(10, 10))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		h := http.Header{}
		tk.SetHeaders(h)
		if h.Get("X-Ratelimit-Limit-Requests") != "2" || h.Get("X-Ratelimit-Remaining-Requests") != []string{"1", "0"}[i] ||
			h.Get("X-Ratelimit-Limit-Tokens") != "1000" {
			t.Errorf("request %d headers = %v", i, h)
		}
		tk.Settle(request.Usage{PromptTokens: 5, CompletionTokens: 5, Reported: true})
	}
	clk.advance(20 * time.Second)
	_, err := a.Admit(ctx, key, "m", chat(10, 10))
	rej := rejection(t, err)
	if rej.Status != 429 || rej.Type != "requests" || rej.RetryAfter != 40*time.Second || !strings.Contains(rej.Message, `key "k1"`) {
		t.Errorf("key RPM refusal = %+v", rej)
	}
	// Another key of the same project runs into the project's RPM of 5.
	other := request.Principal{KeyID: "k2", Project: "p"}
	for i := 0; i < 3; i++ {
		if _, err := a.Admit(ctx, other, "m", chat(10, 10)); err != nil {
			t.Fatalf("k2 request %d: %v", i, err)
		}
	}
	if _, err := a.Admit(ctx, other, "m", chat(10, 10)); err == nil || !strings.Contains(rejection(t, err).Message, `project "p"`) {
		t.Errorf("project RPM not enforced: %v", err)
	}
	// A minute later the window has passed.
	clk.advance(61 * time.Second)
	if _, err := a.Admit(ctx, key, "m", chat(10, 10)); err != nil {
		t.Errorf("after the window: %v", err)
	}
	// A request bigger than the whole TPM limit can never run.
	_, err = a.Admit(ctx, key, "m", chat(5000, 10))
	if rej := rejection(t, err); rej.RetryAfter != 0 || !strings.Contains(rej.Message, "lower max_tokens") {
		t.Errorf("oversized request refusal = %+v", rej)
	}
}

func TestAllowedModelsAndFallback(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	if err := st.CreateProject(ctx, store.Project{Name: "p", AllowedModels: []string{"big", "small"}}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutBudget(ctx, store.Budget{Project: "p", Period: store.PeriodMonth, Amount: 1, OnExhausted: store.OnExhaustedFallback, FallbackModel: "small"}); err != nil {
		t.Fatal(err)
	}
	a := NewAdmission(Options{Store: st, Models: fakeModels{"big": {CompletionPer1K: 1}}})
	p := request.Principal{KeyID: "k", Project: "p"}
	_, err := a.Admit(ctx, p, "other", chat(1, 1))
	if rej := rejection(t, err); rej.Status != http.StatusForbidden || rej.Code != "model_not_allowed" {
		t.Errorf("not-allowed refusal = %+v", rej)
	}
	tk, err := a.Admit(ctx, p, "big", chat(1000, 0))
	if err != nil || tk.Model() != "big" {
		t.Fatalf("first request: %v", err)
	}
	tk.Settle(request.Usage{CompletionTokens: 1000, Reported: true})
	tk, err = a.Admit(ctx, p, "big", chat(10, 0))
	if err != nil {
		t.Fatalf("spent budget with fallback refused: %v", err)
	}
	if tk.Model() != "small" {
		t.Errorf("served %q, want the fallback small", tk.Model())
	}
}

func TestBudgetLoadsSpendAndRolls(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	clk := &clock{t: time.Date(2026, 11, 30, 23, 59, 0, 0, time.UTC)}
	if err := st.PutBudget(ctx, store.Budget{Project: store.DefaultProject, Period: store.PeriodDay, Amount: 1, OnExhausted: store.OnExhaustedRefuse}); err != nil {
		t.Fatal(err)
	}
	// Spent yesterday (does not count), today in the store, and today but
	// still in the recorder's hands.
	rows := []store.UsageRow{
		{At: clk.t.Add(-24 * time.Hour), Project: store.DefaultProject, Model: "m", Cost: 5},
		{At: clk.t.Add(-time.Hour), Project: store.DefaultProject, Model: "m", Cost: 0.5},
	}
	if err := st.InsertUsage(ctx, rows); err != nil {
		t.Fatal(err)
	}
	pending := pendingFunc(func(project string, since time.Time) float64 { return 0.25 })
	a := NewAdmission(Options{Store: st, Pending: pending, Models: fakeModels{"m": {CompletionPer1K: 1}}, Now: clk.now})
	p := request.Principal{Project: store.DefaultProject}
	if _, err := a.Admit(ctx, p, "m", chat(300, 0)); err == nil {
		t.Fatal("admitted 0.3 with 0.75 of 1 already spent today")
	}
	tk, err := a.Admit(ctx, p, "m", chat(250, 0))
	if err != nil {
		t.Fatalf("0.25 should fit: %v", err)
	}
	clk.advance(2 * time.Minute) // past midnight: a new day
	tk.Settle(request.Usage{CompletionTokens: 250, Reported: true})
	if _, err := a.Admit(ctx, p, "m", chat(750, 0)); err != nil {
		t.Errorf("a new day did not reset the budget (0.25 settled today + 0.75): %v", err)
	}
}

type pendingFunc func(project string, since time.Time) float64

func (f pendingFunc) PendingCost(project string, since time.Time) float64 { return f(project, since) }

func TestPeriods(t *testing.T) {
	at := time.Date(2026, 2, 14, 15, 4, 5, 0, time.UTC)
	tests := []struct {
		period     string
		start, end time.Time
		resets     bool
	}{
		{store.PeriodDay, time.Date(2026, 2, 14, 0, 0, 0, 0, time.UTC), time.Date(2026, 2, 15, 0, 0, 0, 0, time.UTC), true},
		{store.PeriodMonth, time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), true},
		{store.PeriodTotal, time.Unix(0, 0).UTC(), time.Time{}, false},
	}
	for _, tt := range tests {
		start := PeriodStart(tt.period, at)
		end, resets := PeriodEnd(tt.period, start)
		if !start.Equal(tt.start) || !end.Equal(tt.end) || resets != tt.resets {
			t.Errorf("%s: start %v end %v resets %v", tt.period, start, end, resets)
		}
	}
}

func TestBudgetMetrics(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	if err := st.PutBudget(ctx, store.Budget{Project: store.DefaultProject, Period: store.PeriodDay, Amount: 2, OnExhausted: store.OnExhaustedRefuse}); err != nil {
		t.Fatal(err)
	}
	a := NewAdmission(Options{Store: st, Models: fakeModels{"m": {CompletionPer1K: 1}}})
	tk, err := a.Admit(ctx, request.Principal{Project: store.DefaultProject}, "m", chat(500, 0))
	if err != nil {
		t.Fatal(err)
	}
	tk.Settle(request.Usage{CompletionTokens: 500, Reported: true})
	reg := prometheus.NewRegistry()
	reg.MustRegister(a.Collector())
	want := `
# HELP llmgw_budget_remaining_ratio Share of the budget neither spent nor reserved, 1 untouched to 0 spent.
# TYPE llmgw_budget_remaining_ratio gauge
llmgw_budget_remaining_ratio{period="day",project="default"} 0.75
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "llmgw_budget_remaining_ratio"); err != nil {
		t.Error(err)
	}
}

// BenchmarkAdmitSettle is admission's cost on the request path: a key and
// project with limits, a priced budget.
func BenchmarkAdmitSettle(b *testing.B) {
	st, err := store.Open(b.Context(), filepath.Join(b.TempDir(), "llmgw.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	if err := st.UpdateProject(b.Context(), store.Project{Name: store.DefaultProject, RPM: 1 << 40, TPM: 1 << 50}); err != nil {
		b.Fatal(err)
	}
	if err := st.PutBudget(b.Context(), store.Budget{Project: store.DefaultProject, Period: store.PeriodMonth, Amount: 1e15, OnExhausted: store.OnExhaustedRefuse}); err != nil {
		b.Fatal(err)
	}
	a := NewAdmission(Options{Store: st, DefaultPrice: &spec.Pricing{PromptPer1K: 1, CompletionPer1K: 1}})
	p := request.Principal{KeyID: "key-1", Project: store.DefaultProject, RPM: 1 << 40, TPM: 1 << 50}
	h := http.Header{}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tk, err := a.Admit(b.Context(), p, "m", chat(100, 50))
		if err != nil {
			b.Fatal(err)
		}
		tk.SetHeaders(h)
		tk.Settle(request.Usage{PromptTokens: 40, CompletionTokens: 60, Reported: true})
	}
}

// aliasModels resolves the alias "small-alias" to "small".
type aliasModels struct{ fakeModels }

func (aliasModels) Resolve(name string) (string, bool) {
	if name == "small-alias" {
		return "small", true
	}
	return name, true
}

func TestAllowedModelsByAlias(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	if err := st.CreateProject(ctx, store.Project{Name: "p", AllowedModels: []string{"small-alias"}}); err != nil {
		t.Fatal(err)
	}
	a := NewAdmission(Options{Store: st, Models: aliasModels{}})
	p := request.Principal{KeyID: "k", Project: "p"}
	if _, err := a.Admit(ctx, p, "small", chat(1, 1)); err != nil {
		t.Errorf("a model allowed by its alias was refused: %v", err)
	}
	if !a.Allows(ctx, p, "small") || a.Allows(ctx, p, "big") {
		t.Error("Allows does not follow allowed_models")
	}
	if !a.Allows(ctx, request.Principal{Project: store.DefaultProject}, "big") {
		t.Error("a project without allowed_models may not see a model")
	}
}

// TestRolloverKeepsReservations: requests admitted before midnight settle
// (and are recorded) after it, so their reservations count against the new
// day until then; the new day cannot admit a whole budget on top of them.
func TestRolloverKeepsReservations(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	clk := &clock{t: time.Date(2026, 11, 30, 23, 59, 59, 0, time.UTC)}
	if err := st.PutBudget(ctx, store.Budget{Project: store.DefaultProject, Period: store.PeriodDay, Amount: 2, OnExhausted: store.OnExhaustedRefuse}); err != nil {
		t.Fatal(err)
	}
	a := NewAdmission(Options{Store: st, Models: fakeModels{"m": {CompletionPer1K: 1}}, Now: clk.now})
	p := request.Principal{Project: store.DefaultProject}
	var before []request.Ticket
	for range 10 {
		tk, err := a.Admit(ctx, p, "m", chat(200, 0))
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, tk)
	}
	clk.advance(2 * time.Second) // a new day
	admitted := 0
	for range 10 {
		if _, err := a.Admit(ctx, p, "m", chat(200, 0)); err == nil {
			admitted++
		}
	}
	if admitted != 0 {
		t.Errorf("the new day admitted %d requests while the old day's 10 (the whole budget) still run", admitted)
	}
	for _, tk := range before {
		tk.Settle(request.Usage{CompletionTokens: 200, Reported: true})
	}
	states := a.Budgets()
	if len(states) != 1 || states[0].Spent > 2+1e-9 || states[0].Reserved != 0 {
		t.Errorf("after settling in the new day: %+v", states)
	}
}

// TestAbandonedChargedTheReservation: a request the client left before
// anything could be counted pays its worst case, so leaving early is never
// a way to run for free.
func TestAbandonedChargedTheReservation(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	if err := st.CreateProject(ctx, store.Project{Name: "p", TPM: 1000}); err != nil {
		t.Fatal(err)
	}
	a := NewAdmission(Options{Store: st, Models: fakeModels{"m": {PromptPer1K: 1, CompletionPer1K: 1}}})
	p := request.Principal{Project: "p"}
	tk, err := a.Admit(ctx, p, "m", chat(400, 100))
	if err != nil {
		t.Fatal(err)
	}
	charged := tk.Settle(request.Usage{PromptTokens: 100, Abandoned: true})
	if charged.PromptTokens != 100 || charged.CompletionTokens != 400 || !charged.Abandoned {
		t.Errorf("charged %+v, want the reservation (100 + 400)", charged)
	}
	// The window still holds all 500 tokens: 600 more do not fit.
	if _, err := a.Admit(ctx, p, "m", chat(500, 100)); err == nil {
		t.Error("the abandoned request's tokens were refunded")
	}
}

// TestWorstCaseCountsEveryCompletion: n, best_of and a list of prompts each
// multiply what a request may generate, and nothing overflows.
func TestWorstCaseCountsEveryCompletion(t *testing.T) {
	a := NewAdmission(Options{Store: openStore(t), DefaultMaxTokens: 100})
	tests := []struct {
		req  request.Info
		want int64
	}{
		{request.Info{Endpoint: "/v1/chat/completions", MaxTokens: 10}, 10},
		{request.Info{Endpoint: "/v1/chat/completions", MaxTokens: 10, N: 3}, 30},
		{request.Info{Endpoint: "/v1/completions", MaxTokens: 10, N: 2, BestOf: 5, Prompts: 4}, 200},
		{request.Info{Endpoint: "/v1/completions", Prompts: 3}, 300},
		{request.Info{Endpoint: "/v1/embeddings", MaxTokens: 10}, 0},
		{request.Info{Endpoint: "/v1/completions", MaxTokens: request.MaxTokens, N: request.MaxChoices, Prompts: 1 << 30}, maxWorst},
	}
	for _, tt := range tests {
		if got := a.completionCap(a.perChoice(a.lookup("m"), tt.req), tt.req); got != tt.want {
			t.Errorf("completionCap(%+v) = %d, want %d", tt.req, got, tt.want)
		}
	}
}

// TestBudgetAddedWhileRequestsRun: a request admitted before its project
// had a budget is charged to the budget when it ends.
func TestBudgetAddedWhileRequestsRun(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	a := NewAdmission(Options{Store: st, Models: fakeModels{"m": {CompletionPer1K: 1}}})
	p := request.Principal{Project: store.DefaultProject}
	running, err := a.Admit(ctx, p, "m", chat(500, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutBudget(ctx, store.Budget{Project: store.DefaultProject, Period: store.PeriodDay, Amount: 1, OnExhausted: store.OnExhaustedRefuse}); err != nil {
		t.Fatal(err)
	}
	a.Invalidate(store.DefaultProject)
	if _, err := a.Admit(ctx, p, "m", chat(100, 0)); err != nil {
		t.Fatal(err) // loads the new budget's ledger
	}
	running.Settle(request.Usage{CompletionTokens: 500, Reported: true})
	if _, err := a.Admit(ctx, p, "m", chat(500, 0)); err == nil {
		t.Error("0.5 admitted on top of 0.5 spent and 0.1 reserved of a budget of 1")
	}
}

func TestFallbackMustBeAllowed(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	if err := st.CreateProject(ctx, store.Project{Name: "p", AllowedModels: []string{"big"}}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutBudget(ctx, store.Budget{Project: "p", Period: store.PeriodDay, Amount: 0, OnExhausted: store.OnExhaustedFallback, FallbackModel: "small"}); err != nil {
		t.Fatal(err)
	}
	a := NewAdmission(Options{Store: st, Models: fakeModels{"big": {CompletionPer1K: 1}}})
	_, err := a.Admit(ctx, request.Principal{Project: "p"}, "big", chat(10, 0))
	if rej := rejection(t, err); rej.Status != http.StatusPaymentRequired {
		t.Errorf("a fallback the project may not use was served: %+v", rej)
	}
}

// TestReservationBoundedByModel: a request reserves (and its ticket
// forwards) max_tokens, else the model's max_output, else the default, and
// never more than the model can produce; a budget's fallback model is
// bounded by what it can produce and by what the request was checked for.
func TestReservationBoundedByModel(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	price := spec.Pricing{CompletionPer1K: 1}
	models := limitedModels{
		"out":  {price, request.Limits{MaxOutput: 1024, ContextLength: 8192}},
		"ctx":  {price, request.Limits{ContextLength: 2048}},
		"none": {price, request.Limits{}},
		"fb":   {price, request.Limits{MaxOutput: 100, ContextLength: 8192}},
		"big":  {price, request.Limits{MaxOutput: 1 << 20}},
	}
	a := NewAdmission(Options{Store: st, Models: models, DefaultMaxTokens: 4096})
	p := request.Principal{Project: store.DefaultProject}
	tests := []struct {
		model     string
		maxTokens int
		want      int
	}{
		{"out", 0, 1024},
		{"out", 10, 10},
		{"out", 5000, 1024}, // the gateway refuses this; admission still bounds it
		{"ctx", 0, 2048},
		{"ctx", 100, 100},
		{"none", 0, 4096},
		{"none", 9000, 9000},
	}
	for _, tt := range tests {
		tk, err := a.Admit(ctx, p, tt.model, chat(tt.maxTokens, 0))
		if err != nil {
			t.Fatalf("%s max_tokens %d: %v", tt.model, tt.maxTokens, err)
		}
		if got := tk.MaxTokens(); got != tt.want {
			t.Errorf("%s max_tokens %d: ticket bound %d, want %d", tt.model, tt.maxTokens, got, tt.want)
		}
		tk.Settle(request.Usage{})
	}

	// A spent budget falls back to "fb" (max_output 100) or to "big" (more
	// than the request was checked for): the bound is the smaller.
	for _, fb := range []struct {
		model           string
		maxTokens, want int
	}{{"fb", 500, 100}, {"fb", 0, 100}, {"big", 0, 1024}} {
		proj := "p-" + fb.model + "-" + strconv.Itoa(fb.maxTokens)
		if err := st.CreateProject(ctx, store.Project{Name: proj}); err != nil {
			t.Fatal(err)
		}
		if err := st.PutBudget(ctx, store.Budget{Project: proj, Period: store.PeriodTotal, Amount: 1e-9,
			OnExhausted: store.OnExhaustedFallback, FallbackModel: fb.model, FallbackAllowance: 100}); err != nil {
			t.Fatal(err)
		}
		tk, err := a.Admit(ctx, request.Principal{Project: proj}, "out", chat(fb.maxTokens, 0))
		if err != nil {
			t.Fatal(err)
		}
		if tk.Model() != fb.model || tk.MaxTokens() != fb.want {
			t.Errorf("fallback to %s with max_tokens %d: served %s bounded to %d, want %s bounded to %d",
				fb.model, fb.maxTokens, tk.Model(), tk.MaxTokens(), fb.model, fb.want)
		}
	}
}
