package simengine

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// ttftBuckets are vLLM's buckets for vllm:time_to_first_token_seconds.
var ttftBuckets = []float64{
	0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
	1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
}

// metrics holds one engine's counters under vLLM's names. Every series
// carries the label model_name. It writes the Prometheus text exposition
// format itself: the module graph does not yet carry client_golang's own
// dependencies (see the package report), and the format is small and stable.
type metrics struct {
	modelName  string
	cacheUsage func() float64

	running          atomic.Int64
	waiting          atomic.Int64
	promptTokens     atomic.Uint64
	generationTokens atomic.Uint64
	cacheQueries     atomic.Uint64
	cacheHits        atomic.Uint64

	mu         sync.Mutex
	finished   map[string]uint64 // finish reason -> count
	ttftCounts []uint64          // per bucket, not cumulative; last is +Inf
	ttftSum    float64
	ttftCount  uint64
}

func newMetrics(modelName string, cacheUsage func() float64) *metrics {
	return &metrics{
		modelName:  modelName,
		cacheUsage: cacheUsage,
		finished:   map[string]uint64{},
		ttftCounts: make([]uint64, len(ttftBuckets)+1),
	}
}

func (m *metrics) observeTTFT(seconds float64) {
	i := len(ttftBuckets)
	for j, b := range ttftBuckets {
		if seconds <= b {
			i = j
			break
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ttftCounts[i]++
	m.ttftSum += seconds
	m.ttftCount++
}

func (m *metrics) requestFinished(reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.finished[reason]++
}

// ServeHTTP writes the metrics in the Prometheus text format.
func (m *metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	bw := bufio.NewWriter(w)
	m.write(bw)
	bw.Flush()
}

func (m *metrics) write(w io.Writer) {
	label := `model_name="` + escapeLabel(m.modelName) + `"`
	usage := m.cacheUsage()
	gauge := func(name, help string, v float64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s{%s} %s\n", name, help, name, name, label, formatFloat(v))
	}
	counter := func(name, help string, v uint64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s{%s} %d\n", name, help, name, name, label, v)
	}
	gauge("vllm:num_requests_running", "Number of requests in model execution batches.", float64(m.running.Load()))
	gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", float64(m.waiting.Load()))
	gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", usage)
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", usage)
	counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", m.promptTokens.Load())
	counter("vllm:generation_tokens_total", "Number of generation tokens processed.", m.generationTokens.Load())
	counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", m.cacheQueries.Load())
	counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", m.cacheHits.Load())

	m.mu.Lock()
	defer m.mu.Unlock()
	const success = "vllm:request_success_total"
	fmt.Fprintf(w, "# HELP %s Count of successfully processed requests.\n# TYPE %s counter\n", success, success)
	for _, reason := range []string{"stop", "length", "tool_calls", "abort"} {
		fmt.Fprintf(w, "%s{finished_reason=%q,%s} %d\n", success, reason, label, m.finished[reason])
	}
	const ttft = "vllm:time_to_first_token_seconds"
	fmt.Fprintf(w, "# HELP %s Histogram of time to first token in seconds.\n# TYPE %s histogram\n", ttft, ttft)
	var cum uint64
	for i, b := range ttftBuckets {
		cum += m.ttftCounts[i]
		fmt.Fprintf(w, "%s_bucket{%s,le=\"%s\"} %d\n", ttft, label, formatFloat(b), cum)
	}
	cum += m.ttftCounts[len(ttftBuckets)]
	fmt.Fprintf(w, "%s_bucket{%s,le=\"+Inf\"} %d\n", ttft, label, cum)
	fmt.Fprintf(w, "%s_sum{%s} %s\n%s_count{%s} %d\n", ttft, label, formatFloat(m.ttftSum), ttft, label, m.ttftCount)
}

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }
