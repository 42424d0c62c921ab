package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/store"
)

// testQuotaSlices: two holders share a budget of 10; a slice never takes
// more than the recorded spend and the other's unspent slice leave; usage
// rows charge the slice they were written for; an expired slice returns
// its unspent part.
func testQuotaSlices(t *testing.T, s store.Store) {
	ctx := t.Context()
	if err := s.CreateProject(ctx, store.Project{Name: "q"}); err != nil {
		t.Fatal(err)
	}
	start := store.PeriodStart(store.PeriodDay, time.Now())
	subj := store.BudgetSubject("q", store.PeriodDay, start)
	take := func(holder string, need, want float64, ttl time.Duration) (store.Slice, bool) {
		t.Helper()
		sl, ok, err := s.TakeSlice(ctx, store.SliceRequest{Subject: subj, Holder: holder, Limit: 10, Project: "q", Since: start,
			Need: need, Want: want, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		return sl, ok
	}
	if sl, ok := take("a", 4, 6, time.Minute); !ok || sl.Granted != 6 || sl.Committed != 6 {
		t.Fatalf("a's first slice = %+v, %v; want 6 granted of 10", sl, ok)
	}
	if sl, ok := take("b", 2, 5, time.Minute); !ok || sl.Granted != 4 || sl.Committed != 10 {
		t.Fatalf("b's slice = %+v, %v; want the 4 a left", sl, ok)
	}
	if sl, ok := take("b", 5, 5, time.Minute); ok || sl.Granted != 4 {
		t.Fatalf("b asking for 5 = %+v, %v; want refused, 4 kept", sl, ok)
	}
	// a spends 3 (a row written for it) and gives back what it does not use.
	if err := s.InsertUsage(ctx, []store.UsageRow{{At: time.Now(), Project: "q", Model: "m", Cost: 3, Holder: "a"}}); err != nil {
		t.Fatal(err)
	}
	if sl, ok := take("a", 0, 3, time.Minute); !ok || sl.Granted != 3 || sl.Spent != 3 || sl.Committed != 7 {
		t.Fatalf("a shrinking to what it spent = %+v, %v; want granted 3, spent 3, committed 3 + b's 4", sl, ok)
	}
	if sl, ok := take("b", 7, 9, time.Minute); !ok || sl.Granted != 7 {
		t.Fatalf("b growing = %+v, %v; want the 7 left after a's 3 spent", sl, ok)
	}
	// b takes a short slice and dies: its unspent part returns at expiry.
	if sl, ok := take("b", 0, 7, 50*time.Millisecond); !ok || sl.Granted != 7 {
		t.Fatalf("b renewing short = %+v, %v", sl, ok)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		sl, ok := take("a", 10, 10, time.Minute)
		if ok {
			if sl.Granted != 10 || sl.Committed != 10 {
				t.Fatalf("a after b expired = %+v; want granted 10 (3 spent + 7 returned)", sl)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b's slice never expired: %+v", sl)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A rate limit: no recorded spend, slices of granted tokens.
	r := store.SliceRequest{Subject: "rate/project/q/tokens", Holder: "a", Limit: 100, Need: 60, Want: 60, TTL: time.Minute}
	if sl, ok, err := s.TakeSlice(ctx, r); err != nil || !ok || sl.Granted != 60 {
		t.Fatalf("rate slice = %+v, %v, %v", sl, ok, err)
	}
	r.Holder = "b"
	if sl, ok, err := s.TakeSlice(ctx, r); err != nil || ok || sl.Granted != 0 {
		t.Fatalf("second rate slice of 60 of 100 = %+v, %v, %v; want refused", sl, ok, err)
	}
	if _, _, err := s.TakeSlice(ctx, store.SliceRequest{Subject: "x", Holder: "a"}); err == nil {
		t.Error("a slice with no TTL was taken; want an error")
	}
}

// testQuotaSliceRace: 20 holders race for slices of 1 of a limit of 7;
// exactly 7 get one.
func testQuotaSliceRace(t *testing.T, s store.Store) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range 20 {
		wg.Go(func() {
			_, ok, err := s.TakeSlice(t.Context(), store.SliceRequest{Subject: "rate/key/k/requests", Holder: string(rune('a' + i)),
				Limit: 7, Need: 1, Want: 1, TTL: time.Minute})
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				won++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if won != 7 {
		t.Errorf("%d holders got a slice of a limit of 7", won)
	}
}

// testQuotaSliceWithUsage: three holders spend a budget of 30 in rows of 1
// while they grow their slices, each holder's rows committing concurrently
// with its own next grow; however the commits interleave, the recorded
// spend never passes the limit.
func testQuotaSliceWithUsage(t *testing.T, s store.Store) {
	ctx := t.Context()
	for round := range 4 {
		project := fmt.Sprintf("race%d", round)
		if err := s.CreateProject(ctx, store.Project{Name: project}); err != nil {
			t.Fatal(err)
		}
		since := time.Unix(0, 0).UTC()
		subj := store.BudgetSubject(project, store.PeriodTotal, since)
		const limit = 30
		var wg sync.WaitGroup
		for h := range 3 {
			holder := fmt.Sprintf("h%d", h)
			rows := make(chan float64, limit)
			wg.Go(func() {
				for c := range rows {
					if err := s.InsertUsage(ctx, []store.UsageRow{{At: time.Now(), Project: project, Model: "m", Cost: c, Holder: holder}}); err != nil {
						t.Error(err)
						return
					}
				}
			})
			wg.Go(func() {
				defer close(rows)
				issued := 0.0
				for range 3 * limit {
					sl, ok, err := s.TakeSlice(ctx, store.SliceRequest{Subject: subj, Holder: holder, Limit: limit, Project: project, Since: since,
						Need: issued + 1, Want: issued + 2, TTL: time.Minute})
					if err != nil {
						t.Error(err)
						return
					}
					if !ok {
						continue
					}
					for issued+1 <= sl.Granted+1e-9 {
						rows <- 1
						issued++
					}
				}
			})
		}
		wg.Wait()
		spent, err := s.ProjectSpend(ctx, project, since)
		if err != nil {
			t.Fatal(err)
		}
		if spent > limit+1e-9 {
			t.Fatalf("round %d: %.0f recorded of a budget of %d: a grow was granted past the limit", round, spent, limit)
		}
	}
}

// testQuotaRateLinger: a rate slice whose holder stopped renewing it still
// counts for its Linger past its expiry (what the holder admitted in its
// last minute is still in the window); with no linger it frees at expiry.
func testQuotaRateLinger(t *testing.T, s store.Store) {
	ctx := t.Context()
	take := func(subject, holder string, need float64, ttl, linger time.Duration) (store.Slice, bool) {
		t.Helper()
		sl, ok, err := s.TakeSlice(ctx, store.SliceRequest{Subject: subject, Holder: holder, Limit: 100, Need: need, Want: need, TTL: ttl, Linger: linger})
		if err != nil {
			t.Fatal(err)
		}
		return sl, ok
	}
	a1, ok := take("rate/project/l/tokens", "a", 60, 50*time.Millisecond, time.Minute)
	if !ok {
		t.Fatal("a's slice refused")
	}
	a2, ok := take("rate/project/m/tokens", "a", 60, 50*time.Millisecond, 0)
	if !ok {
		t.Fatal("a's second slice refused")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		// A Need-0 read by a third holder tells the database's clock.
		sl, _ := take("rate/project/l/tokens", "c", 0, time.Minute, time.Minute)
		if sl.Now.After(a1.ExpiresAt) && sl.Now.After(a2.ExpiresAt) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the database's clock never passed the slices' expiry")
		}
		time.Sleep(10 * time.Millisecond) // polling the database's clock
	}
	if sl, ok := take("rate/project/l/tokens", "b", 60, time.Minute, time.Minute); ok {
		t.Errorf("b took 60 of 100 while a's expired slice of 60 lingers: %+v", sl)
	}
	if sl, ok := take("rate/project/m/tokens", "b", 60, time.Minute, 0); !ok {
		t.Errorf("b refused 60 of 100 after a's slice expired with no linger: %+v", sl)
	}
}

// testQuotaBudgetAsStored: a holder asking against a budget's old amount
// (its copy is stale) gets no more than the amount stored now allows; a
// fallback slice may take the stored fallback_allowance on top.
func testQuotaBudgetAsStored(t *testing.T, s store.Store) {
	ctx := t.Context()
	if err := s.CreateProject(ctx, store.Project{Name: "lowered"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutBudget(ctx, store.Budget{Project: "lowered", Period: store.PeriodTotal, Amount: 5, OnExhausted: store.OnExhaustedFallback,
		FallbackModel: "small", FallbackAllowance: 2}); err != nil {
		t.Fatal(err)
	}
	since := store.PeriodStart(store.PeriodTotal, time.Now())
	subj := store.BudgetSubject("lowered", store.PeriodTotal, since)
	r := store.SliceRequest{Subject: subj, Holder: "a", Limit: 100, Project: "lowered", Since: since, Need: 1, Want: 50, TTL: time.Minute}
	if sl, ok, err := s.TakeSlice(ctx, r); err != nil || !ok || sl.Granted != 5 {
		t.Fatalf("slice against a stale amount of 100 = %+v, %v, %v; want the stored 5", sl, ok, err)
	}
	r.Holder, r.Fallback = "b", true
	if sl, ok, err := s.TakeSlice(ctx, r); err != nil || !ok || sl.Granted != 2 {
		t.Fatalf("fallback slice = %+v, %v, %v; want the stored allowance of 2 left", sl, ok, err)
	}
}
