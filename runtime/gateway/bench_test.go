package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
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
// (`go test -bench ProxyAccounted -cpuprofile`); its stream cases are the
// same for a bounded 8-token stream (max_tokens, so every event goes
// through the bound), ttfb-ns/op the time to the first body byte.
// BenchmarkBareProxy is the floor both are held to: httputil.ReverseProxy
// in front of the same engine.
func BenchmarkProxyAccounted(b *testing.B) {
	for _, c := range benchCases {
		b.Run(c.name, func(b *testing.B) { benchAccounted(b, c.stream, false, c.serial) })
	}
}

// BenchmarkBareProxy is BenchmarkProxyAccounted through a bare
// httputil.ReverseProxy (no auth, no accounting): the cost of a proxy hop
// on this machine, to hold the gateway's against.
func BenchmarkBareProxy(b *testing.B) {
	for _, c := range benchCases {
		b.Run(c.name, func(b *testing.B) { benchAccounted(b, c.stream, true, c.serial) })
	}
}

// benchCases are the loads of BenchmarkProxyAccounted and
// BenchmarkBareProxy: parallel clients (ns/op is the CPU a request costs)
// and one client at a time (ns/op is a request's latency, ttfb-ns/op the
// time to its first byte, as at a light load).
var benchCases = []struct {
	name           string
	stream, serial bool
}{{"json", false, false}, {"stream", true, false}, {"json-serial", false, true}, {"stream-serial", true, true}}

func benchAccounted(b *testing.B, stream, bare, serial bool) {
	up := benchEngine(b, stream)
	base, secret := benchFront(b, up, bare)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	body := benchBody(stream)
	var ttfb atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	one := func() {
		ttfb.Add(int64(benchOne(b, client, base, secret, body)))
	}
	if serial {
		for b.Loop() {
			one()
		}
	} else {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				one()
			}
		})
	}
	b.ReportMetric(float64(ttfb.Load())/float64(b.N), "ttfb-ns/op")
}

// BenchmarkGatewayAgainstBareProxy sends one request at a time, in turn
// through the accounted gateway and through a bare httputil.ReverseProxy
// in front of the same engine, so both see the same machine at the same
// moment, and reports each one's median time to first byte and the ratio
// gateway/bare (goal ≤ 1: the gateway costs no more than a proxy hop).
func BenchmarkGatewayAgainstBareProxy(b *testing.B) {
	for _, stream := range []bool{false, true} {
		b.Run(map[bool]string{false: "json", true: "stream"}[stream], func(b *testing.B) {
			up := benchEngine(b, stream)
			gwURL, secret := benchFront(b, up, false)
			bareURL, _ := benchFront(b, up, true)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
			body := benchBody(stream)
			var gw, bare []time.Duration
			for range 50 { // warm both
				benchOne(b, client, gwURL, secret, body)
				benchOne(b, client, bareURL, secret, body)
			}
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if i%2 == 0 {
					gw = append(gw, benchOne(b, client, gwURL, secret, body))
				} else {
					bare = append(bare, benchOne(b, client, bareURL, secret, body))
				}
			}
			if len(gw) == 0 || len(bare) == 0 {
				return
			}
			slices.Sort(gw)
			slices.Sort(bare)
			g, r := gw[len(gw)/2], bare[len(bare)/2]
			b.ReportMetric(float64(g.Nanoseconds()), "gateway-ttfb-p50-ns")
			b.ReportMetric(float64(r.Nanoseconds()), "bare-ttfb-p50-ns")
			b.ReportMetric(float64(g)/float64(r), "gateway/bare")
		})
	}
}

// benchEngine is an engine answering every request at once: a chat
// completion, or an 8-token stream written and flushed event by event,
// as vLLM and the sim engine do.
func benchEngine(b *testing.B, stream bool) string {
	answer := `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`
	ctype := "application/json"
	events := []string{answer}
	if stream {
		ctype, events = "text/event-stream", strings.SplitAfter(streamingBody(), "\n\n")
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", ctype)
		rc := http.NewResponseController(w)
		for _, ev := range events {
			_, _ = io.WriteString(w, ev)
			if stream {
				_ = rc.Flush()
			}
		}
	}))
	b.Cleanup(up.Close)
	return up.URL
}

