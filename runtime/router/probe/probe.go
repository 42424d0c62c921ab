// Package probe asks the engines behind the routing table two things, and
// tells the router the answers: whether an endpoint the gateway took out of
// the table after a failed connection answers again (it then returns to the
// table), and how loaded each engine says it is (requests running and
// waiting, KV-cache use, from its Prometheus metrics under vLLM's, SGLang's
// or llama.cpp's names), which the routing policies weigh.
//
// It is the router's only I/O; the router itself stays pure.
package probe

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/llmgw/llmgw/runtime/router"
)

// Defaults for zero Options fields.
const (
	DefaultInterval     = time.Second
	DefaultLoadInterval = 2 * time.Second
	DefaultTimeout      = time.Second
)

// Options configure a Prober.
type Options struct {
	Router *router.Router
	// Interval is how often an endpoint that is down is asked whether its
	// engine answers (GET /health); LoadInterval how often every endpoint's
	// metrics are read (GET /metrics); Timeout bounds each request.
	Interval, LoadInterval, Timeout time.Duration
	// Client sends the requests; nil uses a client of the prober's own.
	Client *http.Client
	Logger *slog.Logger
}

// Prober probes the router's endpoints.
type Prober struct {
	o   Options
	log *slog.Logger
	// lastLoad is when each endpoint's metrics were last read.
	mu       sync.Mutex
	lastLoad map[string]time.Time
}

// New returns a prober; Run starts it.
func New(o Options) *Prober {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.LoadInterval <= 0 {
		o.LoadInterval = DefaultLoadInterval
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Client == nil {
		o.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2, IdleConnTimeout: 30 * time.Second}}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Prober{o: o, log: o.Logger.With("component", "probe"), lastLoad: map[string]time.Time{}}
}

// Run probes every Interval until ctx ends.
func (p *Prober) Run(ctx context.Context) {
	t := time.NewTicker(p.o.Interval)
	defer t.Stop()
	for {
		p.Once(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// maxConcurrent bounds the probes in flight at once.
const maxConcurrent = 32

// Once runs one round: every endpoint that is down is asked for /health
// and returns to the table when it answers 200; every endpoint whose load
// is due has its metrics read.
func (p *Prober) Once(ctx context.Context) {
	now := time.Now()
	sem := make(chan struct{}, maxConcurrent)
	var wg sync.WaitGroup
	seen := map[string]bool{}
	for _, t := range p.o.Router.Targets() {
		k := t.ReplicaID + " " + t.URL
		seen[k] = true
		p.mu.Lock()
		due := now.Sub(p.lastLoad[k]) >= p.o.LoadInterval-p.o.Interval/2
		if due && !t.Down {
			p.lastLoad[k] = now
		}
		p.mu.Unlock()
		if !t.Down && !due {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if t.Down {
				p.health(ctx, t)
				return
			}
			p.load(ctx, t)
		}()
	}
	wg.Wait()
	p.mu.Lock()
	for k := range p.lastLoad {
		if !seen[k] {
			delete(p.lastLoad, k)
		}
	}
	p.mu.Unlock()
}

func (p *Prober) get(ctx context.Context, url string) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, p.o.Timeout)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	resp, err := p.o.Client.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = cancelOnClose{resp.Body, cancel}
	return resp, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error { err := c.ReadCloser.Close(); c.cancel(); return err }

// health returns t to the table when its engine answers /health with 200.
func (p *Prober) health(ctx context.Context, t router.Target) {
	resp, err := p.get(ctx, strings.TrimSuffix(t.URL, "/")+"/health")
	if err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		p.log.Info("replica answers again", "model", t.Model, "replica", t.ReplicaID)
		t.MarkUp()
	}
}

// load reads t's metrics. An engine that publishes none is weighed by the
// requests the router has in flight on it alone.
func (p *Prober) load(ctx context.Context, t router.Target) {
	before := t.InFlight()
	resp, err := p.get(ctx, strings.TrimSuffix(t.URL, "/")+"/metrics")
	if err != nil {
		t.SetLoad(router.EngineLoad{}, 0)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.SetLoad(router.EngineLoad{}, 0)
		return
	}
	l, err := ParseLoad(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		p.log.Debug("reading engine metrics", "replica", t.ReplicaID, "err", err)
	}
	l.At = time.Now()
	t.SetLoad(l, before)
}

// names are the metric names each engine publishes its load under.
var names = []struct{ running, waiting, kv string }{
	{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"},
	{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:gpu_cache_usage_perc"},
	{"sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage"},
	{"llamacpp:requests_processing", "llamacpp:requests_deferred", "llamacpp:kv_cache_usage_ratio"},
}

// ParseLoad reads an engine's load from its metrics in the Prometheus text
// format. Known is false when none of the known names is there.
func ParseLoad(r io.Reader) (router.EngineLoad, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil && len(fams) == 0 {
		return router.EngineLoad{}, fmt.Errorf("parsing metrics: %w", err)
	}
	l := router.EngineLoad{KVUsage: -1}
	for _, n := range names {
		run, okR := sum(fams[n.running])
		wait, okW := sum(fams[n.waiting])
		if !okR && !okW {
			continue
		}
		l.Known = true
		l.Running, l.Waiting = int64(run), int64(wait)
		if kv, ok := sum(fams[n.kv]); ok {
			l.KVUsage = kv
			break
		}
	}
	return l, nil
}

// sum adds a family's gauge (or untyped) values over its label sets.
func sum(f *dto.MetricFamily) (float64, bool) {
	if f == nil || len(f.GetMetric()) == 0 {
		return 0, false
	}
	var s float64
	for _, m := range f.GetMetric() {
		switch {
		case m.GetGauge() != nil:
			s += m.GetGauge().GetValue()
		case m.GetUntyped() != nil:
			s += m.GetUntyped().GetValue()
		case m.GetCounter() != nil:
			s += m.GetCounter().GetValue()
		}
	}
	return s, true
}
