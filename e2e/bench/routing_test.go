package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	pmodel "github.com/prometheus/common/model"

	"github.com/llmgw/llmgw/runtime/gateway"
	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/runtime/router/probe"
	"github.com/llmgw/llmgw/sim/simengine"
)

// anyKey authenticates every key: the routing benchmark measures routing.
type anyKey struct{}

func (anyKey) Authenticate(context.Context, string) (request.Principal, error) {
	return request.Principal{KeyID: "bench", Project: "bench"}, nil
}

// routedPool is four sim engines behind a gateway whose router uses one
// policy, fresh (cold caches) for each measurement.
type routedPool struct {
	gw      string
	engines []string
}

// engineConfig makes the prefix cache matter: a prompt token not in the
// cache costs 0.4 ms of prefill, a cached one nothing (slow enough that a
// miss stands out of a shared machine's scheduling noise); each engine's cache
// holds 512 blocks of 16 tokens, a third of what the conversations below
// grow to (the system prompt and 24 histories of about 1,000 tokens), as
// a GPU's KV cache holds a fraction of a busy model's conversations.
var engineConfig = simengine.Config{Host: "127.0.0.1", ServedModelName: model,
	PrefillTokensPerSec: 2_500, DecodeTokensPerSec: 400, MaxNumSeqs: 8, PrefixCacheBlocks: 512}

func newRoutedPool(b *testing.B, policy router.Selector) routedPool {
	b.Helper()
	var p routedPool
	rt := router.New()
	rt.SetModel(model, router.ModelConfig{Policy: policy})
	var eps []router.Endpoint
	for i := range 4 {
		eng, err := simengine.New(engineConfig, nil)
		if err != nil {
			b.Fatal(err)
		}
		u := serve(b, eng.Handler())
		p.engines = append(p.engines, u)
		eps = append(eps, router.Endpoint{ReplicaID: fmt.Sprintf("r-%d", i), Model: model, URL: u, Weight: 1})
	}
	rt.SetEndpoints(model, eps)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	go probe.New(probe.Options{Router: rt}).Run(ctx)
	g := gateway.New(gateway.Config{}, gateway.Deps{Catalog: catalog{}, Auth: anyKey{}, Routes: rt})
	b.Cleanup(g.Close)
	p.gw = serve(b, g.Handler())
	return p
}

// cacheMisses sums, over the pool's engines, the prompt tokens their
// prefix caches were asked for and did not hold (vLLM's
// prefix_cache_queries_total minus prefix_cache_hits_total).
func (p routedPool) cacheMisses(b *testing.B) (misses, queries float64) {
	b.Helper()
	for _, u := range p.engines {
		resp, err := http.Get(u + "/metrics")
		if err != nil {
			b.Fatal(err)
		}
		parser := expfmt.NewTextParser(pmodel.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
		q := fams["vllm:prefix_cache_queries_total"].GetMetric()[0].GetCounter().GetValue()
		h := fams["vllm:prefix_cache_hits_total"].GetMetric()[0].GetCounter().GetValue()
		misses += q - h
		queries += q
	}
	return misses, queries
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// chat streams one chat completion through the gateway and returns the
// time to its first content event and the answer's text.
func chat(client *http.Client, base string, msgs []message, maxTokens int) (time.Duration, string, error) {
	payload, _ := json.Marshal(map[string]any{"model": model, "messages": msgs, "max_tokens": maxTokens, "stream": true})
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(payload))
	req.Header.Set("Authorization", "Bearer bench")
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, "", fmt.Errorf("status %d", resp.StatusCode)
	}
	var ttft time.Duration
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(data), &c) != nil || len(c.Choices) == 0 || c.Choices[0].Delta.Content == "" {
			continue
		}
		if ttft == 0 {
			ttft = time.Since(start)
		}
		text.WriteString(c.Choices[0].Delta.Content)
	}
	return ttft, text.String(), sc.Err()
}

// words returns n pseudo-random words from rng.
func words(rng *rand.Rand, n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("w%x", rng.Uint32()&0xffffff)
	}
	return strings.Join(parts, " ")
}

type ttfts []time.Duration

func (t ttfts) pct(p float64) time.Duration {
	s := append(ttfts(nil), t...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(int(p*float64(len(s))), len(s)-1)]
}

// multiTurn runs convs conversations of turns turns, each opening with the
// same system prompt of systemWords words; conversation i starts i×stagger
// after the first, and each turn follows the answer to the last after a
// short pause. It returns every turn's time to first token.
func multiTurn(b *testing.B, p routedPool, convs, turns, systemWords int) ttfts {
	b.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: time.Minute}
	system := words(rand.New(rand.NewPCG(1, 1)), systemWords)
	var mu sync.Mutex
	var all ttfts
	var wg sync.WaitGroup
	for c := range convs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(c) * 40 * time.Millisecond) // users arrive one after another
			rng := rand.New(rand.NewPCG(uint64(c)+2, 7))
			msgs := []message{{Role: "system", Content: system}}
			for range turns {
				msgs = append(msgs, message{Role: "user", Content: words(rng, 60)})
				ttft, answer, err := chat(client, p.gw, msgs, 64)
				if err != nil {
					b.Errorf("conversation %d: %v", c, err)
					return
				}
				msgs = append(msgs, message{Role: "assistant", Content: answer})
				mu.Lock()
				all = append(all, ttft)
				mu.Unlock()
				time.Sleep(20 * time.Millisecond) // the user reads
			}
		}()
	}
	wg.Wait()
	return all
}

