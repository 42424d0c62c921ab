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
// after its first event (the rest of the answer and the usage chunk,
// which every path asks for: overhead) is the kernel's to interleave with
// the client's, not a Go scheduler's that looks at the network only once
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
// Apart, it also starts, in a process of its own, a bare proxy that
// adds to its answers the response headers the gateway sends and the
// engine does not (the x-ratelimit-* and x-request-id of a streamed
// answer, as one such answer had them): bareHeaders is its URL, empty in
// one process. It is not a target: it answers what the gateway answers,
// so that the cost of the headers the gateway's API promises (OpenAI's
// rate-limit headers), which every client reads, is told from the cost of
// the gateway's work.
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
		bare = startHelper(b, "bare", cpus, proxyForEnv+"="+direct, proxyEnv+"=bare")[0]
		bareHeaders = startHelper(b, "bare", cpus, proxyForEnv+"="+direct, proxyEnv+"=bare", bareHeadersEnv+"="+extra)[0]
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

// bareHeadersEnv holds, as JSON, the headers a bare proxy's process adds
// to its answers (setup).
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
// engine at engine. With extra set it answers with the gateway's header
// set: extra added, and of the engine's headers only those the gateway
// relays (Content-Type, Retry-After) and Content-Length, which the gateway
// sets for a whole answer too.
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
			for k := range resp.Header {
				if k != "Content-Type" && k != "Retry-After" && k != "Content-Length" {
					delete(resp.Header, k)
				}
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
		// The extra headers go where the gateway puts its own, into the
		// answer's headers before the engine's are copied in: the same
		// work for the server that writes them and the client that reads
		// them.
		for k, v := range extra {
			w.Header()[k] = v
		}
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
// front of the engine at engine until its standard input closes; the bare
// proxy adds the headers bareHeadersEnv holds, when set (setup).
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
		if v := os.Getenv(bareHeadersEnv); v != "" {
			if err := json.Unmarshal([]byte(v), &extra); err != nil {
				return fmt.Errorf("%s: %w", bareHeadersEnv, err)
			}
		}
		var err error
		if h, err = newBare(engine, extra); err != nil {
			return err
		}
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
	lat []time.Duration // time to first byte for streams, whole response otherwise
	// blk is the block of each of lat's requests (schedule).
	blk      []int
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
	// withUsage holds the bases whose streamed requests ask the engine
	// for the usage chunk themselves (stream_options.include_usage):
	// overhead sets every path but the gateway, which asks for it on its
	// clients' behalf, so that the engine does the same work for every
	// path (payloads).
	withUsage map[string]bool
}

func newLoader(key string) *loader {
	tr := &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512, IdleConnTimeout: time.Minute, DisableCompression: true}
	return &loader{client: &http.Client{Transport: tr, Timeout: 30 * time.Second}, key: key}
}

