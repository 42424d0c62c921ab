package tenancy

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/spec"
)

// TestSettleNeverChargesAboveReservation: usage reported beyond the
// reservation (an engine that ignored max_tokens, a prompt above its
// bound) is charged at most the reservation, and counted as overshoot.
func TestSettleNeverChargesAboveReservation(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	if err := st.CreateProject(ctx, store.Project{Name: "team"}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutBudget(ctx, store.Budget{Project: "team", Period: store.PeriodDay, Amount: 1, OnExhausted: store.OnExhaustedRefuse}); err != nil {
		t.Fatal(err)
	}
	a := NewAdmission(Options{Store: st, Models: fakeModels{"m": {PromptPer1K: 1, CompletionPer1K: 1}}})
	p := request.Principal{KeyID: "k", Project: "team"}
	tk, err := a.Admit(ctx, p, "m", chat(100, 50)) // reserves 0.15
	if err != nil {
		t.Fatal(err)
	}
	got := tk.Settle(request.Usage{PromptTokens: 80, CompletionTokens: 700, TotalTokens: 780, Reported: true})
	if got.PromptTokens != 50 || got.CompletionTokens != 100 || got.TotalTokens != 150 {
		t.Errorf("charged usage = %+v; want the reservation, 50 + 100", got)
	}
	if s := a.Budgets(); len(s) != 1 || s[0].Spent > 0.15+1e-12 || s[0].Reserved != 0 {
		t.Errorf("budget after an overshoot = %+v; want 0.15 spent", s)
	}
	const want = `
# HELP llmgw_usage_overshoot_tokens_total Tokens engines reported beyond what admission reserved for the request; never charged.
# TYPE llmgw_usage_overshoot_tokens_total counter
llmgw_usage_overshoot_tokens_total{kind="completion",model="m"} 600
llmgw_usage_overshoot_tokens_total{kind="prompt",model="m"} 30
`
	if err := testutil.CollectAndCompare(a.Collector(), strings.NewReader(want), "llmgw_usage_overshoot_tokens_total"); err != nil {
		t.Error(err)
	}
	// An estimated usage (a stream the gateway cut) is capped alike.
	tk, err = a.Admit(ctx, p, "m", chat(10, 10))
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.Settle(request.Usage{PromptTokens: 10, CompletionTokens: 11, Estimated: true}); got.CompletionTokens != 10 {
		t.Errorf("estimated usage charged %+v; want 10 completion tokens", got)
	}
}

// TestPromptBoundCappedByContext: the prompt bound is never more than the
// model's context_length.
func TestPromptBoundCappedByContext(t *testing.T) {
	st := openStore(t)
	a := NewAdmission(Options{Store: st, Models: limitedModels{
		"small-ctx": {spec.Pricing{PromptPer1K: 1}, request.Limits{ContextLength: 2048}},
	}})
	tk, err := a.Admit(t.Context(), request.Principal{Project: store.DefaultProject}, "small-ctx", chat(10, 1_000_000))
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.Settle(request.Usage{Abandoned: true}); got.PromptTokens != 2048 {
		t.Errorf("abandoned request charged %d prompt tokens; want the context_length 2048", got.PromptTokens)
	}
}

// fallbackModels: "big" costs 1 per 1k tokens, "small" 0.1, "free" nothing;
// "chat" is an alias of "small".
type fallbackModels struct{ fakeModels }

func (fallbackModels) Resolve(name string) (string, bool) {
	if name == "chat" {
		return "small", true
	}
	return name, true
}

func newFallbackAdmission(t *testing.T, b store.Budget) (*Admission, store.Store) {
	t.Helper()
	st := openStore(t)
	if err := st.CreateProject(t.Context(), store.Project{Name: "p"}); err != nil {
		t.Fatal(err)
	}
	b.Project = "p"
	if err := st.PutBudget(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	return NewAdmission(Options{Store: st, Models: fallbackModels{fakeModels{
		"big":   {PromptPer1K: 1, CompletionPer1K: 1},
		"small": {PromptPer1K: 0.1, CompletionPer1K: 0.1},
	}}}), st
}

// TestFallbackBoundedByAllowance: once a budget is spent, 100 parallel
// requests fall back, and what they spend stays within the allowance;
// the rest get 402 naming the allowance.
func TestFallbackBoundedByAllowance(t *testing.T) {
	a, _ := newFallbackAdmission(t, store.Budget{Period: store.PeriodDay, Amount: 1,
		OnExhausted: store.OnExhaustedFallback, FallbackModel: "small", FallbackAllowance: 0.05})
	ctx := t.Context()
	p := request.Principal{KeyID: "k", Project: "p"}
	// Spend the budget: 10 requests of 100 tokens on big.
	for i := 0; i < 10; i++ {
		tk, err := a.Admit(ctx, p, "big", chat(50, 50))
		if err != nil || tk.Model() != "big" {
			t.Fatalf("request %d within the budget: %v", i, err)
		}
		tk.Settle(request.Usage{PromptTokens: 50, CompletionTokens: 50, Reported: true})
	}
	// Each fallback reserves 100 tokens at 0.1/1k = 0.01: 5 fit in 0.05.
	var mu sync.Mutex
	var served, refused int
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Go(func() {
			tk, err := a.Admit(ctx, p, "big", chat(50, 50))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				rej := rejection(t, err)
				if rej.Status != http.StatusPaymentRequired || !strings.Contains(rej.Message, `fallback allowance for "small" (0.05)`) {
					t.Errorf("refusal = %+v; want 402 naming the fallback allowance", rej)
				}
				refused++
				return
			}
			if tk.Model() != "small" {
				t.Errorf("served %q; want the fallback", tk.Model())
			}
			served++
			// The engine overshoots: charged the reservation only.
			tk.Settle(request.Usage{PromptTokens: 50, CompletionTokens: 500, Reported: true})
		})
	}
	wg.Wait()
	st := a.Budgets()
	if served != 5 || refused != 95 {
		t.Errorf("fallback served %d, refused %d; want 5 and 95", served, refused)
	}
	if len(st) != 1 || st[0].Spent > 1.05+1e-9 {
		t.Errorf("spend = %+v; want at most amount + allowance = 1.05", st)
	}
}