// benchFront starts what requests go through to the engine at up: the
// gateway with everything a production request meets (a key
// authenticated over a SQLite store, key and project rate limits, a
// priced budget reserved and settled, the usage recorder, request
// metrics, the real catalog), or a bare httputil.ReverseProxy. It returns
// the front's URL and the API key to send.
func benchFront(b *testing.B, up string, bare bool) (base, secret string) {
	var h http.Handler
	secret = testKey
	if bare {
		u, err := url.Parse(up)
		if err != nil {
			b.Fatal(err)
		}
		rp := httputil.NewSingleHostReverseProxy(u)
		rp.FlushInterval = -1
		h = rp
	} else {
		ctx := context.Background()
		st, err := store.Open(ctx, filepath.Join(b.TempDir(), "bench.db"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		k, err := keys.New(st).CreateAPIKey(ctx, store.DefaultProject, nil)
		if err != nil {
			b.Fatal(err)
		}
		secret = k.Secret
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
		b.Cleanup(func() { _ = rec.Close(ctx) })
		adm := tenancy.NewAdmission(tenancy.Options{Store: st, Models: reg, Pending: rec})
		mr := metrics.New()
		obs, err := metrics.NewObserver(mr)
		if err != nil {
			b.Fatal(err)
		}
		rt := router.New()
		rt.SetEndpoints("coder-3b", []router.Endpoint{{ReplicaID: "r", URL: up, Weight: 1}})
		gw := New(Config{}, Deps{Catalog: &countingCatalog{r: reg}, Auth: auth.NewKeys(st, time.Minute, nil), Routes: rt,
			Admission: adm, Observer: Observers{rec, obs}})
		b.Cleanup(gw.Close)
		h = gw.Handler()
	}
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	return srv.URL, secret
}

func benchBody(stream bool) string {
	return fmt.Sprintf(`{"model":"coder","messages":[{"role":"user","content":"hello there"}],"max_tokens":%d,"stream":%t}`,
		map[bool]int{false: 16, true: 8}[stream], stream)
}

// benchOne sends one request and reads its answer whole; it returns the
// time to the answer's first byte.
func benchOne(b *testing.B, client *http.Client, base, secret, body string) time.Duration {
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+secret)
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	var one [1]byte
	if _, err := io.ReadFull(resp.Body, one[:]); err != nil {
		b.Fatal(err)
	}
	ttfb := time.Since(start)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("status %d", resp.StatusCode)
	}
	return ttfb
}

// streamingBody is what an engine streams for an 8-token chat answer with
// usage: the role chunk, one chunk per token, the finish chunk, the usage
// chunk and [DONE], as vLLM frames them.
func streamingBody() string {
	var s strings.Builder
	head := `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"qwen/coder-3b","choices":[`
	s.WriteString("data: " + head + `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n")
	for i := 0; i < 8; i++ {
		s.WriteString("data: " + head + `{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n")
	}
	s.WriteString("data: " + head + `{"index":0,"delta":{},"logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":null}` + "\n\n")
	s.WriteString("data: " + head + `],"usage":{"prompt_tokens":5,"completion_tokens":8,"total_tokens":13}}` + "\n\n")
	s.WriteString("data: [DONE]\n\n")
	return s.String()
}

// BenchmarkStreamBound is the bound's per-event work alone: one token
// chunk counted.
func BenchmarkStreamBound(b *testing.B) {
	ev := []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"qwen/coder-3b","choices":[{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n")
	bd := streamBound{perChoice: 1 << 30}
	b.ReportAllocs()
	for b.Loop() {
		if bd.exceeds(ev) {
			b.Fatal("exceeds")
		}
	}
}
