package ctl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/spec"
)

// Client API environment: where `ctl bench` sends its requests, as the
// OpenAI clients (and llmgw dev's env file) name them.
const (
	EnvBaseURL = "LLMGW_BASE_URL"
	EnvAPIKey  = "LLMGW_API_KEY"
)

// benchLevel is what one concurrency level measured.
type benchLevel struct {
	conc     int
	p50, p90 time.Duration
	rps      float64
	errors   int
}

// cmdBench measures how many requests at once a model's replicas carry
// while the p90 time to first token stays within a target and, where the
// engines say what their load is (ListReplicas' engine_load), while they
// neither keep requests queued nor a KV cache full: concurrency
// doubles from 1 until a level misses the target, is then narrowed
// between the last level met and the first missed (to an eighth), and the
// last level that met it, divided by the model's ready replicas, is one
// replica's capacity:
// the routing weight to give its profile (peak throughput comes long after
// latency has become unusable, so it would overstate what a replica
// serves). With --save it records that weight on the profile the replicas
// run. The requests are real ones, through the client API, and compete
// with everyone else's.
func (a *app) cmdBench(ctx context.Context, args []string) int {
	fs, conn := a.newAPIFlagSet("bench", "bench MODEL [--save] [--target 1s] [--max-concurrency 64] [--requests 8] [--max-tokens 64]")
	save := fs.Bool("save", false, "record the measured capacity as the routing weight of the profile the replicas run")
	target := fs.Duration("target", time.Second, "the p90 time to first token a level must meet")
	maxConc := fs.Int("max-concurrency", 64, "the highest concurrency tried")
	perClient := fs.Int("requests", 8, "requests each concurrent client sends per level")
	maxTokens := fs.Int("max-tokens", 64, "max_tokens of each request")
	baseURL := fs.String("base-url", a.env(EnvBaseURL), "the client API, e.g. http://127.0.0.1:8080/v1 (env "+EnvBaseURL+")")
	apiKey := fs.String("api-key", "", "an API key for the client API (env "+EnvAPIKey+")")
	pos, code, ok := a.parse(fs, args, 1, "the model name")
	if !ok {
		return code
	}
	if *apiKey == "" {
		*apiKey = a.env(EnvAPIKey)
	}
	switch {
	case *baseURL == "":
		return a.usageErrorf(fs, "no client API: set --base-url or %s (e.g. http://127.0.0.1:8080/v1)", EnvBaseURL)
	case *apiKey == "":
		return a.usageErrorf(fs, "no API key: set --api-key or %s", EnvAPIKey)
	case *target <= 0 || *maxConc < 1 || *perClient < 1 || *maxTokens < 1:
		return a.usageErrorf(fs, "--target, --max-concurrency, --requests and --max-tokens must be positive")
	}
	name := pos[0]
	c, code, ok := a.dial(conn)
	if !ok {
		return code
	}
	defer c.close()

	cctx, cancel := c.callCtx(ctx)
	m, err := c.GetModel(cctx, &managev1.GetModelRequest{Name: name})
	cancel()
	if err != nil {
		return a.rpcError(c, "getting model "+name, err)
	}
	// The ready replicas, read again after every level: a pool that
	// changed size or profile meanwhile (the autoscaler reacting to the
	// benchmark's own load, a failure) makes a per-replica figure wrong.
	// Read during a level too, for what the engines say of their load.
	list := func() (benchPool, error) {
		cctx, cancel := c.callCtx(ctx)
		defer cancel()
		reps, err := c.ListReplicas(cctx, &managev1.ListReplicasRequest{Model: name})
		if err != nil {
			return benchPool{}, err
		}
		return readyPool(reps.GetReplicas()), nil
	}
	pool, err := list()
	if err != nil {
		return a.rpcError(c, "listing the replicas of "+name, err)
	}
	ids, profiles := pool.ids, pool.profiles
	ready := len(ids)
	if ready == 0 {
		return a.errorf("benchmarking model %s: it has no ready replica", name)
	}
	if len(profiles) > 1 && *save {
		return a.errorf("saving the weight of %s: its ready replicas run profiles %s, which one run cannot tell apart; nothing measured: measure each profile with only its replicas ready, or set the weights yourself", name, strings.Join(profiles, ", "))
	}
	// A model that follows its load may gain a replica under the
	// benchmark's own load, which stops the run: say how to hold it.
	// (A model declared in server.yaml is scaled there.)
	sc := m.GetScaling()
	hold := fmt.Sprintf("llmgw ctl scale %s %d", name, ready)
	restore := fmt.Sprintf("llmgw ctl scale %s %d --max %d", name, sc.GetMin(), sc.GetMax())
	if m.GetOrigin() == "config" {
		hold, restore = fmt.Sprintf("scaling: {min: %d, max: %d} in server.yaml", ready, ready), fmt.Sprintf("scaling: {min: %d, max: %d}", sc.GetMin(), sc.GetMax())
	}
	if sc.GetMax() > sc.GetMin() {
		fmt.Fprintf(a.stdout, "note: %s scales between %d and %d replicas, and may gain one under this load, which stops the run; to hold it: %s (afterwards: %s)\n",
			name, sc.GetMin(), sc.GetMax(), hold, restore)
	}

	fmt.Fprintf(a.stdout, "benchmarking %s over %s through %s: p90 time to first token ≤ %s\n", name, plural(ready, "ready replica"), *baseURL, *target)
	tw := newTable(a.stdout)
	row(tw, "CONCURRENCY", "P50 TTFT", "P90 TTFT", "REQ/S", "ERRORS", "QUEUED", "KV", "")
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *maxConc}, Timeout: 10 * time.Minute}
	var changed string
	// engines: some engine said what its load was during the run; reads
	// counts the listings taken while levels ran, stale those whose
	// readings were older than their level.
	engines, reads, stale := false, 0, 0
	// level runs one concurrency level, prints its row and reports whether
	// it met the target; a pool changed under it stops the run (changed).
	level := func(conc int) (benchLevel, bool) {
		stop, done := make(chan struct{}), make(chan struct{})
		// Only readings the control plane took after the level began
		// count: its router asks the engines every 2 s, and a level
		// follows the last at once.
		var load engineSamples
		if before, err := list(); err == nil {
			load.since = before.stamps
		}
		go func() {
			defer close(done)
			t := time.NewTicker(benchLoadEvery)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
				}
				if p, err := list(); err == nil {
					load.add(p)
				}
			}
		}()
		l := benchRun(ctx, hc, *baseURL, *apiKey, name, conc, *perClient, *maxTokens)
		close(stop)
		<-done
		engines = engines || load.samples > 0
		reads, stale = reads+load.reads, stale+load.stale
		verdict := "met"
		switch {
		case l.errors > 0 || l.p90 > *target:
			verdict = "missed"
		case load.queuedMostly():
			verdict = "missed: the engines queued requests"
		case load.fullMostly():
			verdict = "missed: a KV cache was full"
		}
		queued, kv := "-", "-"
		if load.samples > 0 {
			queued = fmt.Sprint(load.peakWaiting)
			if load.peakKV >= 0 {
				kv = fmt.Sprintf("%.0f%%", load.peakKV*100)
			}
		}
		row(tw, fmt.Sprint(conc), l.p50.Round(time.Millisecond).String(), l.p90.Round(time.Millisecond).String(),
			fmt.Sprintf("%.1f", l.rps), fmt.Sprint(l.errors), queued, kv, verdict)
		if after, err := list(); err == nil && !slices.Equal(after.ids, ids) {
			changed = fmt.Sprintf("its ready replicas changed during the run (%s before, %d after: the autoscaler answering the benchmark's own load, or a failure)",
				plural(ready, "replica"), len(after.ids))
		}
		return l, verdict == "met"
	}
	// Concurrency doubles until a level misses; then the capacity is
	// looked for between the last level met and the first missed, to
	// within an eighth.
	var passed *benchLevel
	missedAt := 0
	for conc := 1; changed == "" && ctx.Err() == nil; conc = min(conc*2, *maxConc) {
		l, met := level(conc)
		if !met {
			missedAt = conc
			break
		}
		passed = &l
		if conc == *maxConc {
			break
		}
	}
	for passed != nil && missedAt > 0 && missedAt-passed.conc > max(1, passed.conc/8) && changed == "" && ctx.Err() == nil {
		mid := (passed.conc + missedAt) / 2
		if l, met := level(mid); met {
			passed = &l
		} else {
			missedAt = mid
		}
	}
	if err := tw.Flush(); err != nil {
		return a.errorf("printing: %v", err)
	}
	if ctx.Err() != nil {
		return a.errorf("benchmarking model %s: %v", name, ctx.Err())
	}
	switch {
	case !engines && stale > 0:
		fmt.Fprintf(a.stdout, "no reading of the engines' load was taken after a level began (the control plane reads them every 2 s; the levels were shorter): measured from the outside only\n")
	case !engines && reads > 0:
		fmt.Fprintf(a.stdout, "the engines publish no load metrics: measured from the outside only; their queues and KV caches are not part of the answer\n")
	case !engines:
		fmt.Fprintf(a.stdout, "no reading of the engines' load came in while the levels ran (each under %s, or the control plane did not answer): measured from the outside only\n", benchLoadEvery)
	}
	if changed != "" {
		return a.errorf("benchmarking model %s: %s; nothing measured per replica: hold the count (%s) and run it again", name, changed, hold)
	}
	if passed == nil {
		return a.errorf("benchmarking model %s: even one request at a time misses p90 ≤ %s (or fails); the target is out of its reach", name, *target)
	}
	weight := max(passed.conc/ready, 1)
	fmt.Fprintf(a.stdout, "capacity: %s at once over %s at p90 ≤ %s: weight %d per replica (profile %s)\n",
		plural(passed.conc, "request"), plural(ready, "replica"), *target, weight, strings.Join(profiles, ", "))
	if passed.conc == *maxConc {
		fmt.Fprintf(a.stdout, "every level met the target up to --max-concurrency %d: the capacity is at least that\n", *maxConc)
	}
	if len(profiles) > 1 {
		// The router split the load by the profiles' present weights: the
		// run measured them together, and one figure cannot tell them
		// apart.
		fmt.Fprintf(a.stdout, "the ready replicas run %d profiles (%s): the weight is the pool's under their present weights, not each one's\n", len(profiles), strings.Join(profiles, ", "))
		return exitOK
	}
	if !*save {
		fmt.Fprintf(a.stdout, "put weight: %d in the profile, or run again with --save\n", weight)
		return exitOK
	}
	if m.GetOrigin() == "config" {
		return a.errorf("saving the weight of %s: it is declared in server.yaml, which is read again on every start; set weight: %d there", name, weight)
	}
	def := cloneModel(m)
	for _, p := range def.GetProfiles() {
		if slices.Contains(profiles, p.GetName()) {
			p.Weight = int32(weight)
		}
	}
	cctx, cancel = c.callCtx(ctx)
	defer cancel()
	// Only over the definition that was measured: an edit made meanwhile
	// is neither reverted nor given a weight measured before it.
	if _, err := c.UpdateModel(cctx, &managev1.UpdateModelRequest{Model: def, IfRevision: m.GetRevision()}); err != nil {
		if status.Code(err) == codes.FailedPrecondition && strings.Contains(err.Error(), "revision") {
			return a.errorf("saving the weight of %s: the model was changed while it was measured (%v); nothing saved: run the benchmark again, or set weight: %d yourself", name, status.Convert(err).Message(), weight)
		}
		return a.rpcError(c, "saving the weight of "+name, err)
	}
	fmt.Fprintf(a.stdout, "saved weight %d on profile %s of %s: the router weighs its replicas by it from now on (nothing restarts)\n",
		weight, strings.Join(profiles, ", "), name)
	return exitOK
}

