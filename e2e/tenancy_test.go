package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/spec"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

// pricedModel costs 1 per 1,000 tokens either way, so a request's cost is
// its tokens / 1000. Its engine decodes 200 tokens/s, so requests overlap.
const pricedModel = `  - name: sim-priced
    source: sim://priced
    context_length: 8192
    pricing: { prompt_per_1k: 1, completion_per_1k: 1 }
    scaling: { min: 1, max: 1 }
    profiles:
      - { name: h100, engine: sim, gpu_class: h100-80g, tp: 1, startup_timeout: 1m, args: ["--decode-tps", "200"] }
`

// tenancyCluster is a control plane with the priced model serving on one
// node, and a direct handle on its store for setting up projects.
type tenancyCluster struct {
	*testcluster.Cluster
	t      *testing.T
	dbPath string
}

func newTenancyCluster(t *testing.T) *tenancyCluster { return newTenancyClusterOf(t, pricedModel) }

// newTenancyClusterOf is newTenancyCluster with another definition of
// sim-priced.
func newTenancyClusterOf(t *testing.T, model string) *tenancyCluster {
	c := testcluster.NewWithAuth(t, binary, "10s", model, "")
	c.StartAgent(testcluster.NodeSpec{ID: "node01"})
	tc := &tenancyCluster{Cluster: c, t: t, dbPath: filepath.Join(c.Dir, "llmgw.db")}
	tc.waitServing()
	return tc
}

func (tc *tenancyCluster) waitServing() {
	mc := tc.ManageClient()
	testcluster.WaitFor(tc.t, "the priced model serving", 90*time.Second, func() (bool, string) {
		m, err := mc.GetModel(context.Background(), &managev1.GetModelRequest{Name: "sim-priced"})
		if err != nil {
			return false, err.Error()
		}
		return m.GetStatus().GetState() == "serving", m.GetStatus().GetState() + " " + m.GetStatus().GetMessage()
	})
}

// store opens the control plane's SQLite store alongside it (WAL allows a
// second process).
func (tc *tenancyCluster) store() store.Store {
	st, err := store.Open(tc.t.Context(), tc.dbPath)
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.t.Cleanup(func() { st.Close() })
	return st
}

// newKey creates a project with the given limits (and budget, when
// amount > 0) and returns a key in it.
func (tc *tenancyCluster) newKey(st store.Store, project string, p store.Project, k store.APIKey, b *store.Budget) string {
	t := tc.t
	p.Name = project
	if err := st.CreateProject(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	if b != nil {
		b.Project = project
		if err := st.PutBudget(t.Context(), *b); err != nil {
			t.Fatal(err)
		}
	}
	key, prefix, hash := spec.NewAPIKey()
	k.ID, k.Prefix, k.Hash, k.Project, k.Name = "key-"+project, prefix, hash, project, project
	if err := st.CreateAPIKey(t.Context(), k); err != nil {
		t.Fatal(err)
	}
	tc.AddSecret(key)
	return key
}

type result struct {
	id     string
	status int
	body   string
	header http.Header
	usage  struct{ PromptTokens, CompletionTokens int }
	at     time.Time
}

const chatBody = `{"model":"sim-priced","max_tokens":%d,"messages":[{"role":"user","content":"say something short please"}]}`

// post sends one chat request with the given request id.
func (tc *tenancyCluster) post(ctx context.Context, key, id, body string) result {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, tc.Client+"/chat/completions", strings.NewReader(body))
	if err != nil {
		tc.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return result{id: id, status: -1, body: err.Error()}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return result{id: id, status: -1, body: err.Error()}
	}
	r := result{id: id, status: resp.StatusCode, body: string(b), header: resp.Header, at: time.Now()}
	var v struct {
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if resp.StatusCode == http.StatusOK && json.Unmarshal(b, &v) == nil {
		r.usage.PromptTokens, r.usage.CompletionTokens = v.Usage.PromptTokens, v.Usage.CompletionTokens
	}
	return r
}

// parallel sends n requests at once and returns their results.
func (tc *tenancyCluster) parallel(key, prefix string, n int, body string) []result {
	out := make([]result, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i] = tc.post(context.Background(), key, fmt.Sprintf("%s-%03d", prefix, i), body)
		}()
	}
	close(start)
	wg.Wait()
	return out
}

// rows waits until the store holds want usage rows of the project.
func (tc *tenancyCluster) rows(st store.Store, project string, want int) []store.UsageRow {
	var rows []store.UsageRow
	testcluster.WaitFor(tc.t, fmt.Sprintf("%d usage rows of %s", want, project), 20*time.Second, func() (bool, string) {
		var err error
		rows, err = st.ListUsage(context.Background(), store.UsageQuery{Project: project}, 0, 0)
		if err != nil {
			return false, err.Error()
		}
		return len(rows) >= want, fmt.Sprintf("%d rows", len(rows))
	})
	return rows
}

