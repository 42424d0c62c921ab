// Package bench measures what the gateway adds to a request: the same load is
// sent straight to a sim engine and through the gateway with everything on
// (key authentication over a SQLite store, per-key and per-project rate
// limits, a priced budget with reservations, the usage recorder writing a
// row per request, request metrics, the router, the proxy), in one run, so
// the figures are ratios against a baseline measured on the same noisy
// machine at the same time.
//
//	make bench
package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/auth"
	"github.com/llmgw/llmgw/runtime/gateway"
	"github.com/llmgw/llmgw/runtime/keys"
	"github.com/llmgw/llmgw/runtime/metrics"
	"github.com/llmgw/llmgw/runtime/models"
	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/runtime/tenancy"
	"github.com/llmgw/llmgw/sim/simengine"
	"github.com/llmgw/llmgw/spec"
)

const model = "sim-bench"

// catalog is the server's view of the catalog: the real one
// (models.Registry) when r is set, else the one model named model, with
// no terms of its own.
type catalog struct{ r *models.Registry }

func (c catalog) Lookup(name string) (request.Model, bool) {
	if c.r == nil {
		return request.Model{Name: name}, name == model
	}
	return c.r.Lookup(name)
}
func (c catalog) List() []gateway.ModelInfo { return []gateway.ModelInfo{{ID: model}} }

func serve(b *testing.B, h http.Handler) string {
	b.Helper()
	u, stop, err := listen(h)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(stop)
	return u
}

// listen serves h on a port of the loopback interface; stop closes it.
func listen(h http.Handler) (base string, stop func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String(), func() { _ = srv.Close() }, nil
}

// setup starts a sim engine and in front of it a gateway and, as a
// reference for the cost of any proxy hop on this machine, a bare
// httputil.ReverseProxy: all in this process, the process of the load
// (apart false), or each in a process of its own (apart true). It
// returns the base URLs of the engine, the gateway and the bare proxy
// (and, apart, of a bare proxy with the gateway's headers, below) and the
// gateway's API key.
//
// Apart, the gateway and the bare proxy each have a process of their own,
// as each would be deployed (neither meets the other's garbage
// collection, usage writes or scheduler), both bound to a CPU the load
// does not use, and the load generator and the engine, in a process each,
// are bound to the others, as proxy
// benchmarks bind load generator, proxy and upstream to separate cores,
// and as in production, where clients and engines are other machines:
// what a proxy does after its last write (settling, metrics, the rest of
// a stream's events) is then off the client's way, a client's or an
// engine's work does not take the proxy's CPU, and the engine's work
// after its first event (the rest of the answer; with the gateway, the
// usage chunk it asks for) is the kernel's to interleave with the
// client's, not a Go scheduler's that looks at the network only once
// the engine's goroutine parks. The load's process collects its garbage
// less often (GOGC 400) while bound: the load generator is not what is
// measured, and its collections are pauses every path would meet at
// random. The proxies' and the engine's processes run as deployed. (With
// the two proxies in one process, as before, the bare proxy met the
// gateway's collections and usage writes too, and its figures were a
// little worse than alone: streams 5-10 µs at the median.)
//
// In one Go runtime on this 2-core machine the figures say something
// else: a client's wake-up waits until the goroutine that answered it
// parks (the other core's poller is slow to wake), so the work a proxy
// does after its last write counts as the client's latency, and the
// figure reads the proxy's CPU per request.
//
// Apart, it also starts, in the bare proxy's process, a bare proxy that
// adds to its answers the response headers the gateway sends and the
// engine does not (the x-ratelimit-* and x-request-id of a streamed
// answer, as one such answer had them): bareHeaders is its URL, empty in
// one process. It is not a target: it tells what a client spends reading
// those headers from what the gateway spends.
func setup(b *testing.B, apart bool) (direct, gw, bare, bareHeaders, key string) {
	b.Helper()
	if apart {
		load, cpus, _ := splitCPUs() // two or more: BenchmarkGatewayOverhead checked
		direct = startHelper(b, "engine", load, engineEnv+"=1")[0]
		g := startHelper(b, "gateway", cpus, proxyForEnv+"="+direct, proxyEnv+"=gateway")
		extra, err := gatewayHeaders(direct, g[0], g[1])
		if err != nil {
			b.Fatal(err)
		}
		bp := startHelper(b, "bare", cpus, proxyForEnv+"="+direct, proxyEnv+"=bare", bareHeadersEnv+"="+extra)
		bare, bareHeaders = bp[0], bp[1]
		was, err := pinProcess(load)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GOMAXPROCS(len(load))
		gc := debug.SetGCPercent(400)
		b.Cleanup(func() {
			debug.SetGCPercent(gc)
			if err := setProcessCPUs(was); err != nil {
				b.Error(err)
			}
			runtime.SetDefaultGOMAXPROCS()
		})
		return direct, g[0], bare, bareHeaders, g[1]
	}
	eng, err := simengine.New(simengine.Config{Host: "127.0.0.1", ServedModelName: model}, nil)
	if err != nil {
		b.Fatal(err)
	}
	direct = serve(b, eng.Handler())
	g, err := newGateway(b.TempDir(), direct)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(g.close)
	rp, err := newBare(direct, nil)
	if err != nil {
		b.Fatal(err)
	}
	return direct, serve(b, g.handler), serve(b, rp), "", g.key
}