// benchLoadEvery is how often a level reads what the engines say of their
// load (the control plane's router reads their metrics every 2 s).
var benchLoadEvery = 500 * time.Millisecond

// benchPool is a model's ready replicas as one listing saw them.
type benchPool struct {
	ids, profiles []string
	// known: some ready replica's engine said what its load is; waiting is
	// then the requests they queued in all, kv the fullest KV cache
	// (negative when none said).
	known   bool
	waiting int64
	kv      float64
	// stamps are when each reporting replica's engine was asked (the
	// control plane's clock, Unix ms).
	stamps map[string]int64
}

func readyPool(replicas []*managev1.Replica) benchPool {
	p := benchPool{kv: -1}
	for _, r := range replicas {
		if r.GetState() != "ready" {
			continue
		}
		p.ids = append(p.ids, r.GetId())
		if !slices.Contains(p.profiles, r.GetProfile()) {
			p.profiles = append(p.profiles, r.GetProfile())
		}
		if l := r.GetEngineLoad(); l != nil {
			if p.stamps == nil {
				p.stamps = map[string]int64{}
			}
			p.stamps[r.GetId()] = l.GetScrapedUnixMs()
			p.known = true
			p.waiting += l.GetWaiting()
			p.kv = max(p.kv, l.GetKvCacheUsage())
		}
	}
	slices.Sort(p.ids)
	slices.Sort(p.profiles)
	return p
}

