package tenancy_test

// The budget invariant end to end on one control plane: real HTTP through
// the gateway, admission and the usage recorder on a real store (SQLite and
// PostgreSQL), and sim engines, one of which generates past the max_tokens
// it is sent. Run with -race.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmgw/llmgw/runtime/gateway"
	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/runtime/tenancy"
	"github.com/llmgw/llmgw/sim/simengine"
	"github.com/llmgw/llmgw/spec"
	"github.com/llmgw/llmgw/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// catalog: "big" costs 1 per 1,000 tokens either way, "small" 0.1 and is
// also called "chat". Both produce at most 64 tokens per answer.
type catalog struct{}

var prices = map[string]spec.Pricing{
	"big":   {PromptPer1K: 1, CompletionPer1K: 1},
	"small": {PromptPer1K: 0.1, CompletionPer1K: 0.1},
}

var limits = request.Limits{MaxOutput: 64, ContextLength: 4096}

func (catalog) Resolve(name string) (string, bool) {
	if name == "chat" {
		return "small", true
	}
	_, ok := prices[name]
	return name, ok
}

func (catalog) List() []gateway.ModelInfo {
	return []gateway.ModelInfo{{ID: "big"}, {ID: "small", Aliases: []string{"chat"}}}
}

func (c catalog) Lookup(name string) (request.Model, bool) {
	canonical, ok := c.Resolve(name)
	if !ok {
		return request.Model{}, false
	}
	m := request.Model{Name: canonical, Limits: limits}
	if canonical == "small" {
		m.Aliases = []string{"chat"}
	}
	m.Price, _, _ = c.Terms(canonical)
	return m, true
}

func (catalog) Terms(name string) (*spec.Pricing, request.Limits, bool) {
	p, ok := prices[name]
	return &p, limits, ok
}

// auth accepts any key as project "p".
type auth struct{}

func (auth) Authenticate(context.Context, string) (request.Principal, error) {
	return request.Principal{KeyID: "key-1", Project: "p"}, nil
}

type stack struct {
	url       string
	st        store.Store
	admission *tenancy.Admission
	recorder  *tenancy.Recorder
	gw        *gateway.Gateway
}

// newStack starts sim engines for big and small (both generating overshoot
// tokens past max_tokens), and a gateway with admission and the usage recorder
// on st, whose project "p" has budget b.
func newStack(t *testing.T, st store.Store, b store.Budget, overshoot int) *stack {
	t.Helper()
	ctx := t.Context()
	if err := st.CreateProject(ctx, store.Project{Name: "p"}); err != nil {
		t.Fatal(err)
	}
	b.Project = "p"
	if err := st.PutBudget(ctx, b); err != nil {
		t.Fatal(err)
	}
	return startStack(t, st, overshoot, 2000, nil, "")
}

