package metrics

import (
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmgw/llmgw/runtime/fleet"
)

// CatalogModel is what the fleet collector needs of a catalog model.
type CatalogModel struct {
	// Name is the canonical model name.
	Name string
	// MinReplicas is the replica count the operator asked to keep running;
	// 0 for a model loaded on demand.
	MinReplicas int
}

// FleetOptions configures a FleetCollector.
type FleetOptions struct {
	// Fleet is the live fleet; required.
	Fleet *fleet.Fleet
	// Models returns the catalog, so that a model with no replica at all
	// still reports zero ready replicas. Nil means only models with
	// replicas are reported.
	Models func() []CatalogModel
	// Now is the clock for heartbeat ages; nil means time.Now.
	Now func() time.Time
	// Draining, when set, returns the replicas being drained before they
	// stop (reconcile.Reconciler.Draining): ready but serving nothing,
	// they are counted as draining, not ready.
	Draining func() map[string]bool
}

// FleetCollector exports the fleet as the control plane sees it, read at
// scrape time: nodes, GPUs and replicas, one scrape target for the whole
// fleet. A GPU reading the driver does not report (temperature,
// utilization, ECC, memory used) is absent, never zero.
type FleetCollector struct {
	opts FleetOptions

	nodes, nodeState, nodeConnected, nodeDraining, nodeHeartbeatAge, nodeReplicas, nodeGPUs *prometheus.Desc

	gpuInfo, gpuMem, gpuMemUsed, gpuTemp, gpuUtil, gpuECC, gpuNVLink, gpuAllocated *prometheus.Desc

	replicas, modelReady, modelMin, replicaFailures *prometheus.Desc

	// failures counts, per model, the failed replicas seen at scrapes; seen
	// holds the ids of the failed replicas the fleet still remembers, so
	// that each is counted once.
	mu       sync.Mutex
	failures map[string]float64
	seen     map[string]bool
}

var _ prometheus.Collector = (*FleetCollector)(nil)

// NewFleetCollector returns a collector over opts.Fleet; register it with
// Registry.Register.
func NewFleetCollector(opts FleetOptions) *FleetCollector {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	node := []string{"node"}
	gpu := []string{"node", "gpu"}
	d := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc(Namespace+"_"+name, help, labels, nil)
	}
	return &FleetCollector{
		opts:             opts,
		nodes:            d("nodes", "Nodes by state (pending, ready, lost).", []string{"state"}),
		nodeState:        d("node_state", "1 for the node's current state (pending, ready, lost), 0 for the others.", []string{"node", "state"}),
		nodeConnected:    d("node_connected", "1 while the node's agent has a session with this control plane.", node),
		nodeDraining:     d("node_draining", "1 while the node is drained: it takes no new work.", node),
		nodeHeartbeatAge: d("node_heartbeat_age_seconds", "Seconds since the node's agent was last heard from.", node),
		nodeReplicas:     d("node_replicas", "Live replicas with a shard on the node.", node),
		nodeGPUs:         d("node_gpus", "GPUs the node's agent discovered; absent before its inventory arrives.", node),
		gpuInfo:          d("gpu_info", "One per GPU, carrying its class and product name.", []string{"node", "gpu", "class", "name"}),
		gpuMem:           d("gpu_memory_total_bytes", "GPU memory; absent when not reported.", gpu),
		gpuMemUsed:       d("gpu_memory_used_bytes", "GPU memory in use; absent when the driver does not report it.", gpu),
		gpuTemp:          d("gpu_temperature_celsius", "GPU temperature; absent when the driver does not report it.", gpu),
		gpuUtil:          d("gpu_utilization_ratio", "GPU utilization, 0 to 1; absent when the driver does not report it.", gpu),
		gpuECC:           d("gpu_ecc_uncorrected_errors", "Uncorrected ECC errors since the driver loaded (volatile); absent when not reported.", gpu),
		gpuNVLink:        d("gpu_nvlink_peers", "NVLink peers of the GPU; 0 everywhere means the topology is unknown (no nvml build).", gpu),
		gpuAllocated:     d("gpu_allocated", "1 while a shard holds the GPU.", gpu),
		replicas:         d("replicas", "Replicas by model and state; failed counts the recent failures the control plane keeps.", []string{"model", "state"}),
		modelReady:       d("model_ready_replicas", "Ready replicas of each catalog model.", []string{"model"}),
		modelMin:         d("model_min_replicas", "Replicas the catalog asks to keep running (scaling.min).", []string{"model"}),
		replicaFailures:  d("replica_failures_total", "Replicas that failed, by model, since this control plane started.", []string{"model"}),
		failures:         map[string]float64{},
		seen:             map[string]bool{},
	}
}

// Describe implements prometheus.Collector.
func (c *FleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.nodes, c.nodeState, c.nodeConnected, c.nodeDraining, c.nodeHeartbeatAge, c.nodeReplicas, c.nodeGPUs,
		c.gpuInfo, c.gpuMem, c.gpuMemUsed, c.gpuTemp, c.gpuUtil, c.gpuECC, c.gpuNVLink, c.gpuAllocated,
		c.replicas, c.modelReady, c.modelMin, c.replicaFailures,
	} {
		ch <- d
	}
}

