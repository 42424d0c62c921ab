package tenancy

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/spec"
)

// TestSharedSliceMadeAgainAfterIdle: a slice forgotten locally after 2×TTL
// idle is made again knowing nothing spent, while the store's row holds
// this holder's recorded spend; its first grow must still leave the
// request room (it was sized on 0 spent, which the store raised to the 2
// recorded, and a budget with 8 left refused).
func TestSharedSliceMadeAgainAfterIdle(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	if err := st.CreateProject(ctx, store.Project{Name: "p"}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutBudget(ctx, store.Budget{Project: "p", Period: store.PeriodTotal, Amount: 10, OnExhausted: store.OnExhaustedRefuse}); err != nil {
		t.Fatal(err)
	}
	qs := st.(store.QuotaStore)
	a := NewAdmission(Options{Store: st, Models: fakeModels{"m": {CompletionPer1K: 1}},
		Shared: &Shared{Store: qs, Holder: "h", TTL: 300 * time.Millisecond, Idle: 50 * time.Millisecond}})
	defer a.Close(ctx)
	p := request.Principal{KeyID: "k", Project: "p"}
	tk, err := a.Admit(ctx, p, "m", chat(2000, 0)) // cost 2
	if err != nil {
		t.Fatal(err)
	}
	tk.Settle(request.Usage{CompletionTokens: 2000, Reported: true})
	if err := st.InsertUsage(ctx, []store.UsageRow{{At: time.Now(), Project: "p", Model: "m", CompletionTokens: 2000, Cost: 2, Holder: "h"}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		a.mu.Lock()
		n := len(a.slices)
		a.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slice never forgotten")
		}
		time.Sleep(20 * time.Millisecond)
	}
	spent, _ := st.ProjectSpend(ctx, "p", time.Unix(0, 0))
	t.Logf("recorded spend %.2f of 10", spent)
	if _, err := a.Admit(ctx, p, "m", chat(100, 0)); err != nil { // cost 0.1
		t.Errorf("0.1 refused with %.2f of 10 spent: %v", spent, err)
	}
}

// TestSharedLoweredBudgetRetakesSlice: a slice taken against a budget of
// 100 holds 51; the budget is lowered to 5. Requests are then admitted only
// up to the new amount, not from the room granted against the old one.
func TestSharedLoweredBudgetRetakesSlice(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	if err := st.CreateProject(ctx, store.Project{Name: "p"}); err != nil {
		t.Fatal(err)
	}
	put := func(amount float64) {
		t.Helper()
		if err := st.PutBudget(ctx, store.Budget{Project: "p", Period: store.PeriodTotal, Amount: amount, OnExhausted: store.OnExhaustedRefuse}); err != nil {
			t.Fatal(err)
		}
	}
	put(100)
	a := NewAdmission(Options{Store: st, Models: fakeModels{"m": {CompletionPer1K: 1}}, CacheTTL: time.Nanosecond,
		Shared: &Shared{Store: st.(store.QuotaStore), Holder: "h", BudgetSlice: 0.5, TTL: time.Minute, Idle: time.Minute}})
	defer a.Close(ctx)
	p := request.Principal{KeyID: "k", Project: "p"}
	tk, err := a.Admit(ctx, p, "m", chat(1000, 0)) // cost 1
	if err != nil {
		t.Fatal(err)
	}
	tk.Settle(request.Usage{CompletionTokens: 1000, Reported: true})
	put(5)
	// The directory reads the store again in the background once its copy
	// is stale; wait until it shows the new amount.
	deadline := time.Now().Add(5 * time.Second)
	for {
		info, err := a.dir.get(ctx, "p")
		if err != nil {
			t.Fatal(err)
		}
		if len(info.budgets) == 1 && info.budgets[0].Amount == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lowered budget never reached the admission's directory")
		}
		time.Sleep(5 * time.Millisecond) // the refresh runs on its own goroutine
	}
	admitted := 1.0
	for range 5 {
		tk, err := a.Admit(ctx, p, "m", chat(2000, 0)) // cost 2
		if err != nil {
			continue
		}
		tk.Settle(request.Usage{CompletionTokens: 2000, Reported: true})
		admitted += 2
	}
	if admitted > 5 {
		t.Errorf("admitted %.0f after the budget was lowered to 5", admitted)
	}
	if admitted < 5 {
		t.Errorf("admitted %.0f of a budget of 5; want 5 (1 + 2 + 2)", admitted)
	}
}

