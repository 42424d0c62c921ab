package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/auth"
	"github.com/llmgw/llmgw/runtime/keys"
	"github.com/llmgw/llmgw/runtime/metrics"
	"github.com/llmgw/llmgw/runtime/models"
	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/runtime/tenancy"
	"github.com/llmgw/llmgw/spec"
)

// BenchmarkProxyAccounted is BenchmarkProxyNonStreaming with everything a
// production request goes through: a key authenticated over a SQLite
// store, key and project rate limits, a priced budget reserved and
// settled, the usage recorder, request metrics, the real catalog. Its
// allocations and CPU profile are the gateway's own cost per request
// (`go test -bench ProxyAccounted -cpuprofile`).
func BenchmarkProxyAccounted(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`)
	}))
	defer up.Close()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	k, err := keys.New(st).CreateAPIKey(ctx, store.DefaultProject, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := st.UpdateProject(ctx, store.Project{Name: store.DefaultProject, RPM: 1e9, TPM: 1e12}); err != nil {
		b.Fatal(err)
	}
	if err := st.SetAPIKeyLimits(ctx, k.ID, 1e9, 1e12); err != nil {
		b.Fatal(err)
	}
	if err := st.PutBudget(ctx, store.Budget{Project: store.DefaultProject, Period: store.PeriodMonth, Amount: 1e12, OnExhausted: store.OnExhaustedRefuse}); err != nil {
		b.Fatal(err)
	}
	reg, err := models.New([]spec.Model{catalogModel("coder-3b", "coder", 0.001)}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	prices := tenancy.Prices{Models: reg}
	rec := tenancy.NewRecorder(tenancy.RecorderOptions{Store: st, Price: prices.Cost})
	defer func() { _ = rec.Close(ctx) }()
	adm := tenancy.NewAdmission(tenancy.Options{Store: st, Models: reg, Pending: rec})
	mr := metrics.New()
	obs, err := metrics.NewObserver(mr)
	if err != nil {
		b.Fatal(err)
	}
	rt := router.New()
	rt.SetEndpoints("coder-3b", []router.Endpoint{{ReplicaID: "r", URL: up.URL, Weight: 1}})
	gw := New(Config{}, Deps{Catalog: &countingCatalog{r: reg}, Auth: auth.NewKeys(st, time.Minute, nil), Routes: rt,
		Admission: adm, Observer: Observers{rec, obs}})
	defer gw.Close()
	srv := httptest.NewServer(gw.Handler())
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	body := `{"model":"coder","messages":[{"role":"user","content":"hello there"}],"max_tokens":16}`
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+k.Secret)
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	})
}