var nodeStates = []fleet.NodeState{fleet.NodePending, fleet.NodeReady, fleet.NodeLost}

func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Collect implements prometheus.Collector.
func (c *FleetCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.opts.Now()
	replicas := c.opts.Fleet.Replicas()
	used := c.opts.Fleet.UsedGPUs()

	perNode := map[string]int{}
	type modelState struct{ model, state string }
	byState := map[modelState]int{}
	ready := map[string]int{}
	var draining map[string]bool
	if c.opts.Draining != nil {
		draining = c.opts.Draining()
	}
	for _, r := range replicas {
		state := string(r.State)
		if r.State == fleet.ReplicaReady && draining[r.ID] {
			state = "draining"
		}
		byState[modelState{r.Model, state}]++
		if state == string(fleet.ReplicaReady) {
			ready[r.Model]++
		}
		if !r.Live() {
			continue
		}
		on := map[string]bool{}
		for _, s := range r.Shards {
			if !on[s.Node] {
				on[s.Node] = true
				perNode[s.Node]++
			}
		}
	}

	states := map[fleet.NodeState]int{}
	for _, n := range c.opts.Fleet.Nodes() {
		states[n.State]++
		for _, st := range nodeStates {
			ch <- gauge(c.nodeState, boolValue(n.State == st), n.ID, string(st))
		}
		ch <- gauge(c.nodeConnected, boolValue(n.Connected), n.ID)
		ch <- gauge(c.nodeDraining, boolValue(n.Draining), n.ID)
		if !n.LastSeen.IsZero() {
			ch <- gauge(c.nodeHeartbeatAge, max(0, now.Sub(n.LastSeen).Seconds()), n.ID)
		}
		ch <- gauge(c.nodeReplicas, float64(perNode[n.ID]), n.ID)
		if n.Inventory == nil {
			continue
		}
		gpus := n.Inventory.GetGpus()
		ch <- gauge(c.nodeGPUs, float64(len(gpus)), n.ID)
		for _, g := range gpus {
			idx := strconv.Itoa(int(g.GetIndex()))
			ch <- gauge(c.gpuInfo, 1, n.ID, idx, g.GetClass(), g.GetName())
			if g.GetMemoryMib() > 0 {
				ch <- gauge(c.gpuMem, float64(g.GetMemoryMib())*1024*1024, n.ID, idx)
			}
			if g.MemoryUsedMib != nil {
				ch <- gauge(c.gpuMemUsed, float64(g.GetMemoryUsedMib())*1024*1024, n.ID, idx)
			}
			if g.TemperatureC != nil {
				ch <- gauge(c.gpuTemp, g.GetTemperatureC(), n.ID, idx)
			}
			if g.UtilizationPct != nil {
				ch <- gauge(c.gpuUtil, g.GetUtilizationPct()/100, n.ID, idx)
			}
			if g.EccErrors != nil {
				ch <- gauge(c.gpuECC, float64(g.GetEccErrors()), n.ID, idx)
			}
			ch <- gauge(c.gpuNVLink, float64(len(g.GetNvlinkPeers())), n.ID, idx)
			_, held := used[n.ID][int(g.GetIndex())]
			ch <- gauge(c.gpuAllocated, boolValue(held), n.ID, idx)
		}
	}
	for _, st := range nodeStates {
		ch <- gauge(c.nodes, float64(states[st]), string(st))
	}

	for k, v := range byState {
		ch <- gauge(c.replicas, float64(v), k.model, k.state)
	}
	models := map[string]bool{}
	if c.opts.Models != nil {
		for _, m := range c.opts.Models() {
			models[m.Name] = true
			ch <- gauge(c.modelMin, float64(m.MinReplicas), m.Name)
		}
	}
	for _, r := range replicas {
		models[r.Model] = true
	}
	for m := range models {
		ch <- gauge(c.modelReady, float64(ready[m]), m)
	}
	for m, v := range c.countFailures(replicas, models) {
		ch <- prometheus.MustNewConstMetric(c.replicaFailures, prometheus.CounterValue, v, m)
	}
}

// countFailures adds the newly failed replicas to the per-model failure
// counters and returns them, with a zero for every model known so far.
func (c *FleetCollector) countFailures(replicas []fleet.Replica, models map[string]bool) map[string]float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[string]bool{}
	for _, r := range replicas {
		if r.State != fleet.ReplicaFailed && !r.Failed {
			continue
		}
		seen[r.ID] = true
		if !c.seen[r.ID] {
			c.failures[r.Model]++
		}
	}
	c.seen = seen
	for m := range models {
		if _, ok := c.failures[m]; !ok {
			c.failures[m] = 0
		}
	}
	return maps.Clone(c.failures)
}
