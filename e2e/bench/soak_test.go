package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/config"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

// Soak goals: a control plane holds soakStreams concurrent streams for
// soakFor without an error, its resident memory stays within soakMaxRSS,
// and its goroutines come back to what they were once the load stops.
const (
	soakStreams        = 1000
	soakFor            = 60 * time.Second
	soakMaxRSS         = 150 << 20
	soakGoroutineSlack = 25
)

// soakModel streams 40 tokens at 5 tokens/s: an 8-second stream, so each
// of the 1,000 clients runs about seven in a minute and the gateway relays
// about 5,000 events a second.
const soakModel = `  - name: soak
    source: sim://soak
    scaling: { min: 1 }
    profiles:
      - name: cpu
        engine: sim
        args: ["--decode-tps", "5", "--max-num-seqs", "1200", "--eos-after", "0"]
`

// BenchmarkSoak1000Streams holds 1,000 concurrent streaming chat
// completions against a real control plane process (an agent, a sim
// engine, real TLS) for 60 seconds and compares against the goals: no
// errors, the control plane's RSS at most 150 MB throughout (sampled every
// second from /proc), and its goroutines (go_goroutines) after the load
// within 25 of before. Errors and goroutines left behind fail the
// benchmark; the RSS goal is printed as ok or MISS, as the placement
// goals are.
func BenchmarkSoak1000Streams(b *testing.B) {
	dir := b.TempDir()
	binary, err := testcluster.Build(dir)
	if err != nil {
		b.Fatal(err)
	}
	pprofAddr := os.Getenv("SOAK_PPROF_ADDR") // a loopback address (not LLMGW_: the daemons read those): the heap at the peak is saved
	c := testcluster.NewCluster(b, binary, testcluster.Options{Grace: "30s", Models: soakModel, Configure: func(s *config.Server) {
		if pprofAddr != "" {
			s.PprofListen = pprofAddr
		}
	}})
	c.StartAgent(testcluster.NodeSpec{ID: "soak01"})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: soakStreams, MaxConnsPerHost: 0, DisableCompression: true}}
	var ttftMu sync.Mutex
	var ttfts []time.Duration // time to the first event of each stream under load
	measure := false
	post := func(ctx context.Context) (int, error) {
		sent := time.Now()
		body := `{"model":"soak","stream":true,"max_tokens":40,"messages":[{"role":"user","content":"soak"}]}`
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Client+"/chat/completions", strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			return 0, fmt.Errorf("status %d: %s", resp.StatusCode, b)
		}
		events, done := 0, false
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Bytes()
			if bytes.HasPrefix(line, []byte("data: [DONE]")) {
				done = true
			} else if bytes.HasPrefix(line, []byte("data:")) {
				if events == 0 && measure {
					d := time.Since(sent)
					ttftMu.Lock()
					ttfts = append(ttfts, d)
					ttftMu.Unlock()
				}
				events++
			}
		}
		if err := sc.Err(); err != nil {
			return events, err
		}
		if !done {
			return events, fmt.Errorf("stream ended after %d events without [DONE]", events)
		}
		return events, nil
	}
	testcluster.WaitFor(b, "model soak to serve", 90*time.Second, func() (bool, string) {
		if _, err := post(context.Background()); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	pid := c.Server.Cmd.Process.Pid
	before := goroutines(b, c.MetricsURL())
	rssBefore := rss(b, pid)

	var streams, events, errs atomic.Int64
	var firstErr sync.Once
	var errText string
	var peakRSS atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), soakFor)
	defer cancel()
	start := time.Now()
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
				if r := rss(b, pid); r > peakRSS.Load() {
					peakRSS.Store(r)
					if pprofAddr != "" && time.Since(start) > soakFor/2 {
						saveHeap(pprofAddr)
					}
				}
			}
		}
	}()
	measure = true
	b.ResetTimer()
	var wg sync.WaitGroup
	for range soakStreams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				n, err := post(context.Background())
				events.Add(int64(n))
				if err != nil {
					errs.Add(1)
					firstErr.Do(func() { errText = err.Error() })
					continue
				}
				streams.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(stopSampling)
	<-sampled
	client.CloseIdleConnections()

	// Goroutines come back once the clients' connections close: the
	// gateway's idle connections to the engine hold none (runtime/gateway,
	// upstream), so a few seconds is plenty.
	var after int
	drained := time.Now()
	deadline := drained.Add(20 * time.Second)
	for {
		after = goroutines(b, c.MetricsURL())
		if after <= before+soakGoroutineSlack || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	drainedIn := time.Since(drained).Round(time.Second)
	mark := func(ok bool) string {
		if ok {
			return "ok"
		}
		return "MISS"
	}
	fmt.Printf("\nsoak: %d concurrent streams for %s against one control plane (same run, %s)\n", soakStreams, elapsed.Round(time.Second), time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("  streams completed  %d (%.0f/s), events relayed %d (%.0f/s)\n", streams.Load(), float64(streams.Load())/elapsed.Seconds(), events.Load(), float64(events.Load())/elapsed.Seconds())
	fmt.Printf("  errors             %d (goal 0) %s %s\n", errs.Load(), mark(errs.Load() == 0), errText)
	slices.Sort(ttfts)
	pct := func(q float64) time.Duration {
		if len(ttfts) == 0 {
			return 0
		}
		return ttfts[min(len(ttfts)-1, int(q*float64(len(ttfts))))]
	}
	fmt.Printf("  first event        p50 %s, p99 %s, max %s over %d streams\n", pct(0.50).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), pct(1).Round(time.Millisecond), len(ttfts))
	fmt.Printf("  control plane RSS  %.0f MB before, peak %.0f MB (goal ≤ %d MB) %s\n", float64(rssBefore)/(1<<20), float64(peakRSS.Load())/(1<<20), soakMaxRSS>>20, mark(peakRSS.Load() <= soakMaxRSS))
	fmt.Printf("  goroutines         %d before, %d after %s (goal ≤ %d) %s\n", before, after, drainedIn, before+soakGoroutineSlack, mark(after <= before+soakGoroutineSlack))
	b.ReportMetric(float64(peakRSS.Load())/(1<<20), "peak-rss-MB")
	b.ReportMetric(float64(errs.Load()), "errors")
	b.ReportMetric(float64(after-before), "goroutines-left")
	b.ReportMetric(float64(streams.Load())/elapsed.Seconds(), "streams/s")
	b.ReportMetric(float64(pct(0.99))/1e6, "p99-first-event-ms")
	if errs.Load() > 0 {
		b.Errorf("%d of %d streams failed; the first: %s", errs.Load(), errs.Load()+streams.Load(), errText)
	}
	if after > before+soakGoroutineSlack {
		b.Errorf("the control plane runs %d goroutines after the load, %d before", after, before)
	}
}