// startStack starts the sim engines (tps tokens a second) and a gateway with admission (options
// changed by opt, when set) and a recorder writing rows for holder.
func startStack(t *testing.T, st store.Store, overshoot int, tps float64, opt func(*tenancy.Options), holder string) *stack {
	t.Helper()
	rt := router.New()
	for _, m := range []string{"big", "small"} {
		cfg := simengine.Config{ServedModelName: m, DecodeTokensPerSec: tps, OvershootTokens: overshoot}
		e, err := simengine.New(cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(e.Handler())
		t.Cleanup(srv.Close)
		rt.SetEndpoints(m, []router.Endpoint{{ReplicaID: m + "-1", URL: srv.URL, Weight: 1}})
	}
	s := &stack{st: st}
	opts := tenancy.Options{Store: st, Models: catalog{}}
	if opt != nil {
		opt(&opts)
	}
	s.admission = tenancy.NewAdmission(opts)
	s.recorder = tenancy.NewRecorder(tenancy.RecorderOptions{Store: st, Price: s.admission.Cost, Holder: holder})
	s.gw = gateway.New(gateway.Config{}, gateway.Deps{Catalog: catalog{}, Auth: auth{}, Routes: rt,
		Admission: s.admission, Observer: s.recorder, Content: st})
	srv := httptest.NewServer(s.gw.Handler())
	t.Cleanup(func() { srv.Close(); s.gw.Close() })
	s.url = srv.URL
	return s
}

// reply is what a client saw of one request.
type reply struct {
	status int
	model  string
	// tokens is the completion tokens the client received; finish the
	// last finish_reason.
	tokens int
	finish string
	done   bool
}

// post sends one chat request and reads the answer, streamed or not.
func (s *stack) post(t *testing.T, body string, stream bool) reply {
	req, err := http.NewRequest(http.MethodPost, s.url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return reply{}
	}
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return reply{}
	}
	defer resp.Body.Close()
	r := reply{status: resp.StatusCode}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return r
	}
	if !stream {
		var c struct {
			Model   string `json:"model"`
			Choices []struct {
				Message      struct{ Content string } `json:"message"`
				FinishReason string                   `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || len(c.Choices) != 1 {
			t.Errorf("decoding the answer: %v", err)
			return r
		}
		r.model, r.finish = c.Model, c.Choices[0].FinishReason
		r.tokens = len(strings.Fields(c.Choices[0].Message.Content))
		return r
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			r.done = true
			continue
		}
		var c struct {
			Model   string `json:"model"`
			Choices []struct {
				Delta        struct{ Content string } `json:"delta"`
				FinishReason *string                  `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Errorf("chunk %s: %v", data, err)
			continue
		}
		r.model = c.Model
		for _, ch := range c.Choices {
			if ch.Delta.Content != "" {
				r.tokens++
			}
			if ch.FinishReason != nil {
				r.finish = *ch.FinishReason
			}
		}
	}
	return r
}

// burst sends n requests at once, every other one streamed.
func (s *stack) burst(t *testing.T, n int, body func(stream bool) string) []reply {
	var wg sync.WaitGroup
	out := make([]reply, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			stream := i%2 == 1
			out[i] = s.post(t, body(stream), stream)
		})
	}
	close(start)
	wg.Wait()
	return out
}

