package e2e

// Limits and budgets over two real control planes on one PostgreSQL: two
// llmgw server processes, each serving the client API and leasing slices
// of the budgets and limits from the store.

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/config"
	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/testkit/pgtest"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

// TestSharedLimitsAcrossControlPlanes: a 100-way burst split across both
// control planes against a budget that admits 10 worst cases spends at
// most the amount; a 20-way burst split across both against a TPM of 10.5
// worst cases admits at most 10; a control plane killed holding most of a
// budget leaves it taken until its slice's lease ends, then the other
// control plane is admitted.
func TestSharedLimitsAcrossControlPlanes(t *testing.T) {
	const sliceTTL = 3 * time.Second
	dsn := pgtest.NewDatabase(t)
	c := testcluster.NewCluster(t, binary, testcluster.Options{Grace: "20s", Models: pricedModel, Store: dsn,
		Configure: func(s *config.Server) {
			s.SharedLimits.SliceTTL, s.SharedLimits.IdleReturn = sliceTTL, sliceTTL
		}})
	b := c.AddControlPlane("cp-2")
	c.StartAgent(testcluster.NodeSpec{ID: "node01", Servers: []string{c.AgentAddr, b.AgentAddr}})
	tc := &tenancyCluster{Cluster: c, t: t}
	tc.waitServing()
	testcluster.WaitFor(t, "the standby to be ready", 20*time.Second, func() (bool, string) {
		got := httpStatus(root(b.Client) + "/ready")
		return got == http.StatusOK, fmt.Sprint(got)
	})
	waitStandbyRoutes(t, b, "sim-priced", 1)
	st, err := store.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	bases := []string{c.Client, b.Client}

	const maxTokens = 200 // one second at the engine's 200 tokens/s
	body := fmt.Sprintf(chatBody, maxTokens)
	worst := request.EstimatePromptTokens(len(body), false) + maxTokens
	worstCost := float64(worst) / 1000

	// burst sends n requests at once, alternately through each control
	// plane, and counts the statuses.
	burst := func(key string, n int) map[int]int {
		var mu sync.Mutex
		statuses := map[int]int{}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				r := haPostBody(context.Background(), bases[i%2], key, body)
				mu.Lock()
				statuses[r.status]++
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		return statuses
	}

	t.Run("budget", func(t *testing.T) {
		amount := 10.5 * worstCost
		key := tc.newKey(st, "burst", store.Project{}, store.APIKey{},
			&store.Budget{Period: store.PeriodDay, Amount: amount, OnExhausted: store.OnExhaustedRefuse})
		statuses := burst(key, 100)
		rows := tc.rows(st, "burst", 100) // refused requests leave a row too
		spent := 0.0
		for _, r := range rows {
			spent += r.Cost
		}
		t.Logf("budget %.4f (10.5 worst cases): statuses %v, recorded spend %.4f", amount, statuses, spent)
		if statuses[http.StatusOK]+statuses[http.StatusPaymentRequired] != 100 || statuses[http.StatusOK] < 5 {
			t.Errorf("statuses %v; want only 200 and 402, at least 5 admitted", statuses)
		}
		if spent > amount+1e-9 {
			t.Errorf("recorded spend %.6f exceeds the budget %.6f", spent, amount)
		}
	})

	t.Run("tpm", func(t *testing.T) {
		tpm := int64(10*worst + worst/2)
		key := tc.newKey(st, "tpm", store.Project{TPM: tpm}, store.APIKey{}, nil)
		statuses := burst(key, 20)
		t.Logf("tpm %d (10.5 worst cases of %d): statuses %v", tpm, worst, statuses)
		if statuses[http.StatusOK]+statuses[http.StatusTooManyRequests] != 20 || statuses[http.StatusOK] < 5 {
			t.Errorf("statuses %v; want only 200 and 429, at least 5 admitted", statuses)
		}
		// Every admitted request runs for a second, so all were in
		// flight together: their worst cases must fit the limit.
		if int64(statuses[http.StatusOK]*worst) > tpm {
			t.Errorf("%d requests of up to %d tokens admitted at once under a TPM of %d", statuses[http.StatusOK], worst, tpm)
		}
	})

	t.Run("killed", func(t *testing.T) {
		short := fmt.Sprintf(chatBody, 5)
		w := float64(request.EstimatePromptTokens(len(short), false)+5) / 1000
		key := tc.newKey(st, "killed", store.Project{}, store.APIKey{},
			&store.Budget{Period: store.PeriodTotal, Amount: 1.2 * w, OnExhausted: store.OnExhaustedRefuse})
		// cp-2 leases the request's worst case plus a tenth of the budget,
		// leaving cp-1 less than a request.
		if r := haPostBody(context.Background(), b.Client, key, short); r.status != http.StatusOK {
			t.Fatalf("request through cp-2: %d %s", r.status, r.body)
		}
		tc.rows(st, "killed", 1)
		if err := syscall.Kill(b.Proc.Cmd.Process.Pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-b.Proc.Done
		killed := time.Now()
		if r := haPostBody(context.Background(), c.Client, key, short); r.status != http.StatusPaymentRequired {
			t.Fatalf("request through cp-1 while the dead cp-2 holds the budget: %d %s; want 402", r.status, r.body)
		}
		var back time.Duration
		testcluster.WaitFor(t, "cp-2's slice to come back", sliceTTL+10*time.Second, func() (bool, string) {
			r := haPostBody(context.Background(), c.Client, key, short)
			back = time.Since(killed)
			return r.status == http.StatusOK, fmt.Sprint(r.status)
		})
		t.Logf("cp-2's budget slice came back %s after its SIGKILL (shared_limits.slice_ttl %s)", back.Round(10*time.Millisecond), sliceTTL)
		if back > sliceTTL+2*time.Second {
			t.Errorf("the slice came back after %s; want within slice_ttl %s and a retry", back, sliceTTL)
		}
	})
}

// haPostBody sends one non-streamed chat request with the given body.
func haPostBody(ctx context.Context, base, key, body string) haResult {
	return haPostRaw(ctx, base, key, body, false)
}
