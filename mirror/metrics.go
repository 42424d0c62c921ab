package mirror

import (
	"io"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the mirror's own counters, served at GET /metrics on the
// management listener.
type Metrics struct {
	reg      *prometheus.Registry
	served   *prometheus.CounterVec
	requests *prometheus.CounterVec
	fetched  prometheus.Counter
}

// NewMetrics returns the counters on a registry of their own.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		served: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmgw_mirror_served_bytes_total",
			Help: "Bytes of weight files sent by the bytes listener, by model and version.",
		}, []string{"model", "version"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmgw_mirror_requests_total",
			Help: "Requests answered by the bytes listener, by kind (file, manifest, other) and status code.",
		}, []string{"kind", "code"}),
		fetched: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llmgw_mirror_fetched_bytes_total",
			Help: "Bytes received from upstream sources by the mirror's downloads.",
		}),
	}
	m.reg.MustRegister(m.served, m.requests, m.fetched)
	return m
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// addFetched counts n bytes received from upstream.
func (m *Metrics) addFetched(n int) {
	if m != nil && n > 0 {
		m.fetched.Add(float64(n))
	}
}

// countingWriter counts the body bytes and the status of one answer.
type countingWriter struct {
	http.ResponseWriter
	code  int
	bytes int64
}

func (c *countingWriter) WriteHeader(code int) {
	if c.code == 0 {
		c.code = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingWriter) Write(b []byte) (int, error) {
	if c.code == 0 {
		c.code = http.StatusOK
	}
	n, err := c.ResponseWriter.Write(b)
	c.bytes += int64(n)
	return n, err
}

// ReadFrom lets a file's bytes go out with sendfile, as they do through a
// bare ResponseWriter (io.Copy from ServeContent uses it), still counted.
func (c *countingWriter) ReadFrom(r io.Reader) (int64, error) {
	if c.code == 0 {
		c.code = http.StatusOK
	}
	rf, ok := c.ResponseWriter.(io.ReaderFrom)
	if !ok {
		return io.Copy(struct{ io.Writer }{c}, r)
	}
	n, err := rf.ReadFrom(r)
	c.bytes += n
	return n, err
}

// observe records one answer of the bytes listener.
func (m *Metrics) observe(kind, model, version string, w *countingWriter) {
	if m == nil {
		return
	}
	code := w.code
	if code == 0 {
		code = http.StatusOK
	}
	m.requests.WithLabelValues(kind, strconv.Itoa(code)).Inc()
	if kind == "file" && w.bytes > 0 && (code == http.StatusOK || code == http.StatusPartialContent) {
		m.served.WithLabelValues(model, version).Add(float64(w.bytes))
	}
}
