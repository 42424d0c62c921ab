package metrics

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/spec"
)

// LatencyBuckets are the request latency and time-to-first-token histogram
// buckets, in seconds: from a cached or refused request (5 ms) to a long
// generation (5 minutes).
var LatencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300}

// OwnBuckets are the buckets of the gateway's own time per request, from
// 25 µs to 100 ms: a proxy hop's work is tens of microseconds.
var OwnBuckets = []float64{0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1}

// Admission outcomes the Observer counts besides the refusal reasons
// admission itself gives (limit, budget, model_not_allowed, ...).
const (
	// AdmissionAdmitted is a request admitted for the model asked for.
	AdmissionAdmitted = "admitted"
	// AdmissionFallback is a request admitted for a budget's fallback model.
	AdmissionFallback = "fallback"
	// AdmissionNoReplica is an admitted request answered 503 because its
	// model had no ready replica.
	AdmissionNoReplica = "no_replica"
	// AdmissionError is a request admission could not decide (500).
	AdmissionError = "error"
	// AdmissionOther stands for a refusal reason that is not a short
	// lowercase word, so that no free text ever becomes a label.
	AdmissionOther = "other"
)

// knownReasons are created at start, so that rate() over them works from
// the first request that counts.
var knownReasons = []string{AdmissionAdmitted, AdmissionFallback, AdmissionNoReplica, AdmissionError,
	"limit", "budget", "model_not_allowed"}

// Observer is the gateway.Observer that exports requests, latency, time to
// first token, the gateway's own time, tokens and admission outcomes. It runs on every request, so
// the label children of each (model, project) are looked up once and kept.
type Observer struct {
	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	ttft      *prometheus.HistogramVec
	own       *prometheus.HistogramVec
	tokens    *prometheus.CounterVec
	admission *prometheus.CounterVec

	reasons cowMap[string, prometheus.Counter]
	series  cowMap[seriesKey, *series]
}

type seriesKey struct{ model, project string }

// series holds the label children of one (model, project).
type series struct {
	o          *Observer
	model      string // the label values, sanitized
	project    string
	latency    prometheus.Observer
	ttft       prometheus.Observer
	own        prometheus.Observer
	prompt     prometheus.Counter
	completion prometheus.Counter
	byStatus   cowMap[int, prometheus.Counter]
}

// NewObserver creates the request metrics and registers them on r.
func NewObserver(r *Registry) (*Observer, error) {
	o := &Observer{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "requests_total",
			Help: "Inference requests by canonical model served, project and HTTP status (499: the client went away).",
		}, []string{"model", "project", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "request_duration_seconds",
			Help:    "Latency of the inference requests a replica served, from arrival to the last byte.",
			Buckets: LatencyBuckets,
		}, []string{"model"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "time_to_first_token_seconds",
			Help:    "Time from arrival to the first streamed event, for streamed requests.",
			Buckets: LatencyBuckets,
		}, []string{"model"}),
		own: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "gateway_own_seconds",
			Help:    "The gateway's own time per inference request before the client's first byte, without the engine's: arrival to the request handed to the engine, plus the engine's answer (a stream's first event) in hand to the client's first byte.",
			Buckets: OwnBuckets,
		}, []string{"model"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "tokens_total",
			Help: "Tokens charged, by model, project and kind (prompt or completion); includes the gateway's estimate for abandoned streams.",
		}, []string{"model", "project", "kind"}),
		admission: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "admission_total",
			Help: "Admission outcomes of requests for a known model: admitted, fallback, no_replica, error, or the refusal reason (limit, budget, model_not_allowed, ...).",
		}, []string{"reason"}),
	}
	if err := r.Register(o.requests, o.latency, o.ttft, o.own, o.tokens, o.admission); err != nil {
		return nil, err
	}
	for _, reason := range knownReasons {
		o.reason(reason)
	}
	return o, nil
}

// Observe implements gateway.Observer. It never blocks: after the first
// request of a (model, project, status) it does two map lookups and
// atomic adds.
func (o *Observer) Observe(rec request.Record) {
	s := o.seriesFor(rec.Model, rec.Principal.Project)
	s.status(rec.Status).Inc()
	if rec.ReplicaID != "" && rec.Latency > 0 {
		s.latency.Observe(rec.Latency.Seconds())
	}
	if rec.Stream && rec.TTFT > 0 {
		s.ttft.Observe(rec.TTFT.Seconds())
	}
	if rec.Own > 0 {
		s.own.Observe(rec.Own.Seconds())
	}
	if rec.PromptTokens > 0 {
		s.prompt.Add(float64(rec.PromptTokens))
	}
	if rec.CompletionTokens > 0 {
		s.completion.Add(float64(rec.CompletionTokens))
	}
	if reason := admissionOutcome(rec); reason != "" {
		o.reason(reason).Inc()
	}
}

// admissionOutcome is what admission made of a request; empty when the
// request never reached it (unauthenticated, unknown model, bad body).
func admissionOutcome(rec request.Record) string {
	switch {
	case rec.Admission != "":
		return rec.Admission
	case rec.Model == "":
		return ""
	case rec.ReplicaID == "" && rec.Status == http.StatusServiceUnavailable:
		return AdmissionNoReplica
	case rec.ReplicaID == "" && rec.Status == http.StatusInternalServerError:
		return AdmissionError
	case rec.Requested != "":
		return AdmissionFallback
	default:
		return AdmissionAdmitted
	}
}

func (o *Observer) reason(reason string) prometheus.Counter {
	return o.reasons.get(reason, func() prometheus.Counter {
		label := reason
		if !isReasonWord(reason) {
			label = AdmissionOther
		}
		return o.admission.WithLabelValues(label)
	})
}

// isReasonWord reports whether s is a short lowercase identifier, the only
// shape of admission reason that becomes a label.
func isReasonWord(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

func (o *Observer) seriesFor(model, project string) *series {
	return o.series.get(seriesKey{model, project}, func() *series {
		m, p := labelValue(model), labelValue(project)
		return &series{
			o: o, model: m, project: p,
			latency:    o.latency.WithLabelValues(m),
			ttft:       o.ttft.WithLabelValues(m),
			own:        o.own.WithLabelValues(m),
			prompt:     o.tokens.WithLabelValues(m, p, "prompt"),
			completion: o.tokens.WithLabelValues(m, p, "completion"),
		}
	})
}

func (s *series) status(code int) prometheus.Counter {
	return s.byStatus.get(code, func() prometheus.Counter {
		return s.o.requests.WithLabelValues(s.model, s.project, statusLabel(code))
	})
}

func statusLabel(code int) string {
	if code < 100 || code > 599 {
		return "0"
	}
	return strconv.Itoa(code)
}

// maxLabelLen bounds a model or project label value.
const maxLabelLen = 128

// redacted replaces a label value that looks like a secret.
const redacted = "redacted"

// labelValue returns v as a label value, or "redacted" when it looks like
// an API key or admin token (a bug upstream must not publish one) or is
// longer than any model or project name.
func labelValue(v string) string {
	if len(v) > maxLabelLen || looksSecret(v) {
		return redacted
	}
	return v
}

// looksSecret reports whether v has the shape of a generated API key or
// admin token: its prefix followed by a long random tail.
func looksSecret(v string) bool {
	for _, p := range []string{spec.AdminTokenPrefix, spec.APIKeyPrefix} {
		if tail, ok := strings.CutPrefix(v, p); ok && len(tail) >= 40 {
			return true
		}
	}
	return strings.HasPrefix(strings.ToLower(v), "bearer ") || strings.HasPrefix(v, "sk-")
}
