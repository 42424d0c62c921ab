package tenancy_test

// Limits and budgets shared by two control planes on one PostgreSQL: two
// gateways, each with its own admission and usage recorder, on one store.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/runtime/tenancy"
	"github.com/llmgw/llmgw/testkit/pgtest"
)

// sharedPair opens one PostgreSQL store with project "p" (tpm, budget b
// when b.Amount or b.FallbackAllowance is set) and two stacks on it, each
// its own control plane.
func sharedPair(t *testing.T, tpm int64, b *store.Budget, sh tenancy.Shared, overshoot int, tps float64) (*stack, *stack, store.Store) {
	t.Helper()
	st, err := store.Open(t.Context(), pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := t.Context()
	if err := st.CreateProject(ctx, store.Project{Name: "p", TPM: tpm}); err != nil {
		t.Fatal(err)
	}
	if b != nil {
		b.Project = "p"
		if err := st.PutBudget(ctx, *b); err != nil {
			t.Fatal(err)
		}
	}
	var out [2]*stack
	for i, holder := range []string{"cp-a", "cp-b"} {
		sh := sh
		sh.Store, sh.Holder = st, holder
		out[i] = startStack(t, st, overshoot, tps, func(o *tenancy.Options) { o.Shared = &sh }, holder)
	}
	return out[0], out[1], st
}

// burst2 sends n requests at once, alternately through a and b.
func burst2(t *testing.T, a, b *stack, n int, body func(stream bool) string) []reply {
	var wg sync.WaitGroup
	out := make([]reply, n)
	start := make(chan struct{})
	for i := range n {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			<-start
			stream := i%4 >= 2
			out[i] = s.post(t, body(stream), stream)
		})
	}
	close(start)
	wg.Wait()
	return out
}

