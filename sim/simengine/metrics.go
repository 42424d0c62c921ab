package simengine

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ttftBuckets are vLLM's buckets for vllm:time_to_first_token_seconds.
var ttftBuckets = []float64{
	0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
	1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
}

// finishReasons are the values of vllm:request_success_total's
// finished_reason label, created up front so every series is exposed.
var finishReasons = []string{"stop", "length", "tool_calls", "abort"}

// metrics holds one engine's series under vLLM's names, each labelled with
// model_name, in a registry of its own so that several engines can run in
// one process.
type metrics struct {
	registry *prometheus.Registry
	handler  http.Handler

	running          prometheus.Gauge
	waiting          prometheus.Gauge
	promptTokens     prometheus.Counter
	generationTokens prometheus.Counter
	cacheQueries     prometheus.Counter
	cacheHits        prometheus.Counter
	finished         *prometheus.CounterVec
	ttft             prometheus.Histogram
}

func newMetrics(modelName string, cacheUsage func() float64) *metrics {
	labels := prometheus.Labels{"model_name": modelName}
	m := &metrics{
		registry: prometheus.NewRegistry(),
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "vllm:num_requests_running", ConstLabels: labels,
			Help: "Number of requests in model execution batches.",
		}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "vllm:num_requests_waiting", ConstLabels: labels,
			Help: "Number of requests waiting to be processed.",
		}),
		promptTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vllm:prompt_tokens_total", ConstLabels: labels,
			Help: "Number of prefill tokens processed.",
		}),
		generationTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vllm:generation_tokens_total", ConstLabels: labels,
			Help: "Number of generation tokens processed.",
		}),
		cacheQueries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vllm:prefix_cache_queries_total", ConstLabels: labels,
			Help: "Prefix cache queries, in terms of number of queried tokens.",
		}),
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vllm:prefix_cache_hits_total", ConstLabels: labels,
			Help: "Prefix cache hits, in terms of number of cached tokens.",
		}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vllm:request_success_total", ConstLabels: labels,
			Help: "Count of processed requests by finish reason.",
		}, []string{"finished_reason"}),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "vllm:time_to_first_token_seconds", ConstLabels: labels,
			Help:    "Histogram of time to first token in seconds.",
			Buckets: ttftBuckets,
		}),
	}
	for _, r := range finishReasons {
		m.finished.WithLabelValues(r)
	}
	m.registry.MustRegister(
		m.running, m.waiting, m.promptTokens, m.generationTokens,
		m.cacheQueries, m.cacheHits, m.finished, m.ttft,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "vllm:gpu_cache_usage_perc", ConstLabels: labels,
			Help: "GPU KV-cache usage. 1 means 100 percent usage.",
		}, cacheUsage),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "vllm:kv_cache_usage_perc", ConstLabels: labels,
			Help: "KV-cache usage. 1 means 100 percent usage.",
		}, cacheUsage),
	)
	m.handler = promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
	return m
}

func (m *metrics) observeTTFT(seconds float64) { m.ttft.Observe(seconds) }

func (m *metrics) requestFinished(reason string) { m.finished.WithLabelValues(reason).Inc() }

// ServeHTTP writes the metrics in the Prometheus exposition format.
func (m *metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) { m.handler.ServeHTTP(w, r) }