func body(stream bool) []byte {
	return []byte(fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"measure the gateway please"}],"max_tokens":8,"stream":%t}`, model, stream))
}

// bodyWithUsage is a streamed request's body asking for the usage chunk
// too.
func bodyWithUsage() []byte {
	b := body(true)
	return append(b[:len(b)-1], `,"stream_options":{"include_usage":true}}`...)
}

// payloads returns the body of a request to each of bases (withUsage).
func (l *loader) payloads(bases []string, stream bool) [][]byte {
	plain, usage := body(stream), bodyWithUsage()
	out := make([][]byte, len(bases))
	for i, b := range bases {
		out[i] = plain
		if stream && l.withUsage[b] {
			out[i] = usage
		}
	}
	return out
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

// schedule says which base request i goes to, and in which block
// (blocked; for onlyBase, every request is a block of its own).
type schedule func(i int) (base, block int)

// onlyBase sends every request to the one base.
func onlyBase(i int) (int, int) { return 0, i }

// blocked runs blocks of n requests, each alternating the first base (the
// engine directly) and one of the other k-1, which take blocks in turn
// (in an order that changes from round to round: every order of the k-1
// in turn, orderings): so a
// proxy meets, as deployed, a CPU that served it last, not another
// proxy's process, and still the same machine as the others within a
// fraction of a second.
func blocked(k, n int) schedule {
	orders := orderings(k - 1)
	return func(i int) (int, int) {
		b := i / n
		if i%2 == 0 {
			return 0, b
		}
		return 1 + orders[(b/(k-1))%len(orders)][b%(k-1)], b
	}
}

// orderings returns every order of the numbers 0 to k-1.
func orderings(k int) [][]int {
	if k <= 1 {
		return [][]int{make([]int, k)}
	}
	var all [][]int
	for _, o := range orderings(k - 1) {
		for at := 0; at < k; at++ {
			all = append(all, slices.Insert(slices.Clone(o), at, k-1))
		}
	}
	return all
}

// fixedRate sends n requests in all at rate requests per second (open
// loop), to the bases as s says, so that every base is measured under the
// same conditions of the machine at the same time. It returns one result
// per base.
func (l *loader) fixedRate(bases []string, s schedule, stream bool, rate, n int) []result {
	payload := l.payloads(bases, stream)
	interval := time.Second / time.Duration(rate)
	var mu sync.Mutex
	var wg sync.WaitGroup
	res := make([]result, len(bases))
	start := time.Now()
	for i := 0; i < n; i++ {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d) // pacing the load generator, not waiting for an outcome
		}
		t, blk := s(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat, err := l.one(bases[t], payload[t], stream)
			mu.Lock()
			defer mu.Unlock()
			res[t].requests++
			if err != nil {
				res[t].errors++
				return
			}
			res[t].lat = append(res[t].lat, lat)
			res[t].blk = append(res[t].blk, blk)
		}()
	}
	wg.Wait()
	for i := range res {
		res[i].elapsed = time.Since(start)
	}
	return res
}

// serial sends n requests in all, one at a time, to the bases as s says:
// the latency of a request at a light load. It returns one result per
// base.
func (l *loader) serial(bases []string, s schedule, stream bool, n int) []result {
	payload := l.payloads(bases, stream)
	res := make([]result, len(bases))
	start := time.Now()
	for i := 0; i < n; i++ {
		t, blk := s(i)
		res[t].requests++
		lat, err := l.one(bases[t], payload[t], stream)
		if err != nil {
			res[t].errors++
			continue
		}
		res[t].lat = append(res[t].lat, lat)
		res[t].blk = append(res[t].blk, blk)
	}
	for i := range res {
		res[i].elapsed = time.Since(start)
	}
	return res
}

// saturate runs conc closed-loop clients for n requests in total.
func (l *loader) saturate(base string, stream bool, conc, n int) result {
	payload := l.payloads([]string{base}, stream)[0]
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
	return result{lat: append(append([]time.Duration(nil), a.lat...), b.lat...), blk: append(append([]int(nil), a.blk...), b.blk...), errors: a.errors + b.errors,
		elapsed: a.elapsed + b.elapsed, requests: a.requests + b.requests}
}

// BenchmarkGatewayOverhead prints added latency and the throughput ratio of
// the gateway against a direct connection, for fixed-rate, one-at-a-time
// and saturating load, streaming and not, with the gateway and the bare
// proxy in the load's process and then each in a process of its own on a
// CPU the load does not use (setup). At the fixed rate (1,000 requests a
// second in all) and one at a time, the gateway, a bare
// httputil.ReverseProxy (the floor: what any proxy hop adds on this
// machine) and, apart, a bare proxy that also sends the gateway's
// response headers take blocks of requests in turn, each block
// alternating requests to the engine directly and through the proxy
// (blocked), so all see the same machine within a fraction of a second
// and each proxy a CPU it served last, as deployed; saturating phases
// alternate direct, gateway and bare proxy twice so drift in the
// machine's load hits every side alike.
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
	if release, err := holdCPUsAwake(); err != nil {
		fmt.Fprintf(&out, "the CPUs may sleep between requests (%v): every hop's figures include waking them\n", err)
	} else {
		defer release()
		fmt.Fprintf(&out, "no CPU sleeps deeper than polling while this runs (%s: 0 µs)\n", cpuLatencyFile)
	}
	var targets []targetCheck
	for _, apart := range []bool{false, true} {
		t := overhead(b, &out, apart)
		if apart {
			targets = append(targets, t...)
		}
	}
	// The targets, compared: each load's added latency against what the
	// bare proxy added in the same run (p50), against 1 ms or the bare
	// proxy's (p99: on this machine a bare hop's tail alone reaches 1 ms),
	// and the gateway's own share of the p99 (its own time before the
	// first byte, without the hops' and the engine's) against 1 ms.
	for _, c := range targets {
		headers := ""
		if c.hdrP50 != 0 {
			headers = fmt.Sprintf(" (a bare proxy that also sends the gateway's response headers added %s: %.2f×)", us(c.hdrP50), ratio(c.p50, c.hdrP50))
		}
		fmt.Fprintf(&out, "target, %s, %s %s: added p50 %s against the bare proxy's %s (goal ≤ 1.00×, or more by no more than chance makes: %s): %.2f× %s%s; added p99 %s (goal ≤ 1ms%s, or no more than the bare proxy's %s by more than chance makes, %s, and at most 1ms) %s; the gateway's own time before the first byte, p99 %s (goal ≤ 1ms) %s\n", c.where, c.load, c.kind,
			us(c.p50), us(c.bareP50), us(c.p50Gap), ratio(c.p50, c.bareP50), mark(c.p50OK()), headers,
			us(c.p99), over(c.p99, time.Millisecond), us(c.bareP99), us(c.p99Gap), mark(c.p99OK()),
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
	// The gateway asks the engine for a stream's usage chunk (and keeps it
	// from a client that did not ask); every other path asks for it too, so
	// that the engine, whose work after the first event shares the load's
	// CPU with the client's, answers every path alike (development.md).
	l.withUsage = map[string]bool{direct: true, bare: true, bareHeaders: true}
	// The paths of a judged load: the engine directly, the gateway, the
	// bare proxy and, apart, the bare proxy that also sends the gateway's
	// response headers (setup).
	paths := []string{direct, gw, bare}
	names := []string{"gateway", "bare proxy"}
	if bareHeaders != "" {
		paths = append(paths, bareHeaders)
		names = append(names, "bare proxy + the gateway's headers")
	}
	// own reads the proxies' own time over a load (ownTimes): called
	// with nil before it, to start the count; after it, with the
	// proxies' results (paths[1:]), it prints their median and p99 and
	// returns the gateway's p99.
	own := func(label string, res []result) time.Duration {
		var figures []string
		var gatewayP99 time.Duration
		for i, base := range paths[1:] {
			p50, p99, n, err := l.ownSince(base)
			if err != nil {
				b.Fatalf("reading a proxy's own time: %v", err)
			}
			if res == nil {
				continue
			}
			if n < len(res[i].lat)*9/10 {
				b.Fatalf("%s: %s timed %d requests of %d", label, base, n, len(res[i].lat))
			}
			if i == 0 {
				gatewayP99 = p99
			}
			figures = append(figures, fmt.Sprintf("%s %s/%s", names[i], us(p50), us(p99)))
		}
		if res != nil {
			fmt.Fprintf(out, "%-28s %s\n", label+" own time p50/p99", strings.Join(figures, ", "))
		}
		return gatewayP99
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
	// 3,000 requests per proxy at the fixed rate and one at a time, in
	// blocks of 20 (blocked), half of them straight to the engine; 9,000
	// apart, where the targets are judged: a p99 of 3,000 is the 30th
	// slowest, and a few slow blocks moved it by up to a millisecond
	// (the chance bands of 200-1000 µs).
	const rate, blockLen, conc, satN = 1000, 20, 32, 6000
	perProxy := 3000
	if apart {
		perProxy = 9000
	}
	judged := blocked(len(paths), blockLen)
	total := perProxy * (len(paths) - 1) * 2
	// Warm connections and caches on every path.
	for _, p := range paths {
		l.saturate(p, false, conc, 500)
	}

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
		name := strings.NewReplacer(" ", "-", "/", "", "(", "", ")", "", "=", "", "+", "", "'", "").Replace(label)
		b.ReportMetric(float64((g.pct(0.5) - d.pct(0.5)).Microseconds()), prefix+name+"-added-p50-µs")
		b.ReportMetric(float64((g.pct(0.99) - d.pct(0.99)).Microseconds()), prefix+name+"-added-p99-µs")
		if strings.HasPrefix(label, "sat ") {
			b.ReportMetric(g.rps()/d.rps(), prefix+name+"-throughput-ratio")
		}
	}
	// judge runs a load (run) over the paths in turn, prints its lines
	// and returns its figures for the targets.
	judge := func(label, load, kind string, run func(paths []string) []result) targetCheck {
		own(label, nil)
		t0, _ := readCPUTimes()
		res := run(paths)
		machine(label, t0)
		ownP99 := own(label, res[1:])
		var errs []int
		for _, r := range res {
			errs = append(errs, r.errors)
		}
		if slices.ContainsFunc(errs, func(n int) bool { return n > 0 }) {
			b.Fatalf("%s: errors (direct, %s): %v", label, strings.Join(names, ", "), errs)
		}
		d, g, r := res[0], res[1], res[2]
		for i, p := range res[1:] {
			line(label+" "+names[i], d, p)
			metric(label+" "+names[i], d, p)
		}
		c := targetCheck{where: where, load: load, kind: kind,
			p50: g.pct(0.5) - d.pct(0.5), p99: g.pct(0.99) - d.pct(0.99),
			bareP50: r.pct(0.5) - d.pct(0.5), bareP99: r.pct(0.99) - d.pct(0.99),
			p50Gap: blockGap(g, r, 0.5), p99Gap: blockGap(g, r, 0.99),
			ownP99: ownP99}
		if len(res) > 3 {
			c.hdrP50 = res[3].pct(0.5) - d.pct(0.5)
		}
		return c
	}
	for _, stream := range []bool{false, true} {
		kind := "non-streaming"
		if stream {
			kind = "streaming (TTFB)"
		}
		targets = append(targets,
			judge(fmt.Sprintf("%d/s mixed %s", rate, kind), fmt.Sprintf("at %d req/s", rate), kind,
				func(paths []string) []result { return l.fixedRate(paths, judged, stream, rate, total) }),
			judge("one at a time "+kind, "one request at a time", kind,
				func(paths []string) []result { return l.serial(paths, judged, stream, total) }))

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
	return targets
}

// targetCheck is one load's added latency (at the fixed rate, or one
// request at a time), held against the targets.
type targetCheck struct {
	where, load, kind string
	// p50 and p99 are what the gateway added, bareP50 and bareP99 what the
	// bare proxy added; hdrP50 what a bare proxy that also sends the
	// gateway's response headers added (apart only; else 0), to tell the
	// headers' cost from the gateway's work.
	p50, p99, bareP50, bareP99, hdrP50 time.Duration
	// p50Gap and p99Gap are how far the gateway's median and p99 may lie
	// above the bare proxy's by chance alone in this run (blockGap).
	p50Gap, p99Gap time.Duration
	// ownP99 is the p99 of the gateway's own time before the first byte
	// (ownTimes): its share of p99, without the hops' and the engine's.
	ownP99 time.Duration
}

// p50OK: the gateway added at the median no more than the bare proxy, or
// more by no more than chance makes.
func (c targetCheck) p50OK() bool { return c.p50-c.bareP50 <= max(c.p50Gap, 0) }

// p99OK: the gateway added at most 1 ms at p99, or no more than the bare
// proxy's hop in the same run by more than chance makes, and by 1 ms at
// most whatever chance makes. On this VM a bare hop's added p99 is itself
// 0.7–2.8 ms from run to run, with chance bands of 0.25–2.5 ms: a gateway
// p99 past 1 ms that the bare proxy's could have reached by chance is the
// hop's tail, not the gateway's (its own share is ownP99, held to 1 ms on
// its own).
func (c targetCheck) p99OK() bool {
	return c.p99 <= time.Millisecond || c.p99-c.bareP99 <= min(max(c.p99Gap, 0), time.Millisecond)
}

// over says ": over it" where d is past the goal: a target met only
// against the bare proxy says so.
func over(d, goal time.Duration) string {
	if d > goal {
		return ": over it"
	}
	return ""
}

func mark(ok bool) string {
	if ok {
		return "ok"
	}
	return "MISS"
}

// blockGap is the upper end of a 95% interval for the difference of the
// q-quantiles of a's and b's latencies when both are drawn from one
// distribution: their blocks (blocked) are pooled and dealt out again at
// random 1,000 times, as many to each as it had (a permutation test,
// seeded, so one run's figures give one answer; by blocks, so that what
// drifts in the machine from block to block counts as chance too), and the
// 95th percentile of the quantiles' differences is returned. A quantile of
// a larger than b's by no more than this is not measurably larger: the
// noise of this run could have made it so.
func blockGap(a, b result, q float64) time.Duration {
	blocks := func(r result) [][]time.Duration {
		at := map[int]int{}
		var out [][]time.Duration
		for i, d := range r.lat {
			j, ok := at[r.blk[i]]
			if !ok {
				j = len(out)
				at[r.blk[i]] = j
				out = append(out, nil)
			}
			out[j] = append(out[j], d)
		}
		return out
	}
	ab, bb := blocks(a), blocks(b)
	if len(ab) == 0 || len(bb) == 0 {
		return 0
	}
	pool := append(ab, bb...)
	rng := rand.New(rand.NewPCG(1, 2))
	const rounds = 1000
	gaps := make([]time.Duration, rounds)
	var x, y []time.Duration
	for i := range gaps {
		rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
		x, y = x[:0], y[:0]
		for _, blk := range pool[:len(ab)] {
			x = append(x, blk...)
		}
		for _, blk := range pool[len(ab):] {
			y = append(y, blk...)
		}
		gaps[i] = quantile(x, q) - quantile(y, q)
	}
	slices.Sort(gaps)
	return gaps[rounds*95/100]
}

// quantile sorts s and returns its q-quantile, as result.pct does.
func quantile(s []time.Duration, q float64) time.Duration {
	slices.Sort(s)
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

// ratio is a/b, or 0 when b is not positive.
func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func us(d time.Duration) string { return fmt.Sprintf("%dµs", d.Microseconds()) }