// rss is the resident set size of process pid, in bytes.
func rss(b *testing.B, pid int) int64 {
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatalf("reading the control plane's memory: %v", err)
	}
	for _, line := range strings.Split(string(s), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	b.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// goroutines is the control plane's go_goroutines.
func goroutines(b *testing.B, metricsURL string) int {
	resp, err := http.Get(metricsURL)
	if err != nil {
		b.Fatalf("reading the control plane's metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("go_goroutines %q: %v", v, err)
			}
			return int(f)
		}
	}
	b.Fatal("no go_goroutines in the control plane's metrics")
	return 0
}

// saveHeap writes the control plane's heap profile to soak-heap.pprof in
// the working directory, for `go tool pprof`.
func saveHeap(addr string) {
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap")
	if err != nil {
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil {
		_ = os.WriteFile("soak-heap.pprof", b, 0o644)
	}
	// The same heap as text ends with runtime.MemStats (StackInuse,
	// HeapInuse, HeapIdle...), and the goroutines by stack: where the
	// resident memory beyond the heap goes.
	for name, path := range map[string]string{"soak-memstats.txt": "/debug/pprof/heap?debug=1", "soak-goroutines.txt": "/debug/pprof/goroutine?debug=1"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			_ = os.WriteFile(name, b, 0o644)
		}
	}
}
