package server

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmgw/llmgw/runtime/fleet"
)

// fleetCollector exports the fleet as the control plane sees it, at scrape
// time. A reading a GPU does not report is absent, not zero.
type fleetCollector struct {
	f        *fleet.Fleet
	nodes    *prometheus.Desc
	replicas *prometheus.Desc
	gpuMem   *prometheus.Desc
	gpuTemp  *prometheus.Desc
	gpuUtil  *prometheus.Desc
	gpuECC   *prometheus.Desc
}

func newFleetCollector(f *fleet.Fleet) *fleetCollector {
	return &fleetCollector{
		f:        f,
		nodes:    prometheus.NewDesc("llmgw_nodes", "Nodes by state.", []string{"state"}, nil),
		replicas: prometheus.NewDesc("llmgw_replicas", "Replicas by model and state.", []string{"model", "state"}, nil),
		gpuMem:   prometheus.NewDesc("llmgw_gpu_memory_bytes", "GPU memory.", []string{"node", "gpu", "class"}, nil),
		gpuTemp:  prometheus.NewDesc("llmgw_gpu_temperature_celsius", "GPU temperature.", []string{"node", "gpu"}, nil),
		gpuUtil:  prometheus.NewDesc("llmgw_gpu_utilization_ratio", "GPU utilization, 0-1.", []string{"node", "gpu"}, nil),
		gpuECC:   prometheus.NewDesc("llmgw_gpu_ecc_errors", "Uncorrected volatile ECC errors.", []string{"node", "gpu"}, nil),
	}
}

func (c *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.nodes, c.replicas, c.gpuMem, c.gpuTemp, c.gpuUtil, c.gpuECC} {
		ch <- d
	}
}

func (c *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	states := map[string]float64{string(fleet.NodePending): 0, string(fleet.NodeReady): 0, string(fleet.NodeLost): 0}
	for _, n := range c.f.Nodes() {
		states[string(n.State)]++
		if n.Inventory == nil {
			continue
		}
		for _, g := range n.Inventory.GetGpus() {
			idx := strconv.Itoa(int(g.GetIndex()))
			ch <- prometheus.MustNewConstMetric(c.gpuMem, prometheus.GaugeValue, float64(g.GetMemoryMib())*1024*1024, n.ID, idx, g.GetClass())
			if g.TemperatureC != nil {
				ch <- prometheus.MustNewConstMetric(c.gpuTemp, prometheus.GaugeValue, g.GetTemperatureC(), n.ID, idx)
			}
			if g.UtilizationPct != nil {
				ch <- prometheus.MustNewConstMetric(c.gpuUtil, prometheus.GaugeValue, g.GetUtilizationPct()/100, n.ID, idx)
			}
			if g.EccErrors != nil {
				ch <- prometheus.MustNewConstMetric(c.gpuECC, prometheus.GaugeValue, float64(g.GetEccErrors()), n.ID, idx)
			}
		}
	}
	for s, v := range states {
		ch <- prometheus.MustNewConstMetric(c.nodes, prometheus.GaugeValue, v, s)
	}
	counts := map[[2]string]float64{}
	for _, r := range c.f.Replicas() {
		counts[[2]string{r.Model, string(r.State)}]++
	}
	for k, v := range counts {
		ch <- prometheus.MustNewConstMetric(c.replicas, prometheus.GaugeValue, v, k[0], k[1])
	}
}
