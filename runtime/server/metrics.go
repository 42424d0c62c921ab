package server

import (
	"github.com/llmgw/llmgw/runtime/metrics"
)

// setupMetrics creates the control plane's registry with the gateway's
// request metrics and the fleet collector. Other parts register their
// collectors on s.Metrics.
func (s *Server) setupMetrics() error {
	s.Metrics = metrics.New()
	obs, err := metrics.NewObserver(s.Metrics)
	if err != nil {
		return err
	}
	s.observer = obs
	if err := s.Metrics.Register(s.Router.Collector()); err != nil {
		return err
	}
	return s.Metrics.Register(metrics.NewFleetCollector(metrics.FleetOptions{Fleet: s.Fleet, Models: s.catalogModels,
		// The reconciler is made after the metrics.
		Draining: func() map[string]bool {
			if s.Reconciler == nil {
				return nil
			}
			return s.Reconciler.Draining()
		}}))
}

// catalogModels lists the catalog for the fleet collector.
func (s *Server) catalogModels() []metrics.CatalogModel {
	entries := s.Catalog.List()
	out := make([]metrics.CatalogModel, 0, len(entries))
	for _, e := range entries {
		out = append(out, metrics.CatalogModel{Name: e.Model.Name, MinReplicas: e.Model.Scaling.Min})
	}
	return out
}
