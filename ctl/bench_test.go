package ctl

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/sim/simengine"
)

// TestBenchSavesWeight runs ctl bench against a sim engine standing in for
// the client API (it speaks the same OpenAI API): with two sequences at
// once and 160 ms answers, two requests at once meet a 100 ms p90 time to
// first token and four do not, so one replica carries 2, and --save
// records weight 2 on the profile its replica runs.
func TestBenchSavesWeight(t *testing.T) {
	const coder = "qwen2.5-coder-3b-instruct"
	eng, err := simengine.New(simengine.Config{ServedModelName: coder, MaxNumSeqs: 2, DecodeTokensPerSec: 100}, nil)
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(eng.Handler())
	t.Cleanup(api.Close)
	f := cannedManage()
	for _, r := range f.replicas {
		r.EngineLoad = nil // engines that publish no metrics
	}
	env := startServer(t, f)
	env[EnvBaseURL] = api.URL + "/v1"
	env[EnvAPIKey] = "sk-bench"

	code, out, errOut := runCtl(t, env, "bench", coder, "--target", "100ms", "--requests", "3", "--max-tokens", "16", "--max-concurrency", "8")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	for _, want := range []string{"CONCURRENCY", "capacity: 2 requests at once over 1 replica at p90 ≤ 100ms: weight 2 per replica (profile cpu)", "put weight: 2 in the profile",
		"the engines publish no load metrics: measured from the outside only"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	f.mu.Lock()
	if len(f.updated) != 0 {
		t.Errorf("without --save the model was updated: %v", f.updated)
	}
	f.mu.Unlock()

	code, out, errOut = runCtl(t, env, "bench", coder, "--save", "--target", "100ms", "--requests", "3", "--max-tokens", "16", "--max-concurrency", "8")
	if code != 0 {
		t.Fatalf("--save: exit %d, stderr:\n%s", code, errOut)
	}
	if !strings.Contains(out, "saved weight 2 on profile cpu of "+coder) {
		t.Errorf("--save output:\n%s", out)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.updated) != 1 || len(f.updated[0].GetProfiles()) != 1 || f.updated[0].GetProfiles()[0].GetWeight() != 2 {
		t.Fatalf("updated %v, want the model with profile cpu at weight 2", f.updated)
	}
	if m := f.updated[0]; m.GetOrigin() != "" || m.GetStatus() != nil || m.GetSource() == "" {
		t.Errorf("sent %v, want the stored definition without what the server reports", m)
	}
}

func TestBenchRefusals(t *testing.T) {
	f := cannedManage()
	env := startServer(t, f)
	if code, _, errOut := runCtl(t, env, "bench", "qwen2.5-coder-3b-instruct"); code != 2 || !strings.Contains(errOut, "no client API: set --base-url or LLMGW_BASE_URL") {
		t.Errorf("without a client API: exit %d, stderr %q", code, errOut)
	}
	env[EnvBaseURL] = "http://127.0.0.1:1/v1"
	if code, _, errOut := runCtl(t, env, "bench", "qwen2.5-coder-3b-instruct"); code != 2 || !strings.Contains(errOut, "no API key") {
		t.Errorf("without a key: exit %d, stderr %q", code, errOut)
	}
	env[EnvAPIKey] = "sk"
	if code, _, errOut := runCtl(t, env, "bench", "llama-3.1-70b"); code != 1 || !strings.Contains(errOut, "benchmarking model llama-3.1-70b: it has no ready replica") {
		t.Errorf("a model with no ready replica: exit %d, stderr %q", code, errOut)
	}
}

// benchAPI serves a sim engine as the client API ctl bench measures: seqs
// sequences at once, 160 ms answers of 16 tokens.
func benchAPI(t *testing.T, f *fakeManage, seqs int) map[string]string {
	t.Helper()
	return benchAPIServing(t, f, seqs, nil)
}

// benchAPIServing is benchAPI with the requests in flight counted in
// inflight (when not nil).
func benchAPIServing(t *testing.T, f *fakeManage, seqs int, inflight *atomic.Int64) map[string]string {
	t.Helper()
	eng, err := simengine.New(simengine.Config{ServedModelName: "qwen2.5-coder-3b-instruct", MaxNumSeqs: seqs, DecodeTokensPerSec: 100}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := eng.Handler()
	if inflight != nil {
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inflight.Add(1)
			defer inflight.Add(-1)
			inner.ServeHTTP(w, r)
		})
	}
	api := httptest.NewServer(h)
	t.Cleanup(api.Close)
	env := startServer(t, f)
	env[EnvBaseURL] = api.URL + "/v1"
	env[EnvAPIKey] = "sk-bench"
	return env
}