// bareHeadersEnv holds, as JSON, the headers the second bare proxy of
// the bare proxy's process adds to its answers (setup).
const bareHeadersEnv = "LLMGW_BENCH_BARE_HEADERS"

// gatewayHeaders returns, as JSON, the response headers the gateway at gw
// sends with a streamed answer that the engine at direct does not.
func gatewayHeaders(direct, gw, key string) (string, error) {
	l := newLoader(key)
	defer l.client.CloseIdleConnections()
	get := func(base string) (http.Header, error) {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(body(true)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := l.client.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("%s: status %d", base, resp.StatusCode)
		}
		return resp.Header, nil
	}
	dh, err := get(direct)
	if err != nil {
		return "", err
	}
	gh, err := get(gw)
	if err != nil {
		return "", err
	}
	extra := http.Header{}
	for k, v := range gh {
		if _, ok := dh[k]; !ok {
			extra[k] = v
		}
	}
	if len(extra) == 0 {
		return "", fmt.Errorf("the gateway sent no header the engine did not: %v", gh)
	}
	j, err := json.Marshal(extra)
	return string(j), err
}

// proxyForEnv, set to an engine's URL, makes the test binary a proxy's
// process (TestMain): it serves the proxy proxyEnv names ("gateway" or
// "bare") in front of that engine, prints its URL (and the gateway's API
// key), and runs until its standard input closes.
const (
	proxyForEnv = "LLMGW_BENCH_PROXY_FOR"
	proxyEnv    = "LLMGW_BENCH_PROXY"
)

// engineEnv, set, makes the test binary the engine's process (TestMain):
// it serves a sim engine, prints its URL, and runs until its standard
// input closes.
const engineEnv = "LLMGW_BENCH_ENGINE"

// cpusEnv lists the CPUs a helper process binds itself to, as fmt prints
// a []int ("[1]").
const cpusEnv = "LLMGW_BENCH_CPUS"

// startHelper starts the test binary again as a helper process (the
// engine's or a proxy's, by env), bound to cpus, and returns the
// fields of the line it prints after its role; the process ends with the
// benchmark.
func startHelper(b *testing.B, role string, cpus []int, env ...string) []string {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), cpusEnv+"="+fmt.Sprint(cpus)), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = stdin.Close()
		if err := cmd.Wait(); err != nil {
			b.Errorf("%s process: %v", role, err)
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) < 2 || f[0] != role {
		b.Fatalf("%s process said %q (%v), not its URLs", role, line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return f[1:]
}

// bindHelper binds a helper process to the CPUs cpusEnv lists.
func bindHelper() error {
	var cpus []int
	for _, f := range strings.Fields(strings.Trim(os.Getenv(cpusEnv), "[]")) {
		c, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("%s=%q: %w", cpusEnv, os.Getenv(cpusEnv), err)
		}
		cpus = append(cpus, c)
	}
	if len(cpus) == 0 {
		return nil
	}
	if _, err := pinProcess(cpus); err != nil {
		return err
	}
	runtime.GOMAXPROCS(len(cpus))
	return nil
}

// serveEngine is the engine's process: it serves a sim engine until its
// standard input closes.
func serveEngine() error {
	if err := bindHelper(); err != nil {
		return err
	}
	eng, err := simengine.New(simengine.Config{Host: "127.0.0.1", ServedModelName: model}, nil)
	if err != nil {
		return err
	}
	u, stop, err := listen(eng.Handler())
	if err != nil {
		return err
	}
	defer stop()
	fmt.Printf("engine %s\n", u)
	_, _ = io.Copy(io.Discard, os.Stdin) // until the benchmark ends
	return nil
}