// unrelated sends n requests, conc at a time, whose prompts share nothing,
// and returns their times to first token and the throughput.
func unrelated(b *testing.B, p routedPool, n, conc int) (ttfts, float64) {
	b.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: time.Minute}
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	var mu sync.Mutex
	var all ttfts
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				rng := rand.New(rand.NewPCG(uint64(i)+1000, 9))
				ttft, _, err := chat(client, p.gw, []message{{Role: "user", Content: words(rng, 300)}}, 16)
				if err != nil {
					b.Errorf("request %d: %v", i, err)
					return
				}
				mu.Lock()
				all = append(all, ttft)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return all, float64(n) / time.Since(start).Seconds()
}

// goal is one figure the benchmark compares with its target.
type goal struct {
	name       string
	ratio      float64
	target     float64
	atMost     bool // the ratio must be at most target (else at least)
	prefix, rr string
}

func (g goal) met() bool {
	if g.atMost {
		return g.ratio <= g.target
	}
	return g.ratio >= g.target
}

// BenchmarkPrefixRouting compares prefix-aware routing (the default
// routing profile, chat) with round-robin over four sim engines with
// prefix caches, through the gateway, in one run: on a multi-turn chat
// workload sharing a long system prompt (prefix-cache misses, p90 time to
// first token), and on requests sharing nothing (throughput, p90). Each
// figure is a ratio, prefix-aware over round-robin, printed beside its
// goal and marked MISSED when it misses it.
func BenchmarkPrefixRouting(b *testing.B) {
	const convs, turns, systemWords = 24, 8, 1500
	var out strings.Builder
	fmt.Fprintf(&out, "\nprefix-aware routing against round-robin, 4 sim engines with prefix caches, through the gateway (same run, %s)\n", time.Now().UTC().Format(time.RFC3339))
	var goals []goal

	// Shared prefix: two rounds each on fresh engines, alternating which
	// goes first, so drift in the machine's load hits both alike.
	type sharedRun struct {
		misses, queries float64
		ttft            ttfts
		p90             time.Duration
	}
	shared := map[string]*sharedRun{"round-robin": {}, "prefix": {}}
	policies := map[string]router.Selector{"round-robin": router.RoundRobin{}, "prefix": router.PrefixAffinity{}}
	for _, name := range []string{"round-robin", "prefix", "prefix", "round-robin"} {
		p := newRoutedPool(b, policies[name])
		t := multiTurn(b, p, convs, turns, systemWords)
		m, q := p.cacheMisses(b)
		r := shared[name]
		r.misses, r.queries, r.ttft = r.misses+m, r.queries+q, append(r.ttft, t...)
	}
	for _, r := range shared {
		r.p90 = r.ttft.pct(0.9)
	}
	rr, pa := shared["round-robin"], shared["prefix"]
	fmt.Fprintf(&out, "shared prefix: %d conversations × %d turns of 60 words and 64-token answers, %d-word system prompt, twice\n", convs, turns, systemWords)
	fmt.Fprintf(&out, "  prompt tokens missing the prefix cache: round-robin %.0f of %.0f (%.0f%%), prefix %.0f of %.0f (%.0f%%)\n",
		rr.misses, rr.queries, 100*rr.misses/rr.queries, pa.misses, pa.queries, 100*pa.misses/pa.queries)
	goals = append(goals,
		goal{name: "shared prefix: cache misses", ratio: pa.misses / rr.misses, target: 1.0 / 3, atMost: true,
			prefix: fmt.Sprintf("%.0f", pa.misses), rr: fmt.Sprintf("%.0f", rr.misses)},
		goal{name: "shared prefix: p90 time to first token", ratio: float64(pa.p90) / float64(rr.p90), target: 0.5, atMost: true,
			prefix: ms(pa.p90), rr: ms(rr.p90)})

	// No shared prefix: four rounds each, alternating which goes first, so
	// drift in the machine's load hits both alike.
	const n, conc, rounds = 100, 16, 4
	var rrT, paT ttfts
	var rrRPS, paRPS float64
	for round := range rounds {
		runRR := func() {
			t, rps := unrelated(b, newRoutedPool(b, router.RoundRobin{}), n, conc)
			rrT, rrRPS = append(rrT, t...), rrRPS+rps/rounds
		}
		runPA := func() {
			t, rps := unrelated(b, newRoutedPool(b, router.PrefixAffinity{}), n, conc)
			paT, paRPS = append(paT, t...), paRPS+rps/rounds
		}
		if round%2 == 0 {
			runRR()
			runPA()
		} else {
			runPA()
			runRR()
		}
	}
	fmt.Fprintf(&out, "no shared prefix: %d requests of 300 unrelated words, %d at a time, %d rounds\n", n, conc, rounds)
	goals = append(goals,
		goal{name: "no shared prefix: throughput", ratio: paRPS / rrRPS, target: 0.95,
			prefix: fmt.Sprintf("%.0f req/s", paRPS), rr: fmt.Sprintf("%.0f req/s", rrRPS)},
		goal{name: "no shared prefix: p90 time to first token", ratio: float64(paT.pct(0.9)) / float64(rrT.pct(0.9)), target: 1 / 0.95, atMost: true,
			prefix: ms(paT.pct(0.9)), rr: ms(rrT.pct(0.9))})

	fmt.Fprintf(&out, "%-44s %-14s %-14s %-8s %s\n", "figure (prefix-aware / round-robin)", "prefix", "round-robin", "ratio", "goal")
	for _, g := range goals {
		op := "≥"
		if g.atMost {
			op = "≤"
		}
		verdict := "ok"
		if !g.met() {
			verdict = "MISSED"
		}
		fmt.Fprintf(&out, "%-44s %-14s %-14s %-8.2f %s %.2f  %s\n", g.name, g.prefix, g.rr, g.ratio, op, g.target, verdict)
		b.ReportMetric(g.ratio, strings.NewReplacer(" ", "-", ":", "").Replace(g.name)+"-ratio")
	}
	fmt.Fprint(os.Stdout, out.String())
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }
