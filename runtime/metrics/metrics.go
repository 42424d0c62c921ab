// Package metrics owns the control plane's Prometheus registry and what it
// exports: the gateway's requests (an Observer), the fleet as the control
// plane sees it (a FleetCollector), and whatever other packages register.
// Everything is served on metrics_listen by Handler, which serves /metrics
// and nothing else.
//
// No label ever carries an API key, a key id, a token or message content:
// labels are bounded sets (models in the catalog, projects, nodes, GPU
// indices, HTTP statuses, admission reasons).
package metrics

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every metric llmgw defines.
const Namespace = "llmgw"

// Registry is the control plane's metrics registry. It is not the global
// default registry: nothing registers on it by import.
type Registry struct {
	reg *prometheus.Registry
}

// New returns a registry holding the Go runtime and process collectors.
func New() *Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &Registry{reg: reg}
}

// Register adds collectors (e.g. the usage recorder's rows written and
// dropped). A collector whose metrics clash with one already registered is
// an error naming it.
func (r *Registry) Register(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := r.reg.Register(c); err != nil {
			return fmt.Errorf("registering metrics collector %T: %w", c, err)
		}
	}
	return nil
}

// Registerer returns the registry as a prometheus.Registerer, for code that
// builds its metrics with promauto.With.
func (r *Registry) Registerer() prometheus.Registerer { return r.reg }

// Gatherer returns the registry as a prometheus.Gatherer (tests, tools).
func (r *Registry) Gatherer() prometheus.Gatherer { return r.reg }

// Handler serves the registry at /metrics and answers 404 to every other
// path: the metrics listener may be reachable from the monitoring network,
// so nothing else is ever mounted on it.
func (r *Registry) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{
		Registry:      r.reg, // promhttp_metric_handler_errors_total
		ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("/", http.NotFound)
	return mux
}