// TestUsageRowCostIsWhatWasCharged: a price raised while a request ran
// charges no more than was reserved (Settle), and the usage row records
// that charge, not the tokens re-priced at the new price: otherwise the
// recorded spend, which the budgets count, passes what admission allowed.
func TestUsageRowCostIsWhatWasCharged(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	if err := st.CreateProject(ctx, store.Project{Name: "p"}); err != nil {
		t.Fatal(err)
	}
	models := fakeModels{"m": {CompletionPer1K: 1}}
	a := NewAdmission(Options{Store: st, Models: models})
	p := request.Principal{KeyID: "k", Project: "p"}
	tk, err := a.Admit(ctx, p, "m", chat(1000, 0)) // reserves 1
	if err != nil {
		t.Fatal(err)
	}
	models["m"] = spec.Pricing{CompletionPer1K: 10}
	u := tk.Settle(request.Usage{CompletionTokens: 1000, TotalTokens: 1000, Reported: true})
	if !u.Priced || u.Cost != 1 {
		t.Fatalf("settled usage = %+v; want priced at the reserved 1", u)
	}
	r := NewRecorder(RecorderOptions{Store: st, FlushInterval: time.Hour,
		Price: func(m string, pt, ct int64) float64 { pr := models[m]; return pr.Cost(pt, ct) }})
	r.Observe(request.Record{Principal: p, Model: "m", CompletionTokens: 1000, UsageReported: true, Priced: u.Priced, Cost: u.Cost})
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	spent, err := st.ProjectSpend(ctx, "p", time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if spent != 1 {
		t.Errorf("usage row cost %.2f; want the 1 admission charged", spent)
	}
}

// TestSharedRolloverChargesAdmittedPeriod: a request admitted before
// midnight and settled after it is charged to the old day, whose slice
// reserved it, and its usage row is dated then; the new day's slice, which
// admitted its whole budget meanwhile, is not charged for it.
func TestSharedRolloverChargesAdmittedPeriod(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	if err := st.CreateProject(ctx, store.Project{Name: "p"}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutBudget(ctx, store.Budget{Project: "p", Period: store.PeriodDay, Amount: 10, OnExhausted: store.OnExhaustedRefuse}); err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Date(2026, 11, 30, 23, 59, 59, 0, time.UTC)}
	a := NewAdmission(Options{Store: st, Models: fakeModels{"m": {CompletionPer1K: 1}}, Now: clk.now,
		Shared: &Shared{Store: st.(store.QuotaStore), Holder: "h", TTL: time.Minute, Idle: time.Minute}})
	defer a.Close(ctx)
	p := request.Principal{KeyID: "k", Project: "p"}
	old, err := a.Admit(ctx, p, "m", chat(5000, 0)) // cost 5, day 30
	if err != nil {
		t.Fatal(err)
	}
	clk.advance(2 * time.Second)                    // day 1
	tk, err := a.Admit(ctx, p, "m", chat(10000, 0)) // cost 10, the new day's whole budget
	if err != nil {
		t.Fatal(err)
	}
	tk.Settle(request.Usage{CompletionTokens: 10000, Reported: true})
	u := old.Settle(request.Usage{CompletionTokens: 5000, Reported: true})
	consumed := func(d time.Time) float64 {
		a.mu.Lock()
		defer a.mu.Unlock()
		if s := a.slices[store.BudgetSubject("p", store.PeriodDay, PeriodStart(store.PeriodDay, d))]; s != nil {
			return s.consumed
		}
		return -1
	}
	newDay, oldDay := consumed(clk.now()), consumed(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
	if newDay != 10 || oldDay != 5 {
		t.Errorf("consumed: new day %.0f, old day %.0f; want 10 and 5 (the old request charged to the day that reserved it)", newDay, oldDay)
	}
	r := NewRecorder(RecorderOptions{Store: st, FlushInterval: time.Hour, Holder: "h"})
	r.Observe(request.Record{Principal: p, Model: "m", CompletionTokens: 5000, UsageReported: true, Priced: u.Priced, Cost: u.Cost, Admitted: u.Admitted})
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if spent, err := st.ProjectSpend(ctx, "p", PeriodStart(store.PeriodDay, clk.now())); err != nil || spent != 0 {
		t.Errorf("recorded spend of the new day = %.0f, %v; want 0: the row belongs to the day it was admitted", spent, err)
	}
}

// TestEstimatedUsageIsNotOvershoot: usage past the reservation is capped
// either way, but only the engine's own count is overshoot (metric, log):
// the gateway's estimate of a cut stream is not the engine's doing.
func TestEstimatedUsageIsNotOvershoot(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	a := NewAdmission(Options{Store: st, Models: fakeModels{"m": {CompletionPer1K: 1}}})
	p := request.Principal{Project: store.DefaultProject}
	over := func() int64 {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.overshoot[overshootKey{"m", "completion"}]
	}
	tk, err := a.Admit(ctx, p, "m", chat(100, 0))
	if err != nil {
		t.Fatal(err)
	}
	if u := tk.Settle(request.Usage{CompletionTokens: 150, Estimated: true}); u.CompletionTokens != 100 {
		t.Errorf("estimated usage past the reservation settled at %d completion tokens; want capped at 100", u.CompletionTokens)
	}
	if n := over(); n != 0 {
		t.Errorf("the gateway's own estimate counted %d tokens of overshoot; want 0", n)
	}
	tk, err = a.Admit(ctx, p, "m", chat(100, 0))
	if err != nil {
		t.Fatal(err)
	}
	tk.Settle(request.Usage{CompletionTokens: 150, Reported: true})
	if n := over(); n != 50 {
		t.Errorf("the engine's count past the reservation counted %d tokens of overshoot; want 50", n)
	}
}

// cutQuota fails every TakeSlice once cut, as a control plane cut off
// from the store sees.
type cutQuota struct {
	store.QuotaStore
	cut atomic.Bool
}

func (c *cutQuota) TakeSlice(ctx context.Context, r store.SliceRequest) (store.Slice, bool, error) {
	if c.cut.Load() {
		return store.Slice{}, false, errors.New("connection refused")
	}
	return c.QuotaStore.TakeSlice(ctx, r)
}

// TestSharedCutOffStopsAtLeaseEnd: a control plane cut off from the store
// admits from the slice it holds only until the slice's lease ends on its
// own clock (never after the store's expiry); then it refuses with 503
// limits_unavailable rather than admit past what the store granted.
func TestSharedCutOffStopsAtLeaseEnd(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	if err := st.CreateProject(ctx, store.Project{Name: "p"}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutBudget(ctx, store.Budget{Project: "p", Period: store.PeriodTotal, Amount: 1000, OnExhausted: store.OnExhaustedRefuse}); err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	qs := &cutQuota{QuotaStore: st.(store.QuotaStore)}
	ttl := time.Minute
	a := NewAdmission(Options{Store: st, Models: fakeModels{"m": {CompletionPer1K: 1}}, Now: clk.now,
		Shared: &Shared{Store: qs, Holder: "h", BudgetSlice: 0.5, TTL: ttl, Idle: time.Hour}})
	defer a.Close(ctx)
	p := request.Principal{KeyID: "k", Project: "p"}
	if _, err := a.Admit(ctx, p, "m", chat(1000, 0)); err != nil {
		t.Fatal(err)
	}
	qs.cut.Store(true)
	clk.advance(ttl - time.Second)
	if _, err := a.Admit(ctx, p, "m", chat(1000, 0)); err != nil {
		t.Errorf("cut off but within the slice's lease: %v; want admitted from the slice", err)
	}
	clk.advance(time.Second)
	_, err := a.Admit(ctx, p, "m", chat(1000, 0))
	var rej *request.Rejection
	if !errors.As(err, &rej) || rej.Status != http.StatusServiceUnavailable || rej.Code != "limits_unavailable" {
		t.Errorf("cut off at the slice's lease end: %v; want 503 limits_unavailable", err)
	}
}
