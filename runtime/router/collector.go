package router

import "github.com/prometheus/client_golang/prometheus"

var (
	descInFlight = prometheus.NewDesc("llmgw_router_requests_in_flight",
		"Requests this control plane has in flight on a replica.", []string{"model", "replica"}, nil)
	descUp = prometheus.NewDesc("llmgw_router_replica_up",
		"1 while a ready replica takes requests, 0 while it is out of the routing table after a failed connection (passive health).", []string{"model", "replica"}, nil)
	descWeight = prometheus.NewDesc("llmgw_router_replica_weight",
		"The weight the router divides a replica's load by: its profile's weight, at least 1.", []string{"model", "replica"}, nil)
	descQueue = prometheus.NewDesc("llmgw_router_engine_requests",
		"Requests a replica's engine last reported running and waiting (absent when its engine publishes no metrics).", []string{"model", "replica", "state"}, nil)
)

// Collector exports the routing table's state per replica.
func (r *Router) Collector() prometheus.Collector { return collector{r} }

type collector struct{ r *Router }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descInFlight
	ch <- descUp
	ch <- descWeight
	ch <- descQueue
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for model, eps := range c.r.Snapshot() {
		for _, ep := range eps {
			ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(ep.InFlight), model, ep.ReplicaID)
			up := 1.0
			if ep.Down {
				up = 0
			}
			ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up, model, ep.ReplicaID)
			ch <- prometheus.MustNewConstMetric(descWeight, prometheus.GaugeValue, float64(max(ep.Weight, 1)), model, ep.ReplicaID)
			if ep.Engine.Known {
				ch <- prometheus.MustNewConstMetric(descQueue, prometheus.GaugeValue, float64(ep.Engine.Running), model, ep.ReplicaID, "running")
				ch <- prometheus.MustNewConstMetric(descQueue, prometheus.GaugeValue, float64(ep.Engine.Waiting), model, ep.ReplicaID, "waiting")
			}
		}
	}
}