// gatewayProxy is the gateway with everything on (key authentication
// over a SQLite store, key and project rate limits, a priced budget, the
// usage recorder, request metrics, the router) in front of one engine.
type gatewayProxy struct {
	handler http.Handler
	key     string
	close   func()
}

// newGateway makes the gateway in front of the engine at engine, its
// store in dir.
func newGateway(dir, engine string) (*gatewayProxy, error) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(dir, "bench.db"))
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*gatewayProxy, error) {
		st.Close()
		return nil, err
	}
	k, err := keys.New(st).CreateAPIKey(ctx, "bench", nil)
	if err != nil {
		return fail(err)
	}
	// Limits and a budget that bind nothing in this run but are checked
	// and reserved on every request.
	if err := st.UpdateProject(ctx, store.Project{Name: store.DefaultProject, RPM: 10_000_000, TPM: 1_000_000_000}); err != nil {
		return fail(err)
	}
	if err := st.PutBudget(ctx, store.Budget{Project: store.DefaultProject, Period: store.PeriodMonth, Amount: 1e12, OnExhausted: store.OnExhaustedRefuse}); err != nil {
		return fail(err)
	}
	if err := st.SetAPIKeyLimits(ctx, k.ID, 10_000_000, 1_000_000_000); err != nil {
		return fail(err)
	}
	reg := metrics.New()
	obs, err := metrics.NewObserver(reg)
	if err != nil {
		return fail(err)
	}
	price := &spec.Pricing{PromptPer1K: 0.001, CompletionPer1K: 0.002}
	cat, err := models.New([]spec.Model{{Name: model, Source: "sim://" + model, Pricing: price,
		Scaling: spec.Scaling{Min: 1, Max: 1}, Profiles: []spec.Profile{{Name: "p", Engine: "sim", GPUClass: "h100-80g", TP: 1}}}}, nil, nil)
	if err != nil {
		return fail(err)
	}
	adm := tenancy.NewAdmission(tenancy.Options{Store: st, Models: cat})
	rec := tenancy.NewRecorder(tenancy.RecorderOptions{Store: st, Price: adm.Cost, Registerer: reg.Registerer()})
	rt := router.New()
	rt.SetEndpoints(model, []router.Endpoint{{ReplicaID: "r-1", Model: model, URL: engine, Weight: 1}})
	own := &ownTimes{}
	g := gateway.New(gateway.Config{}, gateway.Deps{Catalog: catalog{cat}, Auth: auth.NewKeys(st, 0, nil), Routes: rt,
		Admission: adm, Observer: gateway.Observers{rec, obs, own}})
	mux := http.NewServeMux()
	mux.Handle("/", g.Handler())
	mux.Handle("GET "+ownPath, own)
	return &gatewayProxy{handler: mux, key: k.Secret, close: func() {
		g.Close()
		_ = rec.Close(context.Background())
		st.Close()
	}}, nil
}

// ownPath is where the bench's gateway answers with the gateway's own
// time of the requests since it was last asked (ownTimes).
const ownPath = "/bench/own"

// ownTimes keeps the gateway's own time before each request's first byte
// (request.Record.Own, llmgw_gateway_own_seconds) for the bench, which
// asks for them load by load over HTTP: the gateway may be another
// process.
type ownTimes struct {
	mu sync.Mutex
	d  []time.Duration
}

// Observe implements gateway.Observer.
func (o *ownTimes) Observe(rec request.Record) {
	if rec.Own > 0 {
		o.mu.Lock()
		o.d = append(o.d, rec.Own)
		o.mu.Unlock()
	}
}

// ServeHTTP answers with the median, the p99 and the count of the times
// kept since the last call (nanoseconds), and starts again.
func (o *ownTimes) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	o.mu.Lock()
	d := o.d
	o.d = nil
	o.mu.Unlock()
	r := result{lat: d}
	fmt.Fprintf(w, "%d %d %d", r.pct(0.5), r.pct(0.99), len(d))
}