// TestBenchNarrowsBetweenLevels: with three sequences at once, 4 misses
// after 2 met, and the run tries 3, which meets: the capacity is 3, not
// the 2 doubling alone finds.
func TestBenchNarrowsBetweenLevels(t *testing.T) {
	f := cannedManage()
	env := benchAPI(t, f, 3)
	code, out, errOut := runCtl(t, env, "bench", "qwen2.5-coder-3b-instruct", "--target", "100ms", "--requests", "3", "--max-tokens", "16", "--max-concurrency", "8")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	if !strings.Contains(out, "capacity: 3 requests at once over 1 replica at p90 ≤ 100ms: weight 3 per replica") {
		t.Errorf("output:\n%s", out)
	}
}

// TestBenchPoolChanged: a replica that became ready during the run (the
// autoscaler answering the benchmark's load) stops it: nothing is given
// or saved per replica.
func TestBenchPoolChanged(t *testing.T) {
	f := cannedManage()
	for _, m := range f.models {
		if m.GetName() == "qwen2.5-coder-3b-instruct" {
			m.Scaling = &managev1.Scaling{Min: 1, Max: 3}
		}
	}
	second := proto.Clone(f.replicas[0]).(*managev1.Replica)
	second.Id = "r-coder-2"
	f.relisted = append(slices.Clone(f.replicas), second)
	env := benchAPI(t, f, 2)
	code, out, errOut := runCtl(t, env, "bench", "qwen2.5-coder-3b-instruct", "--save", "--target", "100ms", "--requests", "2", "--max-tokens", "16", "--max-concurrency", "8")
	if code != 1 || !strings.Contains(errOut, "its ready replicas changed during the run (1 replica before, 2 after") ||
		!strings.Contains(errOut, "llmgw ctl scale qwen2.5-coder-3b-instruct 1)") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	if strings.Contains(out, "capacity:") {
		t.Errorf("a capacity was given over a changed pool:\n%s", out)
	}
	if !strings.Contains(out, "note: qwen2.5-coder-3b-instruct scales between 1 and 3 replicas, and may gain one under this load, which stops the run; to hold it: llmgw ctl scale qwen2.5-coder-3b-instruct 1 (afterwards: llmgw ctl scale qwen2.5-coder-3b-instruct 1 --max 3)") {
		t.Errorf("no note before the run on a model that scales:\n%s", out)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.updated) != 0 {
		t.Errorf("saved over a changed pool: %v", f.updated)
	}
}

// TestBenchStopsAtMaxConcurrency: a --max-concurrency that doubling
// passes over (6 after 4) is itself tried.
func TestBenchStopsAtMaxConcurrency(t *testing.T) {
	f := cannedManage()
	env := benchAPI(t, f, 8)
	code, out, errOut := runCtl(t, env, "bench", "qwen2.5-coder-3b-instruct", "--target", "1s", "--requests", "2", "--max-tokens", "16", "--max-concurrency", "6")
	if code != 0 || !strings.Contains(out, "capacity: 6 requests at once") || !strings.Contains(out, "up to --max-concurrency 6: the capacity is at least that") {
		t.Errorf("exit %d, stdout:\n%s\nstderr %q", code, out, errOut)
	}
}

