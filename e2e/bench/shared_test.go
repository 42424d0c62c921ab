package bench

// What sharing limits and budgets across control planes costs the gateway,
// and how exactly they hold: on one PostgreSQL store, a gateway counting in
// memory (one control plane) against two gateways leasing slices from the
// store (two control planes), measured alternately in one run.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/auth"
	"github.com/llmgw/llmgw/runtime/gateway"
	"github.com/llmgw/llmgw/runtime/keys"
	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/runtime/tenancy"
	"github.com/llmgw/llmgw/sim/simengine"
	"github.com/llmgw/llmgw/spec"
	"github.com/llmgw/llmgw/testkit/pgtest"
)

func TestMain(m *testing.M) {
	if engine := os.Getenv(proxyForEnv); engine != "" {
		if err := serveProxy(engine); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", os.Getenv(proxyEnv), err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(engineEnv) != "" {
		if err := serveEngine(); err != nil {
			fmt.Fprintf(os.Stderr, "engine: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(pgtest.Main(m))
}

// sharedSetup opens a PostgreSQL store with a key whose project has limits
// and a budget, and starts an engine (decoding at tps tokens a second)
// and gateways on it: one counting in memory, two sharing through the store.
type sharedSetup struct {
	st     store.Store
	key    string
	single string
	shared [2]string
	recs   []*tenancy.Recorder
	adms   []*tenancy.Admission
}

func newSharedSetup(b *testing.B, tps float64, project store.Project, budget *store.Budget) *sharedSetup {
	b.Helper()
	ctx := context.Background()
	eng, err := simengine.New(simengine.Config{Host: "127.0.0.1", ServedModelName: model, DecodeTokensPerSec: tps}, nil)
	if err != nil {
		b.Fatal(err)
	}
	direct := serve(b, eng.Handler())
	st, err := store.Open(ctx, pgtest.NewDatabase(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	project.Name = store.DefaultProject
	if err := st.UpdateProject(ctx, project); err != nil {
		b.Fatal(err)
	}
	if budget != nil {
		budget.Project = store.DefaultProject
		if err := st.PutBudget(ctx, *budget); err != nil {
			b.Fatal(err)
		}
	}
	k, err := keys.New(st).CreateAPIKey(ctx, "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	s := &sharedSetup{st: st, key: k.Secret}
	price := &spec.Pricing{PromptPer1K: 1, CompletionPer1K: 1}
	start := func(sh *tenancy.Shared) string {
		opts := tenancy.Options{Store: st, DefaultPrice: price, Shared: sh}
		adm := tenancy.NewAdmission(opts)
		ropts := tenancy.RecorderOptions{Store: st, Price: adm.Cost}
		if sh != nil {
			ropts.Holder = sh.Holder
		}
		rec := tenancy.NewRecorder(ropts)
		s.recs, s.adms = append(s.recs, rec), append(s.adms, adm)
		rt := router.New()
		rt.SetEndpoints(model, []router.Endpoint{{ReplicaID: "r-1", Model: model, URL: direct, Weight: 1}})
		g := gateway.New(gateway.Config{}, gateway.Deps{Catalog: catalog{}, Auth: auth.NewKeys(st, 0, nil), Routes: rt,
			Admission: adm, Observer: rec})
		b.Cleanup(func() {
			g.Close()
			_ = rec.Close(context.Background())
			adm.Close(context.Background())
		})
		return serve(b, g.Handler())
	}
	s.single = start(nil)
	for i := range s.shared {
		s.shared[i] = start(&tenancy.Shared{Store: st, Holder: fmt.Sprintf("cp-%d", i+1)})
	}
	return s
}

// spend writes every gateway's rows and returns the recorded spend.
func (s *sharedSetup) spend(b *testing.B) float64 {
	ctx := context.Background()
	for _, r := range s.recs {
		if err := r.Close(ctx); err != nil {
			b.Fatal(err)
		}
	}
	v, err := s.st.ProjectSpend(ctx, store.DefaultProject, time.Unix(0, 0))
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// split sends n requests at once, alternately through the two shared
// gateways, and counts the statuses.
func (s *sharedSetup) split(b *testing.B, n int, payload []byte) map[int]int {
	l := newLoader(s.key)
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			req, _ := http.NewRequest(http.MethodPost, s.shared[i%2]+"/v1/chat/completions", strings.NewReader(string(payload)))
			req.Header.Set("Authorization", "Bearer "+s.key)
			resp, err := l.client.Do(req)
			code := -1
			if err == nil {
				code = resp.StatusCode
				resp.Body.Close()
			}
			mu.Lock()
			statuses[code]++
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	return statuses
}

// BenchmarkSharedLimits prints the gateway's latency with limits and a
// budget shared through PostgreSQL against one control plane counting in
// memory on the same store (goal: p50 within 10%), then how exactly a
// budget and a TPM limit hold under a burst split across two control
// planes. A figure past its goal is marked MISS.
func BenchmarkSharedLimits(b *testing.B) {
	var out strings.Builder
	fmt.Fprintf(&out, "\nlimits shared by two control planes on PostgreSQL against one control plane counting in memory (same run, %s)\n", time.Now().UTC().Format(time.RFC3339))

	// Overhead: limits and a budget that bind nothing but are checked and
	// reserved on every request.
	s := newSharedSetup(b, 0, store.Project{RPM: 10_000_000, TPM: 1_000_000_000},
		&store.Budget{Period: store.PeriodMonth, Amount: 1e12, OnExhausted: store.OnExhaustedRefuse})
	l := newLoader(s.key)
	const rate, n = 1000, 3000
	l.saturate(s.single, false, 32, 500)
	l.saturate(s.shared[0], false, 32, 250)
	l.saturate(s.shared[1], false, 32, 250)
	// Short rounds, alternating, so that drift in the machine's load hits
	// every side alike.
	const rounds = 6
	var one, alone, two result
	for range rounds {
		one = merge(one, l.fixedRate([]string{s.single}, onlyBase, false, rate, n/rounds)[0])
		alone = merge(alone, l.fixedRate([]string{s.shared[0]}, onlyBase, false, rate, n/rounds)[0])
		// Half of the load through each shared control plane, at once.
		var a, c result
		var wg sync.WaitGroup
		wg.Go(func() { a = l.fixedRate([]string{s.shared[0]}, onlyBase, false, rate/2, n/rounds/2)[0] })
		wg.Go(func() { c = l.fixedRate([]string{s.shared[1]}, onlyBase, false, rate/2, n/rounds/2)[0] })
		wg.Wait()
		two = merge(two, merge(a, c))
	}
	if one.errors+alone.errors+two.errors > 0 {
		b.Fatalf("%d errors on one control plane, %d and %d shared", one.errors, alone.errors, two.errors)
	}
	fmt.Fprintf(&out, "%-40s %-18s %-18s %s\n", "load (non-streaming)", "in memory p50/p99", "shared p50/p99", "p50 shared/in memory (goal ≤ 1.10)")
	for _, r := range []struct {
		name   string
		shared result
	}{{fmt.Sprintf("%d/s through one shared gateway", rate), alone}, {fmt.Sprintf("%d/s split over two shared gateways", rate), two}} {
		ratio := float64(r.shared.pct(0.5)) / float64(one.pct(0.5))
		fmt.Fprintf(&out, "%-40s %-18s %-18s %.2f%s\n", r.name,
			us(one.pct(0.5))+"/"+us(one.pct(0.99)), us(r.shared.pct(0.5))+"/"+us(r.shared.pct(0.99)), ratio, miss(ratio <= 1.10))
	}
	b.ReportMetric(float64(alone.pct(0.5))/float64(one.pct(0.5)), "shared-p50-ratio")

	// Exactness: bursts split across both control planes, on an engine
	// slow enough (100 tokens/s) that every admitted request is still
	// running when the last is decided.
	const maxTokens = 100
	payload := fmt.Appendf(nil, `{"model":%q,"max_tokens":%d,"messages":[{"role":"user","content":"hello"}]}`, model, maxTokens)
	worst := int64(request.EstimatePromptTokens(len(payload), false) + maxTokens)
	amount := 10.5 * float64(worst) / 1000
	s = newSharedSetup(b, 100, store.Project{}, &store.Budget{Period: store.PeriodDay, Amount: amount, OnExhausted: store.OnExhaustedRefuse})
	st := s.split(b, 100, payload)
	spent := s.spend(b)
	fmt.Fprintf(&out, "budget admitting 10 worst cases, 100 at once over 2: %d admitted, %d refused (402), spend/amount %.3f (bound 1)%s\n",
		st[http.StatusOK], st[http.StatusPaymentRequired], spent/amount, miss(spent <= amount+1e-9 && st[-1] == 0))
	b.ReportMetric(spent/amount, "budget-spend-ratio")

	tpm := 10*worst + worst/2
	s = newSharedSetup(b, 100, store.Project{TPM: tpm}, nil)
	st = s.split(b, 20, payload)
	admitted := int64(st[http.StatusOK]) * worst
	fmt.Fprintf(&out, "tpm of 10.5 worst cases, 20 at once over 2: %d admitted, %d refused (429), admitted worst cases/limit %.3f (bound 1)%s\n",
		st[http.StatusOK], st[http.StatusTooManyRequests], float64(admitted)/float64(tpm), miss(admitted <= tpm && st[-1] == 0))
	b.ReportMetric(float64(admitted)/float64(tpm), "tpm-admitted-ratio")
	fmt.Fprint(os.Stdout, out.String())
}

// miss marks a figure past its goal.
func miss(ok bool) string {
	if ok {
		return ""
	}
	return "  MISS"
}