// ownSince asks the gateway at base for its own times since the last
// call (ownTimes); a call before a load starts its count.
func (l *loader) ownSince(base string) (p50, p99 time.Duration, n int, err error) {
	resp, err := l.client.Get(base + ownPath)
	if err != nil {
		return 0, 0, 0, err
	}
	defer resp.Body.Close()
	_, err = fmt.Fscan(resp.Body, &p50, &p99, &n)
	return p50, p99, n, err
}

// newBare makes the bare proxy: an httputil.ReverseProxy in front of the
// engine at engine, adding extra (when set) to its answers' headers.
func newBare(engine string, extra http.Header) (http.Handler, error) {
	u, err := url.Parse(engine)
	if err != nil {
		return nil, err
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &clockedTransport{rt: &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512, DisableCompression: true}}
	rp.FlushInterval = -1
	if extra != nil {
		rp.ModifyResponse = func(resp *http.Response) error {
			for k, v := range extra {
				resp.Header[k] = v
			}
			return nil
		}
	}
	own := &ownTimes{}
	mux := http.NewServeMux()
	mux.Handle("GET "+ownPath, own)
	// The bare proxy reads the request body before it forwards it, as the
	// gateway does: ReverseProxy streaming the client's body to an engine
	// that answers before the transport's last read of that body (its
	// check that no byte follows Content-Length) loses the answer, the
	// server having closed the body once the answer began
	// (golang/go#40747): one stream in a few hundred failed so with the
	// proxies in a process of their own.
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &bareClock{start: time.Now()}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(&clockedWriter{ResponseWriter: w, c: c}, r.WithContext(context.WithValue(r.Context(), bareClockKey{}, c)))
		if !c.first.IsZero() && !c.sent.IsZero() {
			own.Observe(request.Record{Own: c.sent.Sub(c.start) + c.first.Sub(c.inHand)})
		}
	}))
	return mux, nil
}

// bareClock times the bare proxy's own part of a request as the gateway
// times its own (request.Record.Own): start to the request handed to the
// transport (sent), and the engine's answer in hand (inHand: its headers;
// the sim engine's first event comes with them) to the client's first
// byte flushed (first). The bench's instruments take a little time of
// their own, a few clock readings.
type bareClock struct{ start, sent, inHand, first time.Time }

type bareClockKey struct{}

// clockedTransport notes when the bare proxy hands a request over and has
// the engine's answer.
type clockedTransport struct{ rt http.RoundTripper }

func (t *clockedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c, _ := req.Context().Value(bareClockKey{}).(*bareClock)
	if c != nil {
		c.sent = time.Now()
	}
	resp, err := t.rt.RoundTrip(req)
	if c != nil {
		c.inHand = time.Now()
	}
	return resp, err
}

// clockedWriter notes the bare proxy's first flush to the client.
type clockedWriter struct {
	http.ResponseWriter
	c *bareClock
}

func (w *clockedWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
	if w.c.first.IsZero() {
		w.c.first = time.Now()
	}
}

// serveProxy is a proxy's process: it serves the proxy proxyEnv names in
// front of the engine at engine until its standard input closes. The bare
// proxy's process serves a second one beside it that adds the headers
// bareHeadersEnv holds (setup), and prints its URL after the first's.
func serveProxy(engine string) error {
	if err := bindHelper(); err != nil {
		return err
	}
	var h http.Handler
	var key string
	switch which := os.Getenv(proxyEnv); which {
	case "gateway":
		dir, err := os.MkdirTemp("", "llmgw-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		g, err := newGateway(dir, engine)
		if err != nil {
			return err
		}
		defer g.close()
		h, key = g.handler, g.key
	case "bare":
		var extra http.Header
		if err := json.Unmarshal([]byte(os.Getenv(bareHeadersEnv)), &extra); err != nil {
			return fmt.Errorf("%s: %w", bareHeadersEnv, err)
		}
		plain, err := newBare(engine, nil)
		if err != nil {
			return err
		}
		with, err := newBare(engine, extra)
		if err != nil {
			return err
		}
		h = plain
		// The second, with the gateway's headers, is served beside it;
		// its URL takes the place of the gateway's key.
		var stop func()
		if key, stop, err = listen(with); err != nil {
			return err
		}
		defer stop()
	default:
		return fmt.Errorf("%s=%q: want gateway or bare", proxyEnv, which)
	}
	u, stop, err := listen(h)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Println(strings.TrimSpace(fmt.Sprintf("%s %s %s", os.Getenv(proxyEnv), u, key)))
	_, _ = io.Copy(io.Discard, os.Stdin) // until the benchmark ends
	return nil
}

type result struct {
	lat      []time.Duration // time to first byte for streams, whole response otherwise
	errors   int
	elapsed  time.Duration
	requests int
}

func (r result) pct(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), r.lat...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(int(p*float64(len(s))), len(s)-1)]
}