// spend stops the recorder (writing every row) and returns what the
// store recorded, all and per model.
func (s *stack) spend(t *testing.T) (float64, map[string]float64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.gw.Wait(ctx); err != nil {
		t.Fatalf("requests still running: %v", err)
	}
	if err := s.recorder.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := s.st.ListUsage(ctx, store.UsageQuery{Project: "p"}, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	total, per := 0.0, map[string]float64{}
	for _, r := range rows {
		total += r.Cost
		per[r.Model] += r.Cost
	}
	return total, per
}

func chatBody(model string, maxTokens int) func(stream bool) string {
	return func(stream bool) string {
		return fmt.Sprintf(`{"model":%q,"max_tokens":%d,"stream":%v,"messages":[{"role":"user","content":"say a few words about rivers"}]}`,
			model, maxTokens, stream)
	}
}

// worstCost is what admission reserves for body on a model priced per.
func worstCost(body string, maxTokens int, per float64) float64 {
	return float64(request.EstimatePromptTokens(len(body), false)+maxTokens) * per / 1000
}

// stores runs f on SQLite and on PostgreSQL.
func stores(t *testing.T, f func(t *testing.T, st store.Store)) {
	t.Run("sqlite", func(t *testing.T) {
		st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), "llmgw.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		f(t, st)
	})
	t.Run("postgres", func(t *testing.T) {
		st, err := store.Open(t.Context(), pgtest.NewDatabase(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		f(t, st)
	})
}

// TestBurstAgainstBudget: 100 requests at once against a budget that
// admits 10 of their worst cases, on an engine that keeps to max_tokens
// and on one that generates 1,000 tokens past it (more than the prompt bound leaves spare). Recorded spend never
// passes the amount; streams from the overshooting engine end at the
// bound with finish_reason "length"; overshoot is counted, not charged.
func TestBurstAgainstBudget(t *testing.T) {
	for _, overshoot := range []int{0, 1000} {
		t.Run(fmt.Sprintf("overshoot %d", overshoot), func(t *testing.T) {
			stores(t, func(t *testing.T, st store.Store) {
				const maxTokens = 20
				body := chatBody("big", maxTokens)
				amount := 10.5 * worstCost(body(true), maxTokens, 1)
				s := newStack(t, st, store.Budget{Period: store.PeriodDay, Amount: amount, OnExhausted: store.OnExhaustedRefuse}, overshoot)
				replies := s.burst(t, 100, body)
				ok, refused := 0, 0
				for i, r := range replies {
					switch r.status {
					case http.StatusOK:
						ok++
						// A non-streamed answer is relayed as the engine
						// wrote it, overshoot included; it is charged at
						// most its reservation.
						if (i%2 == 1 || overshoot == 0) && r.tokens > maxTokens {
							t.Errorf("request %d got %d tokens, more than max_tokens %d", i, r.tokens, maxTokens)
						}
						if i%2 == 1 && (!r.done || r.finish != "length") {
							t.Errorf("stream %d ended with finish_reason %q, [DONE] %v; want length and [DONE]", i, r.finish, r.done)
						}
					case http.StatusPaymentRequired:
						refused++
					default:
						t.Errorf("request %d: status %d", i, r.status)
					}
				}
				total, _ := s.spend(t)
				t.Logf("budget %.4f: %d admitted, %d refused, recorded spend %.4f", amount, ok, refused, total)
				if ok < 10 || refused == 0 {
					t.Errorf("%d admitted, %d refused; want at least the 10 the budget admits, and refusals", ok, refused)
				}
				if total > amount+1e-9 {
					t.Errorf("recorded spend %.6f exceeds the budget %.6f", total, amount)
				}
				if overshoot > 0 {
					over := overshootTokens(t, s.admission, "big", "completion")
					if over <= 0 {
						t.Errorf("llmgw_usage_overshoot_tokens_total = %v; want the non-streamed overshoot counted", over)
					}
				}
				if b := s.admission.Budgets(); len(b) != 1 || b[0].Spent > amount+1e-9 || b[0].Reserved != 0 {
					t.Errorf("admission's account = %+v; want at most %.6f spent, nothing reserved", b, amount)
				}
			})
		})
	}
}

// TestBurstFallbackWithinAllowance: the budget is spent, and 100 requests
// at once fall back to the alias "chat" (the model "small", which
// overshoots too); what the fallback spends stays within the allowance,
// the rest are refused with 402, and everything is labelled "small".
func TestBurstFallbackWithinAllowance(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		const maxTokens = 20
		body := chatBody("big", maxTokens)
		fbWorst := worstCost(body(true), maxTokens, 0.1)
		allowance := 10.5 * fbWorst
		s := newStack(t, st, store.Budget{Period: store.PeriodTotal, Amount: 0, OnExhausted: store.OnExhaustedFallback,
			FallbackModel: "small", FallbackAllowance: allowance}, 200)
		replies := s.burst(t, 100, body)
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
		total, per := s.spend(t)
		t.Logf("allowance %.4f: %d served by the fallback, spend %v", allowance, ok, per)
		if ok < 10 || ok == 100 {
			t.Errorf("%d served by the fallback; want at least the 10 the allowance admits, and refusals", ok)
		}
		if per["big"] != 0 || total > allowance+1e-9 {
			t.Errorf("recorded spend %v; want nothing on big and at most the allowance %.6f on small", per, allowance)
		}
	})
}

// overshootTokens reads llmgw_usage_overshoot_tokens_total for a model
// and kind from admission's collector.
func overshootTokens(t *testing.T, a *tenancy.Admission, model, kind string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(a.Collector()); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "llmgw_usage_overshoot_tokens_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["model"] == model && labels["kind"] == kind {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