// engineSamples is what the engines said of their load during a level.
type engineSamples struct {
	// since are the readings' stamps when the level began: a listing
	// counts once every reporting replica's reading is newer.
	since map[string]int64
	// reads counts the listings taken, samples those that counted.
	reads, stale, samples, queued, full int
	peakWaiting                         int64
	peakKV                              float64
}

func (e *engineSamples) add(p benchPool) {
	e.reads++
	if !p.known {
		return
	}
	for id, at := range p.stamps {
		if old, ok := e.since[id]; ok && at <= old {
			e.stale++ // taken before the level began
			return
		}
	}
	if e.samples == 0 {
		e.peakKV = -1
	}
	e.samples++
	if p.waiting > 0 {
		e.queued++
	}
	if p.kv >= spec.KVCacheFull {
		e.full++
	}
	e.peakWaiting = max(e.peakWaiting, p.waiting)
	e.peakKV = max(e.peakKV, p.kv)
}

// queuedMostly: the engines kept requests waiting through most of the
// level (at least half of what they said): past what they carry at once,
// whatever the time to first token still was.
func (e *engineSamples) queuedMostly() bool { return e.queued > 0 && 2*e.queued >= e.samples }

// fullMostly: a KV cache was full through most of the level.
func (e *engineSamples) fullMostly() bool { return e.full > 0 && 2*e.full >= e.samples }

