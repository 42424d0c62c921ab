package ctl

import (
	"net/http/httptest"
	"strings"
	"testing"

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
	env := startServer(t, f)
	env[EnvBaseURL] = api.URL + "/v1"
	env[EnvAPIKey] = "sk-bench"

	code, out, errOut := runCtl(t, env, "bench", coder, "--target", "100ms", "--requests", "3", "--max-tokens", "16", "--max-concurrency", "8")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	for _, want := range []string{"CONCURRENCY", "capacity: 2 requests at once over 1 replica at p90 ≤ 100ms: weight 2 per replica (profile cpu)", "put weight: 2 in the profile"} {
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
