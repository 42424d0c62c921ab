package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/metrics"
	"github.com/llmgw/llmgw/runtime/models"
	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/runtime/tenancy"
	"github.com/llmgw/llmgw/sim/simengine"
	"github.com/llmgw/llmgw/spec"
)

// countingCatalog is the real catalog (models.Registry) counting every
// look into it, by whichever part of the request path, through any of its
// request-path methods.
type countingCatalog struct {
	r     *models.Registry
	looks atomic.Int64
}

func (c *countingCatalog) Lookup(name string) (request.Model, bool) {
	c.looks.Add(1)
	return c.r.Lookup(name)
}

func (c *countingCatalog) Resolve(name string) (string, bool) {
	c.looks.Add(1)
	return c.r.Resolve(name)
}

func (c *countingCatalog) Terms(name string) (*spec.Pricing, request.Limits, bool) {
	c.looks.Add(1)
	return c.r.Terms(name)
}

func (c *countingCatalog) List() []ModelInfo {
	var out []ModelInfo
	for _, e := range c.r.List() {
		out = append(out, ModelInfo{ID: e.Model.Name, Aliases: e.Model.Aliases})
	}
	return out
}

func catalogModel(name, alias string, price float64) spec.Model {
	return spec.Model{Name: name, Aliases: []string{alias}, Source: "sim://" + name, MaxOutput: 64, ContextLength: 8192,
		Pricing: &spec.Pricing{PromptPer1K: price, CompletionPer1K: price}, Scaling: spec.Scaling{Min: 1, Max: 1},
		Profiles: []spec.Profile{{Name: "p", Engine: "sim", GPUClass: "h100-80g", TP: 1}}}
}

// TestOneCatalogLookupPerRequest: a request consults the catalog once,
// wired as the server wires it (the gateway's lookup, admission with
// limits, a priced budget and allowed_models naming an alias, the usage
// recorder pricing with the catalog, metrics), on every spending route,
// streamed or not, and for a thread; a request a spent budget sends to
// its fallback model looks up that model once more, and no more.
func TestOneCatalogLookupPerRequest(t *testing.T) {
	reg, err := models.New([]spec.Model{catalogModel("coder-3b", "coder", 0.001), catalogModel("small", "tiny", 0.0001)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cat := &countingCatalog{r: reg}
	st := contentStore(t, 24)
	ctx := t.Context()
	if err := st.UpdateProject(ctx, store.Project{Name: "proj", RPM: 1_000_000, TPM: 1_000_000_000, AllowedModels: []string{"coder", "tiny"}}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutBudget(ctx, store.Budget{Project: "proj", Period: store.PeriodMonth, Amount: 1e9, OnExhausted: store.OnExhaustedFallback, FallbackModel: "tiny", FallbackAllowance: 1e9}); err != nil {
		t.Fatal(err)
	}
	prices := tenancy.Prices{Models: cat}
	rec := tenancy.NewRecorder(tenancy.RecorderOptions{Store: st, Price: prices.Cost, FlushInterval: time.Hour})
	t.Cleanup(func() { _ = rec.Close(context.Background()) })
	adm := tenancy.NewAdmission(tenancy.Options{Store: st, Models: cat, Pending: rec, CacheTTL: time.Hour})
	obs, err := metrics.NewObserver(metrics.New())
	if err != nil {
		t.Fatal(err)
	}

	rt := router.New()
	for _, m := range []string{"coder-3b", "small"} {
		eng, err := simengine.New(simengine.Config{ServedModelName: m, EOSAfter: 5}, nil)
		if err != nil {
			t.Fatal(err)
		}
		es := httptest.NewServer(eng.Handler())
		t.Cleanup(es.Close)
		rt.SetEndpoints(m, []router.Endpoint{{ReplicaID: m, URL: es.URL, Weight: 1}})
	}
	records := make(chan request.Record, 16)
	gw := New(Config{}, Deps{Catalog: cat, Auth: testAuth{}, Routes: rt, Admission: adm, Content: st,
		Observer: Observers{rec, obs, ObserverFunc(func(r request.Record) { records <- r })}})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() { srv.Close(); gw.Close() })

	const chat = `{"model":"coder","max_tokens":5,"messages":[{"role":"user","content":"hi"}]`
	requests := []struct {
		name, path, body, thread string
	}{
		{"chat", "/v1/chat/completions", chat + `}`, ""},
		{"chat stream", "/v1/chat/completions", chat + `,"stream":true}`, ""},
		{"completions", "/v1/completions", `{"model":"coder","max_tokens":5,"prompt":"hi"}`, ""},
		{"messages", "/v1/messages", messagesBody, ""},
		{"responses", "/v1/responses", responsesBody, ""},
		{"thread", "/v1/chat/completions", chat + `}`, "t-1"},
	}
	send := func(t *testing.T, path, body, thread string) request.Record {
		t.Helper()
		h := bearer(testKey)
		if thread != "" {
			h[threadHeader] = thread
		}
		if c := do(t, http.MethodPost, srv.URL+path, h, body); c.status != http.StatusOK {
			t.Fatalf("status %d: %s", c.status, c.raw)
		}
		return <-records
	}
	// The first request of a project reads its settings and budgets;
	// what is counted is the steady state.
	send(t, "/v1/chat/completions", chat+`}`, "")
	for _, r := range requests {
		t.Run(r.name, func(t *testing.T) {
			cat.looks.Store(0)
			got := send(t, r.path, r.body, r.thread)
			if n := cat.looks.Load(); n != 1 {
				t.Errorf("%d catalog lookups for one request; want 1", n)
			}
			if got.Model != "coder-3b" || !got.Priced || got.Cost <= 0 {
				t.Errorf("record %+v: want coder-3b, priced", got)
			}
		})
	}

	// The budget spent: the request is served by the fallback, whose
	// lookup is the one more.
	if err := st.PutBudget(ctx, store.Budget{Project: "proj", Period: store.PeriodMonth, Amount: 0, OnExhausted: store.OnExhaustedFallback, FallbackModel: "tiny", FallbackAllowance: 1e9}); err != nil {
		t.Fatal(err)
	}
	adm.Invalidate("proj")
	send(t, "/v1/chat/completions", chat+`}`, "") // reads the budget again
	for _, r := range requests {
		t.Run(r.name+" fallback", func(t *testing.T) {
			cat.looks.Store(0)
			got := send(t, r.path, r.body, r.thread)
			if n := cat.looks.Load(); n != 2 {
				t.Errorf("%d catalog lookups for a request served by the fallback; want 2", n)
			}
			if got.Model != "small" || got.Requested != "coder-3b" || !got.Priced {
				t.Errorf("record %+v: want small in place of coder-3b, priced", got)
			}
		})
	}
}