// benchRun runs conc clients, each sending n streamed chat requests one
// after another, and returns the level's figures.
func benchRun(ctx context.Context, hc *http.Client, base, key, model string, conc, n, maxTokens int) benchLevel {
	var mu sync.Mutex
	var ttfts []time.Duration
	l := benchLevel{conc: conc}
	var wg sync.WaitGroup
	start := time.Now()
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				prompt := fmt.Sprintf("capacity probe %d of client %d at concurrency %d: describe the river stone light in a long answer", i, w, conc)
				t, err := benchOne(ctx, hc, base, key, model, prompt, maxTokens)
				mu.Lock()
				if err != nil {
					l.errors++
				} else {
					ttfts = append(ttfts, t)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	l.rps = float64(len(ttfts)) / time.Since(start).Seconds()
	if len(ttfts) > 0 {
		sort.Slice(ttfts, func(i, j int) bool { return ttfts[i] < ttfts[j] })
		l.p50 = ttfts[len(ttfts)/2]
		l.p90 = ttfts[min(len(ttfts)*9/10, len(ttfts)-1)]
	}
	return l
}

// benchOne sends one streamed chat completion and returns the time to its
// first event with content; the rest of the answer is read to its end.
func benchOne(ctx context.Context, hc *http.Client, base, key, model, prompt string, maxTokens int) (time.Duration, error) {
	body, _ := json.Marshal(map[string]any{"model": model, "stream": true, "max_tokens": maxTokens,
		"messages": []map[string]string{{"role": "user", "content": prompt}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(base, "/")+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	var first time.Duration
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if first == 0 && strings.HasPrefix(line, "data:") && strings.Contains(line, `"content":"`) && !strings.Contains(line, `"content":""`) {
			first = time.Since(start)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	if first == 0 {
		return 0, errors.New("no content in the answer")
	}
	return first, nil
}

// cloneModel is a model as UpdateModel takes it: its definition without
// what the control plane reports (origin, generation, status, warnings).
func cloneModel(m *managev1.Model) *managev1.Model {
	out := proto.Clone(m).(*managev1.Model)
	out.Origin, out.Generation, out.Status, out.Warnings, out.Revision = "", "", nil, nil, 0
	return out
}