// TestFallbackAllowanceZero: with no allowance a priced fallback is
// refused; a free one serves.
func TestFallbackAllowanceZero(t *testing.T) {
	for _, tt := range []struct {
		fallback string
		serves   bool
	}{{"small", false}, {"free", true}} {
		a, _ := newFallbackAdmission(t, store.Budget{Period: store.PeriodTotal, Amount: 0,
			OnExhausted: store.OnExhaustedFallback, FallbackModel: tt.fallback})
		tk, err := a.Admit(t.Context(), request.Principal{Project: "p"}, "big", chat(10, 10))
		if tt.serves != (err == nil) {
			t.Errorf("fallback %s with no allowance: err %v; want served %v", tt.fallback, err, tt.serves)
		}
		if err == nil && tk.Model() != tt.fallback {
			t.Errorf("served %s, want %s", tk.Model(), tt.fallback)
		}
	}
}

// TestFallbackByAliasServesCanonical: a budget stored with an alias as its
// fallback serves (and labels) the canonical model.
func TestFallbackByAliasServesCanonical(t *testing.T) {
	a, _ := newFallbackAdmission(t, store.Budget{Period: store.PeriodTotal, Amount: 0,
		OnExhausted: store.OnExhaustedFallback, FallbackModel: "chat", FallbackAllowance: 1})
	tk, err := a.Admit(t.Context(), request.Principal{Project: "p"}, "big", chat(10, 10))
	if err != nil || tk.Model() != "small" {
		t.Fatalf("fallback by alias: model %v, err %v; want small", tk, err)
	}
}

// TestDecideBudgets covers the rule across several budgets.
func TestDecideBudgets(t *testing.T) {
	line := func(period string, amount, spent float64, fallback string, allowance float64) budgetLine {
		b := store.Budget{Period: period, Amount: amount, OnExhausted: store.OnExhaustedRefuse}
		if fallback != "" {
			b.OnExhausted, b.FallbackModel, b.FallbackAllowance = store.OnExhaustedFallback, fallback, allowance
		}
		return budgetLine{budget: b, ledger: &ledger{period: period, spent: spent}, fallback: fallback}
	}
	all := func(string) bool { return true }
	fbCost := func(string) float64 { return 0.1 }
	tests := []struct {
		name    string
		lines   []budgetLine
		served  string
		refused string
	}{
		{"fits", []budgetLine{line("day", 1, 0, "", 0)}, "", ""},
		{"spent, refuse", []budgetLine{line("day", 1, 1, "", 0)}, "", "day"},
		{"spent, fallback within allowance", []budgetLine{line("day", 1, 1, "s", 0.1)}, "s", ""},
		{"spent, allowance spent", []budgetLine{line("day", 1, 1.05, "s", 0.1)}, "", "day"},
		{"day falls back, month refuses and has room for the fallback",
			[]budgetLine{line("day", 1, 1, "s", 1), line("month", 10, 9.5, "", 0)}, "s", ""},
		{"day falls back, month refuses and is spent",
			[]budgetLine{line("day", 1, 1, "s", 1), line("month", 10, 9.95, "", 0)}, "", "month"},
		{"the fallback may not be used", []budgetLine{line("day", 1, 1, "s", 1)}, "", "day"},
	}
	for _, tt := range tests {
		allowed := all
		if tt.name == "the fallback may not be used" {
			allowed = func(string) bool { return false }
		}
		d := decideBudgets(tt.lines, 0.5, fbCost, allowed)
		refused := ""
		if d.refused != nil {
			refused = d.refused.budget.Period
		}
		if d.served != tt.served || refused != tt.refused {
			t.Errorf("%s: served %q refused %q; want %q and %q", tt.name, d.served, refused, tt.served, tt.refused)
		}
	}
}