// TestBenchKVFullAndStaleReadings: a level through which a KV cache stays
// full is missed; readings the control plane took before a level began do
// not count for it, and a run with only such readings says so.
func TestBenchKVFullAndStaleReadings(t *testing.T) {
	was := benchLoadEvery
	benchLoadEvery = 10 * time.Millisecond
	t.Cleanup(func() { benchLoadEvery = was })
	var inflight, stamp atomic.Int64
	f := cannedManage()
	f.engineLoad = func() *managev1.EngineLoad {
		kv := 0.4
		if inflight.Load() >= 2 {
			kv = 0.97
		}
		return &managev1.EngineLoad{Running: inflight.Load(), KvCacheUsage: kv, ScrapedUnixMs: stamp.Add(1)}
	}
	env := benchAPIServing(t, f, 8, &inflight)
	args := []string{"bench", "qwen2.5-coder-3b-instruct", "--target", "1s", "--requests", "3", "--max-tokens", "16", "--max-concurrency", "8"}
	code, out, errOut := runCtl(t, env, args...)
	if code != 0 || !strings.Contains(out, "missed: a KV cache was full") || !strings.Contains(out, "capacity: 1 request at once") {
		t.Errorf("KV full from 2 at once: exit %d, stdout:\n%s\nstderr %q", code, out, errOut)
	}
	// The same engines, read once before the run and never again: what
	// they said counts for no level.
	f.engineLoad = func() *managev1.EngineLoad {
		return &managev1.EngineLoad{Running: 1, Waiting: 5, KvCacheUsage: 0.99, ScrapedUnixMs: 42}
	}
	code, out, errOut = runCtl(t, env, args...)
	if code != 0 || !strings.Contains(out, "capacity: 8 requests at once") || !strings.Contains(out, "no reading of the engines' load was taken after a level began") {
		t.Errorf("stale readings: exit %d, stdout:\n%s\nstderr %q", code, out, errOut)
	}
}

// TestBenchTwoProfiles: ready replicas of two profiles are measured
// together: the weight printed is said to be their average, and --save
// refuses rather than give both the same.
func TestBenchTwoProfiles(t *testing.T) {
	f := cannedManage()
	gpu := proto.Clone(f.replicas[0]).(*managev1.Replica)
	gpu.Id, gpu.Profile = "r-coder-2", "gpu"
	f.replicas = append(f.replicas, gpu)
	env := benchAPI(t, f, 2)
	args := []string{"bench", "qwen2.5-coder-3b-instruct", "--target", "100ms", "--requests", "2", "--max-tokens", "16", "--max-concurrency", "8"}
	code, out, errOut := runCtl(t, env, args...)
	if code != 0 || !strings.Contains(out, "the ready replicas run 2 profiles (cpu, gpu): the weight is the pool's under their present weights") ||
		strings.Contains(out, "--save") {
		t.Errorf("exit %d, stdout:\n%s\nstderr %q", code, out, errOut)
	}
	code, out, errOut = runCtl(t, env, append(args, "--save")...)
	if code != 1 || !strings.Contains(errOut, "its ready replicas run profiles cpu, gpu, which one run cannot tell apart; nothing measured") ||
		strings.Contains(out, "CONCURRENCY") {
		t.Errorf("--save: exit %d, stdout %q, stderr %q; want refused before any level", code, out, errOut)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.updated) != 0 {
		t.Errorf("saved one weight for two profiles: %v", f.updated)
	}
}

// TestBenchEngineQueue: engines that say they queue requests past one at a
// time make that level a miss, though its time to first token met the
// target: the capacity is 1 where the latency alone gave 8.
func TestBenchEngineQueue(t *testing.T) {
	was := benchLoadEvery
	benchLoadEvery = 10 * time.Millisecond
	t.Cleanup(func() { benchLoadEvery = was })
	var inflight atomic.Int64
	f := cannedManage()
	// The engine says it runs one request and queues the rest.
	var stamp atomic.Int64
	f.engineLoad = func() *managev1.EngineLoad {
		n := inflight.Load()
		return &managev1.EngineLoad{Running: min(n, 1), Waiting: max(n-1, 0), KvCacheUsage: 0.4, ScrapedUnixMs: stamp.Add(1)}
	}
	env := benchAPIServing(t, f, 8, &inflight)
	code, out, errOut := runCtl(t, env, "bench", "qwen2.5-coder-3b-instruct", "--target", "1s", "--requests", "3", "--max-tokens", "16", "--max-concurrency", "8")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	for _, want := range []string{"QUEUED", "missed: the engines queued requests", "capacity: 1 request at once over 1 replica at p90 ≤ 1s: weight 1 per replica"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "publish no load metrics") {
		t.Errorf("said the engines publish no metrics:\n%s", out)
	}
}