func TestTenancyLimitsAndBudgets(t *testing.T) {
	tc := newTenancyCluster(t)
	st := tc.store()
	body := fmt.Sprintf(chatBody, 20)
	worst := float64(request.EstimatePromptTokens(len(body), false)+20) / 1000

	t.Run("100 parallel requests against a budget that admits 10", func(t *testing.T) {
		budget := 10.5 * worst
		key := tc.newKey(st, "budget", store.Project{}, store.APIKey{},
			&store.Budget{Period: store.PeriodDay, Amount: budget, OnExhausted: store.OnExhaustedRefuse})
		results := tc.parallel(key, "budget", 100, body)
		ok := 0
		for _, r := range results {
			if strings.Contains(r.body, key) {
				t.Errorf("a response body holds the API key: %s", r.body)
			}
			switch r.status {
			case http.StatusOK:
				ok++
			case http.StatusPaymentRequired:
				if !strings.Contains(r.body, `"code":"budget_exceeded"`) || !strings.Contains(r.body, `budget of project \"budget\"`) {
					t.Errorf("402 body is not the budget error: %s", r.body)
				}
			default:
				t.Errorf("request %s: status %d: %s", r.id, r.status, r.body)
			}
		}
		if ok < 10 || ok == 100 {
			t.Errorf("%d requests succeeded; want at least the 10 the budget admits, and refusals", ok)
		}
		var spent float64
		for _, row := range tc.rows(st, "budget", 100) {
			spent += row.Cost
		}
		if spent > budget+1e-9 {
			t.Errorf("recorded spend %.6f exceeds the budget %.6f", spent, budget)
		}
		t.Logf("budget %.4f: %d admitted, recorded spend %.4f", budget, ok, spent)
	})

	t.Run("an unknown key is not echoed", func(t *testing.T) {
		bogus, _, _ := spec.NewAPIKey()
		tc.AddSecret(bogus)
		r := tc.post(context.Background(), bogus, "bogus-1", body)
		if r.status != http.StatusUnauthorized || strings.Contains(r.body, bogus) || strings.Contains(r.body, bogus[len(bogus)-8:]) {
			t.Errorf("unknown key: status %d, body %s", r.status, r.body)
		}
	})

	t.Run("20 parallel requests against a 1000 TPM limit", func(t *testing.T) {
		key := tc.newKey(st, "tpm", store.Project{}, store.APIKey{TPM: 1000}, nil)
		// Each worst case is the body's bytes + 256 + 10 (about 370
		// tokens): two fit the minute at once.
		body := fmt.Sprintf(chatBody, 10)
		results := tc.parallel(key, "tpm", 20, body)
		tokens, ok := 0, 0
		for _, r := range results {
			switch r.status {
			case http.StatusOK:
				ok++
				tokens += r.usage.PromptTokens + r.usage.CompletionTokens
			case http.StatusTooManyRequests:
				if r.header.Get("Retry-After") == "" || r.header.Get("X-Ratelimit-Limit-Tokens") != "1000" ||
					!strings.Contains(r.body, `"code":"rate_limit_exceeded"`) {
					t.Errorf("429 without Retry-After, x-ratelimit headers or the OpenAI code: %v %s", r.header, r.body)
				}
			default:
				t.Errorf("request %s: status %d: %s", r.id, r.status, r.body)
			}
		}
		if ok == 0 || tokens > 1000 {
			t.Errorf("%d requests admitted using %d tokens; want some, within 1000", ok, tokens)
		}
		t.Logf("TPM 1000: %d admitted, %d tokens used", ok, tokens)
	})

	t.Run("a client that leaves mid-stream", func(t *testing.T) {
		long := `{"model":"sim-priced","max_tokens":2000,"stream":true,"messages":[{"role":"user","content":"tell a long story"}]}`
		worstLong := float64(request.EstimatePromptTokens(len(long), false)+2000) / 1000
		// The total budget holds one worst case: a second stream is
		// admitted only if the first one's reservation was released.
		key := tc.newKey(st, "stream", store.Project{}, store.APIKey{},
			&store.Budget{Period: store.PeriodTotal, Amount: worstLong * 1.5, OnExhausted: store.OnExhaustedRefuse})
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, tc.Client+"/chat/completions", strings.NewReader(long))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("X-Request-Id", "abandoned-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		for i := 0; i < 5; i++ { // a few events in
			if _, err := br.ReadString('\n'); err != nil {
				t.Fatalf("reading the stream: %v", err)
			}
		}
		cancel()
		resp.Body.Close()
		engine := tc.engineURL()
		testcluster.WaitFor(t, "the engine to drop the abandoned request", 5*time.Second, func() (bool, string) {
			running := engineGauge(engine, "vllm:num_requests_running")
			return running == 0, fmt.Sprintf("running %v", running)
		})
		var row store.UsageRow
		for _, r := range tc.rows(st, "stream", 1) {
			if r.RequestID == "abandoned-1" {
				row = r
			}
		}
		if row.Status != 499 || row.CompletionTokens < 1 || row.CompletionTokens > 100 || row.Cost <= 0 {
			t.Errorf("usage row of the abandoned stream = %+v; want status 499 and the tokens relayed", row)
		}
		r := tc.post(context.Background(), key, "after-abandon", strings.Replace(long, `"stream":true`, `"stream":false`, 1))
		if r.status != http.StatusOK {
			t.Errorf("the abandoned stream's reservation was not released: %d %s", r.status, r.body)
		}
	})
}