func (r result) rps() float64 { return float64(r.requests-r.errors) / r.elapsed.Seconds() }

type loader struct {
	client *http.Client
	key    string
}

func newLoader(key string) *loader {
	tr := &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512, IdleConnTimeout: time.Minute, DisableCompression: true}
	return &loader{client: &http.Client{Transport: tr, Timeout: 30 * time.Second}, key: key}
}

func body(stream bool) []byte {
	return []byte(fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"measure the gateway please"}],"max_tokens":8,"stream":%t}`, model, stream))
}

// one sends a request and returns its latency (to the first body byte when
// streaming, to the end otherwise).
func (l *loader) one(base string, payload []byte, stream bool) (time.Duration, error) {
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(payload))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+l.key)
	start := time.Now()
	resp, err := l.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	if stream {
		r := bufio.NewReader(resp.Body)
		if _, err := r.ReadByte(); err != nil {
			return 0, err
		}
		lat := time.Since(start)
		_, err := io.Copy(io.Discard, r)
		return lat, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return time.Since(start), err
}

// fixedRate sends n requests to each base at rate requests per second in
// all (open loop), interleaved: each round of len(bases) requests goes to
// every base once (turn), so
// that every base is measured under the same conditions of the machine at
// the same time. It returns one result per base.
func (l *loader) fixedRate(bases []string, stream bool, rate, n int) []result {
	payload := body(stream)
	k := len(bases)
	interval := time.Second / time.Duration(rate)
	var mu sync.Mutex
	var wg sync.WaitGroup
	res := make([]result, k)
	for i := range res {
		res[i].requests = n
	}
	start := time.Now()
	for i := 0; i < n*k; i++ {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d) // pacing the load generator, not waiting for an outcome
		}
		wg.Add(1)
		go func(t int) {
			defer wg.Done()
			lat, err := l.one(bases[t], payload, stream)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res[t].errors++
				return
			}
			res[t].lat = append(res[t].lat, lat)
		}(turn(i, k))
	}
	wg.Wait()
	for i := range res {
		res[i].elapsed = time.Since(start)
	}
	return res
}

// turn is the base request i goes to, of k: each round of k requests
// goes to every base once, in an order that changes from round to round
// (every order of three bases in six rounds), so that no base always
// follows the same other one and meets what that one left to do.
func turn(i, k int) int {
	if k != 3 {
		return i % k
	}
	return orders3[(i/3)%len(orders3)][i%3]
}

var orders3 = [6][3]int{{0, 1, 2}, {1, 2, 0}, {2, 0, 1}, {0, 2, 1}, {2, 1, 0}, {1, 0, 2}}

// serial sends n requests in all, one at a time, to the bases in turn: the
// latency of a request at a light load, each base measured among the
// others. It returns one result per base.
func (l *loader) serial(bases []string, stream bool, n int) []result {
	payload := body(stream)
	res := make([]result, len(bases))
	start := time.Now()
	for i := 0; i < n; i++ {
		t := turn(i, len(bases))
		res[t].requests++
		lat, err := l.one(bases[t], payload, stream)
		if err != nil {
			res[t].errors++
			continue
		}
		res[t].lat = append(res[t].lat, lat)
	}
	for i := range res {
		res[i].elapsed = time.Since(start)
	}
	return res
}

// saturate runs conc closed-loop clients for n requests in total.
func (l *loader) saturate(base string, stream bool, conc, n int) result {
	payload := body(stream)
	var mu sync.Mutex
	var wg sync.WaitGroup
	res := result{requests: n}
	next := make(chan struct{}, n)
	for i := 0; i < n; i++ {
		next <- struct{}{}
	}
	close(next)
	start := time.Now()
	for c := 0; c < conc; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				lat, err := l.one(base, payload, stream)
				mu.Lock()
				if err != nil {
					res.errors++
				} else {
					res.lat = append(res.lat, lat)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	return res
}

func merge(a, b result) result {
	return result{lat: append(append([]time.Duration(nil), a.lat...), b.lat...), errors: a.errors + b.errors,
		elapsed: a.elapsed + b.elapsed, requests: a.requests + b.requests}
}

// BenchmarkGatewayOverhead prints added latency and the throughput ratio of
// the gateway against a direct connection, for fixed-rate, one-at-a-time
// and saturating load, streaming and not, with the gateway and the bare
// proxy in the load's process and then each in a process of its own on a
// CPU the load does not use (setup). At the fixed rate (1,000 requests a second in
// all) and one at a time, requests to the engine directly, through the
// gateway and through a bare httputil.ReverseProxy (the floor: what any
// proxy hop adds on this machine) are interleaved, so all three see the
// same machine at the same time; saturating phases alternate direct,
// gateway and bare proxy twice so drift in the machine's load hits every
// side alike.
//
// The targets are judged with the proxies apart, the arrangement of a
// deployment; with them in the load's process the figures are printed as
// a view of a proxy's CPU per request (setup says why), not judged.
func BenchmarkGatewayOverhead(b *testing.B) {
	if _, _, ok := splitCPUs(); !ok {
		b.Fatal("the gateway overhead bench needs two CPUs: the proxies apart take one of their own")
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\ngateway overhead against a direct connection to a sim engine (same run, %s)\n", time.Now().UTC().Format(time.RFC3339))
	var targets []targetCheck
	for _, apart := range []bool{false, true} {
		t := overhead(b, &out, apart)
		if apart {
			targets = append(targets, t...)
		}
	}
	// The targets, compared: each load's added latency against what the
	// bare proxy added in the same run (p50) and against 1 ms (p99), and
	// the gateway's own share of the p99 (its own time before the first
	// byte, without the hops' and the engine's) against 1 ms.
	for _, c := range targets {
		mark := func(ok bool) string {
			if ok {
				return "ok"
			}
			return "MISS"
		}
		fmt.Fprintf(&out, "target, %s, %s %s: added p50 %s against the bare proxy's %s (goal ≤ 1.00×, or more by no more than chance makes: %s): %.2f× %s; added p99 %s (goal ≤ 1ms) %s, the bare proxy's %s (%.2f×); the gateway's own time before the first byte, p99 %s (goal ≤ 1ms) %s\n", c.where, c.load, c.kind,
			us(c.p50), us(c.bareP50), us(c.p50Gap), ratio(c.p50, c.bareP50), mark(c.p50-c.bareP50 <= max(c.p50Gap, 0)),
			us(c.p99), mark(c.p99 <= time.Millisecond), us(c.bareP99), ratio(c.p99, c.bareP99),
			us(c.ownP99), mark(c.ownP99 <= time.Millisecond))
	}
	fmt.Fprint(os.Stdout, out.String())
}

// overhead runs BenchmarkGatewayOverhead's loads on one arrangement of
// the proxies, writes its lines to out and returns its targets.
func overhead(b *testing.B, out *strings.Builder, apart bool) []targetCheck {
	where := "proxies in the load's process (a view of their CPU per request, not judged)"
	if apart {
		where = "each proxy in a process of its own, on a CPU the load does not use"
	}
	loadCPUs, proxyCPUs, _ := splitCPUs() // before setup binds this process
	direct, gw, bare, bareHeaders, key := setup(b, apart)
	l := newLoader(key)
	// own reads the proxies' own time over a load (ownTimes): called
	// with nil before it, to start the count; after it, with the
	// gateway's and the bare proxy's results, it prints their median and
	// p99 and returns the gateway's p99.
	own := func(label string, g, r *result) time.Duration {
		var p50, p99 [2]time.Duration
		for i, p := range []struct {
			base string
			res  *result
		}{{gw, g}, {bare, r}} {
			var n int
			var err error
			if p50[i], p99[i], n, err = l.ownSince(p.base); err != nil {
				b.Fatalf("reading a proxy's own time: %v", err)
			}
			if p.res != nil && n < len(p.res.lat)*9/10 {
				b.Fatalf("%s: %s timed %d requests of %d", label, p.base, n, len(p.res.lat))
			}
		}
		if g == nil {
			return 0
		}
		fmt.Fprintf(out, "%-28s gateway %s/%s, bare proxy %s/%s\n", label+" own time p50/p99", us(p50[0]), us(p99[0]), us(p50[1]), us(p99[1]))
		return p99[0]
	}
	// machine prints what the CPUs did while a load ran (from /proc/stat,
	// read before it as t0): work at a low priority or time the hypervisor
	// took are the machine's, and tails that come with them are too.
	machine := func(label string, t0 map[int]cpuTimes) {
		t1, err := readCPUTimes()
		if err != nil || t0 == nil {
			return
		}
		if !apart {
			fmt.Fprintf(out, "%-28s CPUs %s\n", label+" machine", cpuUseBetween(t0, t1, slices.Concat(loadCPUs, proxyCPUs)))
			return
		}
		fmt.Fprintf(out, "%-28s load's CPU %s; proxies' CPU %s\n", label+" machine",
			cpuUseBetween(t0, t1, loadCPUs), cpuUseBetween(t0, t1, proxyCPUs))
	}
	prefix := map[bool]string{false: "", true: "apart-"}[apart]
	const rate, fixedN, serialN, conc, satN = 1000, 3000, 9000, 32, 6000
	// Warm connections and caches on every path.
	l.saturate(direct, false, conc, 500)
	l.saturate(gw, false, conc, 500)
	l.saturate(bare, false, conc, 500)

	var targets []targetCheck
	fmt.Fprintf(out, "%s\n", where)
	fmt.Fprintf(out, "%-28s %-18s %-18s %-18s %s\n", "load", "direct p50/p99", "proxied p50/p99", "added p50/p99", "throughput direct→proxied (ratio), at saturation")
	// The throughput is a measure at saturation only: at a fixed rate or
	// one at a time every path passes the same requests in the same time.
	line := func(label string, d, g result) {
		tp := "-"
		if strings.HasPrefix(label, "sat ") {
			tp = fmt.Sprintf("%.0f→%.0f req/s (%.2f)", d.rps(), g.rps(), g.rps()/d.rps())
		}
		fmt.Fprintf(out, "%-28s %-18s %-18s %-18s %s\n", label,
			us(d.pct(0.5))+"/"+us(d.pct(0.99)), us(g.pct(0.5))+"/"+us(g.pct(0.99)),
			us(g.pct(0.5)-d.pct(0.5))+"/"+us(g.pct(0.99)-d.pct(0.99)), tp)
	}
	metric := func(label string, d, g result) {
		name := strings.NewReplacer(" ", "-", "/", "", "(", "", ")", "", "=", "").Replace(label)
		b.ReportMetric(float64((g.pct(0.5) - d.pct(0.5)).Microseconds()), prefix+name+"-added-p50-µs")
		b.ReportMetric(float64((g.pct(0.99) - d.pct(0.99)).Microseconds()), prefix+name+"-added-p99-µs")
		if strings.HasPrefix(label, "sat ") {
			b.ReportMetric(g.rps()/d.rps(), prefix+name+"-throughput-ratio")
		}
	}
	// judge runs a load (run) over the engine, the gateway and the bare
	// proxy in turn, prints its lines and returns its figures for the
	// targets.
	judge := func(label, load, kind string, run func(paths []string) []result) targetCheck {
		own(label, nil, nil)
		t0, _ := readCPUTimes()
		res := run([]string{direct, gw, bare})
		machine(label, t0)
		ownP99 := own(label, &res[1], &res[2])
		d, g, r := res[0], res[1], res[2]
		if d.errors+g.errors+r.errors > 0 {
			b.Fatalf("%s: %d direct, %d gateway and %d bare proxy errors", label, d.errors, g.errors, r.errors)
		}
		line(label+" gateway", d, g)
		line(label+" bare proxy", d, r)
		metric(label, d, g)
		metric(label+" bare proxy", d, r)
		return targetCheck{where: where, load: load, kind: kind,
			p50: g.pct(0.5) - d.pct(0.5), p99: g.pct(0.99) - d.pct(0.99),
			bareP50: r.pct(0.5) - d.pct(0.5), bareP99: r.pct(0.99) - d.pct(0.99),
			p50Gap: medianGap(g.lat, r.lat), ownP99: ownP99}
	}
	for _, stream := range []bool{false, true} {
		kind := "non-streaming"
		if stream {
			kind = "streaming (TTFB)"
		}
		targets = append(targets,
			judge(fmt.Sprintf("%d/s mixed %s", rate, kind), fmt.Sprintf("at %d req/s (a third each direct, gateway, bare proxy)", rate), kind,
				func(paths []string) []result { return l.fixedRate(paths, stream, rate, fixedN) }),
			judge("one at a time "+kind, "one request at a time (in turn direct, gateway, bare proxy)", kind,
				func(paths []string) []result { return l.serial(paths, stream, serialN) }))

		var sd, sg, sr result
		for round := 0; round < 2; round++ {
			sd, sg = merge(sd, l.saturate(direct, stream, conc, satN/2)), merge(sg, l.saturate(gw, stream, conc, satN/2))
			sr = merge(sr, l.saturate(bare, stream, conc, satN/2))
		}
		if sd.errors+sg.errors+sr.errors > 0 {
			b.Fatalf("saturation %s: %d direct, %d gateway and %d bare proxy errors", kind, sd.errors, sg.errors, sr.errors)
		}
		label := fmt.Sprintf("sat c=%d %s", conc, kind)
		line(label+" gateway", sd, sg)
		line(label+" bare proxy", sd, sr)
		metric(label, sd, sg)
		metric(label+" bare proxy", sd, sr)
	}
	if bareHeaders != "" {
		// Not a target: the same streams, at the fixed rate and one at a
		// time, against a bare proxy that sends the gateway's own response
		// headers too, to tell what a client spends reading them from what
		// the gateway spends.
		for _, serial := range []bool{false, true} {
			paths := []string{direct, gw, bareHeaders}
			var label string
			var res []result
			if serial {
				label, res = "one at a time streaming (TTFB)", l.serial(paths, true, serialN)
			} else {
				label, res = fmt.Sprintf("%d/s mixed streaming (TTFB)", rate), l.fixedRate(paths, true, rate, fixedN)
			}
			d, g, r := res[0], res[1], res[2]
			if d.errors+g.errors+r.errors > 0 {
				b.Fatalf("%s with the gateway's headers: %d direct, %d gateway and %d bare proxy errors", label, d.errors, g.errors, r.errors)
			}
			line(label+" gateway", d, g)
			line(label+" bare proxy + the gateway's headers", d, r)
			fmt.Fprintf(out, "not a target: %s, against a bare proxy that also sends the gateway's response headers (the x-ratelimit-* and x-request-id an OpenAI client is sent): gateway added p50 %s, that proxy's %s (%.2f×; chance alone: %s)\n",
				label, us(g.pct(0.5)-d.pct(0.5)), us(r.pct(0.5)-d.pct(0.5)), ratio(g.pct(0.5)-d.pct(0.5), r.pct(0.5)-d.pct(0.5)), us(medianGap(g.lat, r.lat)))
		}
	}
	return targets
}

// targetCheck is one load's added latency (at the fixed rate, or one
// request at a time), held against the targets.
type targetCheck struct {
	where, load, kind          string
	p50, p99, bareP50, bareP99 time.Duration
	// p50Gap is how far the gateway's median may lie from the bare
	// proxy's by chance alone in this run (medianGap).
	p50Gap time.Duration
	// ownP99 is the p99 of the gateway's own time before the first byte
	// (ownTimes): its share of p99, without the hops' and the engine's.
	ownP99 time.Duration
}

// medianGap is the upper end of a 95% interval for the difference of the
// medians of a and b when both are drawn from one distribution: the two
// sets are pooled and split at random 1,000 times (a permutation test,
// seeded, so one run's figures give one answer), and the 95th percentile
// of the medians' differences is returned. A median of a larger than b's
// by no more than this is not measurably larger: the noise of this run
// could have made it so.
func medianGap(a, b []time.Duration) time.Duration {
	if len(a) == 0 || len(b) == 0 {
		return 0
	}
	pool := append(append([]time.Duration(nil), a...), b...)
	rng := rand.New(rand.NewPCG(1, 2))
	const rounds = 1000
	gaps := make([]time.Duration, rounds)
	x, y := make([]time.Duration, len(a)), make([]time.Duration, len(b))
	for i := range gaps {
		rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
		copy(x, pool[:len(a)])
		copy(y, pool[len(a):])
		gaps[i] = middle(x) - middle(y)
	}
	slices.Sort(gaps)
	return gaps[rounds*95/100]
}

// middle sorts s and returns its median.
func middle(s []time.Duration) time.Duration {
	slices.Sort(s)
	return s[len(s)/2]
}

// ratio is a/b, or 0 when b is not positive.
func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func us(d time.Duration) string { return fmt.Sprintf("%dµs", d.Microseconds()) }