// settle waits for both stacks' requests, writes their rows, and returns
// the store's usage rows of project p.
func settle(t *testing.T, st store.Store, ss ...*stack) []store.UsageRow {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range ss {
		if err := s.gw.Wait(ctx); err != nil {
			t.Fatalf("requests still running: %v", err)
		}
		if err := s.recorder.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := st.ListUsage(ctx, store.UsageQuery{Project: "p"}, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestSharedBurstAgainstBudget: 100 requests at once, half through each of
// two control planes, against a budget that admits 10 worst cases, with an
// engine that keeps to max_tokens and one that runs 1,000 tokens past it:
// recorded spend never passes the amount.
func TestSharedBurstAgainstBudget(t *testing.T) {
	for _, overshoot := range []int{0, 1000} {
		t.Run(fmt.Sprintf("overshoot %d", overshoot), func(t *testing.T) {
			const maxTokens = 20
			body := chatBody("big", maxTokens)
			amount := 10.5 * worstCost(body(true), maxTokens, 1)
			a, b, st := sharedPair(t, 0, &store.Budget{Period: store.PeriodDay, Amount: amount, OnExhausted: store.OnExhaustedRefuse}, tenancy.Shared{}, overshoot, 2000)
			replies := burst2(t, a, b, 100, body)
			ok := [2]int{}
			for i, r := range replies {
				switch r.status {
				case http.StatusOK:
					ok[i%2]++
				case http.StatusPaymentRequired:
				default:
					t.Errorf("request %d: status %d", i, r.status)
				}
			}
			total := 0.0
			for _, r := range settle(t, st, a, b) {
				total += r.Cost
			}
			t.Logf("budget %.4f (10.5 worst cases): admitted %d through a, %d through b; recorded spend %.4f (%.1f%% of the budget)",
				amount, ok[0], ok[1], total, 100*total/amount)
			if total > amount+1e-9 {
				t.Errorf("recorded spend %.6f exceeds the budget %.6f", total, amount)
			}
			// Requests settle below their worst case, which leaves room
			// for more than 10.
			if ok[0]+ok[1] < 5 {
				t.Errorf("%d admitted; want at least 5 of the 10 worst cases the budget holds", ok[0]+ok[1])
			}
		})
	}
}

// TestSharedTPMBurst: 20 requests at once, half through each control
// plane, against a project limit of 10 worst cases per minute, on engines
// slow enough (20 tokens a second) that every admitted request is still
// running when the last is decided: the worst cases admitted over both
// never pass the limit (the stated bound for control planes that live:
// zero).
func TestSharedTPMBurst(t *testing.T) {
	const maxTokens = 20
	body := chatBody("big", maxTokens)
	worst := int64(request.EstimatePromptTokens(len(body(true)), false) + maxTokens)
	tpm := 10*worst + worst/2
	a, b, st := sharedPair(t, tpm, nil, tenancy.Shared{}, 0, 20)
	replies := burst2(t, a, b, 20, body)
	ok := 0
	for i, r := range replies {
		switch r.status {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
		default:
			t.Errorf("request %d: status %d", i, r.status)
		}
	}
	var used int64
	rows := settle(t, st, a, b)
	for _, r := range rows {
		used += r.PromptTokens + r.CompletionTokens
	}
	t.Logf("tpm %d (10.5 worst cases of %d): %d admitted, %d tokens used", tpm, worst, ok, used)
	if int64(ok)*worst > tpm {
		t.Errorf("%d requests of up to %d tokens admitted within a minute under a limit of %d", ok, worst, tpm)
	}
	if ok < 5 {
		t.Errorf("%d admitted; want at least 5 of the 10 the limit holds", ok)
	}
}

// TestSharedSliceOfDeadControlPlane: control plane a leases the whole
// budget and dies holding it; b is refused until a's slice expires, then
// admitted from what a did not spend. The same for a rate limit.
func TestSharedSliceOfDeadControlPlane(t *testing.T) {
	const maxTokens = 20
	body := chatBody("big", maxTokens)
	worst := worstCost(body(false), maxTokens, 1)
	ttl := 2 * time.Second
	a, b, st := sharedPair(t, 0, &store.Budget{Period: store.PeriodTotal, Amount: 3.5 * worst, OnExhausted: store.OnExhaustedRefuse},
		tenancy.Shared{BudgetSlice: 1, TTL: ttl, Idle: time.Hour}, 0, 2000)
	if r := a.post(t, body(false), false); r.status != http.StatusOK {
		t.Fatalf("a's request: status %d", r.status)
	}
	a.admission.Kill()
	killed := time.Now()
	if r := b.post(t, body(false), false); r.status != http.StatusPaymentRequired {
		t.Fatalf("b's request while a holds the budget: status %d; want 402", r.status)
	}
	for {
		r := b.post(t, body(false), false)
		if r.status == http.StatusOK {
			break
		}
		if r.status != http.StatusPaymentRequired || time.Since(killed) > ttl+5*time.Second {
			t.Fatalf("b's request %s after a died: status %d; want 402 until a's slice (ttl %s) expires, then 200", time.Since(killed), r.status, ttl)
		}
		time.Sleep(100 * time.Millisecond)
	}
	back := time.Since(killed)
	t.Logf("a's slice returned %s after a died (slice ttl %s)", back.Round(10*time.Millisecond), ttl)
	if back < ttl/2 {
		t.Errorf("b was admitted %s after a died, before a's slice could have expired", back)
	}
	// b can take what a did not spend: keep asking until refused.
	more := 1
	for ; more < 50; more++ {
		if r := b.post(t, body(false), false); r.status != http.StatusOK {
			if r.status != http.StatusPaymentRequired {
				t.Errorf("b's request: status %d", r.status)
			}
			break
		}
	}
	t.Logf("b admitted %d requests after a's slice returned", more)
	if more < 3 {
		t.Errorf("b admitted %d after a's slice returned; want at least 3 of the 3.5 worst cases", more)
	}
	total := 0.0
	for _, r := range settle(t, st, a, b) {
		total += r.Cost
	}
	if total > 3.5*worst+1e-9 {
		t.Errorf("recorded spend %.6f exceeds the budget %.6f", total, 3.5*worst)
	}
}

// TestSharedBurstFallbackWithinAllowance: the budget is spent, and 100
// requests at once, split across two control planes, fall back to the
// alias "chat" (the model "small", which overshoots too): what the
// fallback spends stays within the allowance over both.
func TestSharedBurstFallbackWithinAllowance(t *testing.T) {
	const maxTokens = 20
	body := chatBody("big", maxTokens)
	allowance := 10.5 * worstCost(body(true), maxTokens, 0.1)
	a, b, st := sharedPair(t, 0, &store.Budget{Period: store.PeriodTotal, Amount: 0, OnExhausted: store.OnExhaustedFallback,
		FallbackModel: "small", FallbackAllowance: allowance}, tenancy.Shared{}, 200, 2000)
	replies := burst2(t, a, b, 100, body)
	ok := 0
	for i, r := range replies {
		switch r.status {
		case http.StatusOK:
			ok++
			if r.model != "small" {
				t.Errorf("request %d served by %q; want the fallback small", i, r.model)
			}
		case http.StatusPaymentRequired:
		default:
			t.Errorf("request %d: status %d", i, r.status)
		}
	}
	per := map[string]float64{}
	total := 0.0
	for _, r := range settle(t, st, a, b) {
		per[r.Model] += r.Cost
		total += r.Cost
	}
	t.Logf("allowance %.4f: %d served by the fallback over both control planes, spend %v", allowance, ok, per)
	if ok < 5 || ok == 100 {
		t.Errorf("%d served by the fallback; want at least 5 and refusals", ok)
	}
	if per["big"] != 0 || total > allowance+1e-9 {
		t.Errorf("recorded spend %v; want nothing on big and at most the allowance %.6f on small", per, allowance)
	}
}

// TestSharedRateSliceOfDeadControlPlane: control plane a takes the whole
// TPM and dies; b is refused until a's slice expires.
func TestSharedRateSliceOfDeadControlPlane(t *testing.T) {
	const maxTokens = 20
	body := chatBody("big", maxTokens)
	worst := int64(request.EstimatePromptTokens(len(body(false)), false) + maxTokens)
	ttl, linger := 2*time.Second, 3*time.Second
	a, b, _ := sharedPair(t, 2*worst, nil, tenancy.Shared{RateSlice: 1, TTL: ttl, Idle: time.Hour, RateLinger: linger}, 0, 2000)
	if r := a.post(t, body(false), false); r.status != http.StatusOK {
		t.Fatalf("a's request: status %d", r.status)
	}
	a.admission.Kill()
	killed := time.Now()
	if r := b.post(t, body(false), false); r.status != http.StatusTooManyRequests {
		t.Fatalf("b's request while a holds the limit: status %d; want 429", r.status)
	}
	for {
		r := b.post(t, body(false), false)
		if r.status == http.StatusOK {
			break
		}
		if r.status != http.StatusTooManyRequests || time.Since(killed) > ttl+linger+5*time.Second {
			t.Fatalf("b's request %s after a died: status %d; want 429 until a's slice (ttl %s) expires and lingers %s, then 200", time.Since(killed), r.status, ttl, linger)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// What a admitted in its last minute stays in the window: its slice
	// counts a linger past its lease's end (at least ttl/2 after the kill).
	if took := time.Since(killed); took < ttl/2+linger {
		t.Errorf("a's rate slice returned %s after a died; want no sooner than ttl/2 + linger = %s", took, ttl/2+linger)
	}
	t.Logf("a's rate slice returned %s after a died (slice ttl %s, linger %s)", time.Since(killed).Round(10*time.Millisecond), ttl, linger)
}

// TestSharedBudgetsShowEveryControlPlane: with shared limits, the budget
// accounts a control plane reports (metrics, messages) count what the
// other spent too, within the cache TTL.
func TestSharedBudgetsShowEveryControlPlane(t *testing.T) {
	const maxTokens = 20
	body := chatBody("big", maxTokens)
	amount := 100.0
	a, b, st := sharedPair(t, 0, &store.Budget{Period: store.PeriodDay, Amount: amount, OnExhausted: store.OnExhaustedRefuse}, tenancy.Shared{}, 0, 2000)
	if r := b.post(t, body(false), false); r.status != http.StatusOK {
		t.Fatalf("b's request: status %d", r.status)
	}
	if r := a.post(t, body(false), false); r.status != http.StatusOK {
		t.Fatalf("a's request: status %d", r.status)
	}
	rows := settle(t, st, b)
	spentB := 0.0
	for _, r := range rows {
		spentB += r.Cost
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		bs := a.admission.Budgets()
		// a's own request is the same as b's and costs the same.
		if len(bs) == 1 && bs[0].Spent >= 2*spentB-1e-9 && spentB > 0 {
			t.Logf("a shows %.4f spent (b's %.4f recorded, and a's own)", bs[0].Spent, spentB)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's budgets = %+v; want b's recorded spend %.4f and a's own counted", bs, spentB)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSharedIdleSliceReturns: control plane a leases the whole budget;
// once a has been idle for idle_return it gives back what it did not
// spend, long before its slice would expire, and b is admitted.
func TestSharedIdleSliceReturns(t *testing.T) {
	const maxTokens = 20
	body := chatBody("big", maxTokens)
	worst := worstCost(body(false), maxTokens, 1)
	idle := 300 * time.Millisecond
	a, b, _ := sharedPair(t, 0, &store.Budget{Period: store.PeriodTotal, Amount: 1.5 * worst, OnExhausted: store.OnExhaustedRefuse},
		tenancy.Shared{BudgetSlice: 1, TTL: time.Minute, Idle: idle}, 0, 2000)
	if r := a.post(t, body(false), false); r.status != http.StatusOK {
		t.Fatalf("a's request: status %d", r.status)
	}
	done := time.Now()
	deadline := done.Add(10 * time.Second)
	for {
		r := b.post(t, body(false), false)
		if r.status == http.StatusOK {
			break
		}
		if r.status != http.StatusPaymentRequired || time.Now().After(deadline) {
			t.Fatalf("b's request %s after a's: status %d; want 200 once a gave its slice back", time.Since(done), r.status)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("b admitted %s after a's request (idle_return %s, slice ttl 1m)", time.Since(done).Round(10*time.Millisecond), idle)
}

// TestSharedRPMCountsNoteRequests: memory-note requests, which reach no
// engine, count against a shared requests-per-minute limit as inference
// requests do: 20 at once over two control planes, then 20 chat
// requests, under a limit of 10: no more than 10 of all 40 are admitted.
func TestSharedRPMCountsNoteRequests(t *testing.T) {
	a, b, st := sharedPair(t, 0, nil, tenancy.Shared{}, 0, 2000)
	ctx := t.Context()
	if err := st.UpdateProject(ctx, store.Project{Name: "p", RPM: 10}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetRetention(ctx, "p", store.ContentMemory, 24); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	codes := make([]int, 20)
	start := make(chan struct{})
	for i := range codes {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			<-start
			req, err := http.NewRequest(http.MethodPost, s.url+"/v1/memory", strings.NewReader(fmt.Sprintf(`{"text":"note %d"}`, i)))
			if err != nil {
				t.Error(err)
				return
			}
			req.Header.Set("Authorization", "Bearer k")
			req.Header.Set("X-Llmgw-Agent", "bot")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	close(start)
	wg.Wait()
	notes := 0
	for i, c := range codes {
		switch c {
		case http.StatusOK:
			notes++
		case http.StatusTooManyRequests:
		default:
			t.Errorf("note request %d: status %d", i, c)
		}
	}
	chats := 0
	for i, r := range burst2(t, a, b, 20, chatBody("big", 5)) {
		switch r.status {
		case http.StatusOK:
			chats++
		case http.StatusTooManyRequests:
		default:
			t.Errorf("chat request %d: status %d", i, r.status)
		}
	}
	held, err := st.SearchNotes(ctx, "p", "bot", "", time.Now(), 100)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rpm 10 over two control planes: %d note requests and %d chat requests admitted of 20 each", notes, chats)
	if notes+chats > 10 {
		t.Errorf("%d note and %d chat requests admitted within a minute under a shared limit of 10 per minute", notes, chats)
	}
	if notes < 5 || len(held) != notes {
		t.Errorf("%d note requests admitted, %d notes kept; want at least 5 of the 10 the limit holds, each kept", notes, len(held))
	}
	settle(t, st, a, b)
}