// engineURL returns the base URL of the priced model's engine.
func (tc *tenancyCluster) engineURL() string {
	reps, err := tc.ManageClient().ListReplicas(context.Background(), &managev1.ListReplicasRequest{})
	if err != nil {
		tc.t.Fatal(err)
	}
	for _, r := range reps.GetReplicas() {
		if r.GetModel() == "sim-priced" && len(r.GetShards()) > 0 {
			return r.GetShards()[0].GetEndpoint()
		}
	}
	tc.t.Fatal("no replica of sim-priced")
	return ""
}

// engineGauge reads one unlabelled-or-labelled gauge from an engine's
// /metrics; -1 when it cannot be read.
func engineGauge(base, name string) float64 {
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	resp, err := http.Get(strings.TrimSuffix(base, "/") + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{") {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// load sends requests from a few clients until stop closes and returns
// every request that completed with 200.
func (tc *tenancyCluster) load(key, prefix string, stop <-chan struct{}) <-chan []result {
	out := make(chan []result, 1)
	go func() {
		var mu sync.Mutex
		var done []result
		var wg sync.WaitGroup
		for c := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					r := tc.post(context.Background(), key, fmt.Sprintf("%s-%d-%d", prefix, c, i), fmt.Sprintf(chatBody, 5))
					if r.status == http.StatusOK {
						mu.Lock()
						done = append(done, r)
						mu.Unlock()
					}
					if r.status == -1 {
						return // the server is gone
					}
				}
			}()
		}
		wg.Wait()
		out <- done
	}()
	return out
}

// TestUsageSurvivesStop: after SIGTERM under load every completed request
// has its usage row; after SIGKILL at most the last second is missing.
func TestUsageSurvivesStop(t *testing.T) {
	tc := newTenancyCluster(t)
	st := tc.store()
	key := tc.newKey(st, "load", store.Project{}, store.APIKey{}, nil)

	missing := func(completed []result) (map[string]bool, []result) {
		rows, err := st.ListUsage(context.Background(), store.UsageQuery{Project: "load"}, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, r := range rows {
			have[r.RequestID] = true
		}
		var lost []result
		for _, r := range completed {
			if !have[r.id] {
				lost = append(lost, r)
			}
		}
		return have, lost
	}

	// SIGTERM: nothing that completed is lost.
	stop := make(chan struct{})
	results := tc.load(key, "term", stop)
	waitCompleted(t, tc, st, "load", 30)
	tc.StopServer()
	close(stop)
	completed := <-results
	if _, lost := missing(completed); len(lost) > 0 {
		t.Errorf("SIGTERM: %d of %d completed requests have no usage row (first %s)", len(lost), len(completed), lost[0].id)
	}
	t.Logf("SIGTERM: %d completed requests, all recorded", len(completed))

	// SIGKILL: only requests that completed in the last second may be lost.
	tc.StartServer()
	tc.waitServing()
	stop = make(chan struct{})
	results = tc.load(key, "kill", stop)
	waitCompleted(t, tc, st, "load", len(completed)+30)
	if err := tc.Server.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-tc.Server.Done
	close(stop)
	completedKill := <-results
	_, lost := missing(completedKill)
	for _, r := range lost {
		if killed.Sub(r.at) > time.Second {
			t.Errorf("SIGKILL: request %s completed %s before the kill and has no usage row", r.id, killed.Sub(r.at))
		}
	}
	t.Logf("SIGKILL: %d completed requests, %d without a row (all within the last second)", len(completedKill), len(lost))
	tc.StartServer() // so the cleanup's metrics scan has a server to read
}

// waitCompleted waits until the store holds n usage rows of the project:
// the load is running and being recorded.
func waitCompleted(t *testing.T, tc *tenancyCluster, st store.Store, project string, n int) {
	t.Helper()
	testcluster.WaitFor(t, fmt.Sprintf("%d recorded requests", n), 60*time.Second, func() (bool, string) {
		rows, err := st.SummarizeUsage(context.Background(), store.UsageQuery{Project: project})
		if err != nil || len(rows) == 0 {
			return false, fmt.Sprint(err)
		}
		return rows[0].Requests >= int64(n), fmt.Sprintf("%d rows", rows[0].Requests)
	})
}
