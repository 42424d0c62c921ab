package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/store"
)

// boundedModel is pricedModel with the limits of issue 16: a context of
// 8192 tokens and at most 1024 completion tokens.
var boundedModel = strings.Replace(pricedModel, "    context_length: 8192\n",
	"    context_length: 8192\n    max_output: 1024\n", 1)

// TestOneReadingOfEveryRequest attacks the request reader from the
// outside, through the real server and sim engines (issue 16, items 1 and
// 3): a repeated max_tokens must not reserve one value and generate the
// other, and a bound above what the model produces is refused.
func TestOneReadingOfEveryRequest(t *testing.T) {
	tc := newTenancyClusterOf(t, boundedModel)
	st := tc.store()
	const prompt = `"messages":[{"role":"user","content":"say something short please"}]`
	// The gateway used to reserve the first max_tokens, the engine to
	// generate the last; the sim engine (Go's encoding/json) also reads
	// MAX_TOKENS as max_tokens. Each maps to what its 400 must say.
	repeated := map[string][2]string{
		"plain":   {`{"model":"sim-priced","max_tokens":1,` + prompt + `,"max_tokens":200}`, `"param":"max_tokens"`},
		"escaped": {`{"model":"sim-priced","max_tokens":1,` + prompt + `,"max\u005ftokens":200}`, `"param":"max_tokens"`},
		"case":    {`{"model":"sim-priced","max_tokens":1,` + prompt + `,"MAX_TOKENS":200}`, `"param":"MAX_TOKENS"`},
	}

	for name, c := range repeated {
		body, refusal := c[0], c[1]
		t.Run("50 parallel requests repeating max_tokens ("+name+") against a budget of 0.35", func(t *testing.T) {
			const budget = 0.35
			project := "burst-" + name
			key := tc.newKey(st, project, store.Project{}, store.APIKey{},
				&store.Budget{Period: store.PeriodTotal, Amount: budget, OnExhausted: store.OnExhaustedRefuse})
			results := tc.parallel(key, project, 50, body)
			statuses := map[int]int{}
			for _, r := range results {
				statuses[r.status]++
				switch r.status {
				case http.StatusOK, http.StatusPaymentRequired:
				case http.StatusBadRequest:
					if !strings.Contains(r.body, refusal) {
						t.Errorf("400 does not name the key (%s): %s", refusal, r.body)
					}
				default:
					t.Errorf("request %s: status %d: %s", r.id, r.status, r.body)
				}
			}
			// A 400 is refused before the body names a model, and such a
			// request leaves no usage row (it used no model); every other
			// answer leaves one.
			var spent float64
			var completion int64
			for _, row := range tc.rows(st, project, 50-statuses[http.StatusBadRequest]) {
				spent += row.Cost
				completion += row.CompletionTokens
			}
			if spent > budget+1e-9 {
				t.Errorf("recorded spend %.4f exceeds the budget %.2f (%d completion tokens; statuses %v)", spent, budget, completion, statuses)
			}
			t.Logf("budget %.2f: statuses %v, recorded spend %.4f", budget, statuses, spent)
		})
	}

	t.Run("a key limited to 100 tokens per minute gets no more", func(t *testing.T) {
		key := tc.newKey(st, "tpm100", store.Project{}, store.APIKey{TPM: 100}, nil)
		tokens := 0
		statuses := map[int]int{}
		for _, c := range repeated {
			for _, r := range tc.parallel(key, "tpm100", 10, c[0]) {
				statuses[r.status]++
				tokens += r.usage.PromptTokens + r.usage.CompletionTokens
				if r.status != http.StatusOK && r.status != http.StatusBadRequest && r.status != http.StatusTooManyRequests {
					t.Errorf("request %s: status %d: %s", r.id, r.status, r.body)
				}
			}
		}
		if tokens > 100 {
			t.Errorf("the key received %d tokens within a minute, over its limit of 100 (statuses %v)", tokens, statuses)
		}
		t.Logf("TPM 100: statuses %v, %d tokens received", statuses, tokens)
	})

	t.Run("max_tokens above the model's max_output is refused as OpenAI refuses it", func(t *testing.T) {
		key := tc.newKey(st, "million", store.Project{}, store.APIKey{}, nil)
		for _, param := range []string{"max_tokens", "max_completion_tokens"} {
			// Before the limit held, this generated for the whole context.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			r := tc.post(ctx, key, "million-"+param, fmt.Sprintf(`{"model":"sim-priced","%s":1000000,%s}`, param, prompt))
			cancel()
			want := fmt.Sprintf(`{"error":{"message":"%[1]s is too large: 1000000. This model supports at most 1024 completion tokens, whereas you provided 1000000.","type":"invalid_request_error","param":"%[1]s","code":"invalid_value"}}`, param)
			if r.status != http.StatusBadRequest || strings.TrimSpace(r.body) != want {
				t.Errorf("%s 1000000: status %d, body %s\nwant 400 %s", param, r.status, r.body, want)
			}
		}
		// A bound within the limit is served.
		if r := tc.post(context.Background(), key, "within", fmt.Sprintf(`{"model":"sim-priced","max_tokens":20,%s}`, prompt)); r.status != http.StatusOK || r.usage.CompletionTokens != 20 {
			t.Errorf("max_tokens 20: status %d, %d completion tokens: %s", r.status, r.usage.CompletionTokens, r.body)
		}
		var charged float64
		for _, row := range tc.rows(st, "million", 3) {
			if row.RequestID != "within" {
				charged += row.Cost
			}
		}
		if charged != 0 {
			t.Errorf("the refused requests were charged %.4f", charged)
		}
	})
}
