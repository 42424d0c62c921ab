package tenancy

import "github.com/prometheus/client_golang/prometheus"

// budgetCollector exports the budgets admission holds, at scrape time.
type budgetCollector struct {
	a                          *Admission
	remaining, spent, reserved *prometheus.Desc
	overshoot                  *prometheus.Desc
}

// Collector returns a Prometheus collector of the budgets admission has
// loaded (those of projects that made a request since the start):
// llmgw_budget_remaining_ratio (1 untouched, 0 spent), and the spent and
// reserved amounts; and llmgw_usage_overshoot_tokens_total, the tokens
// engines reported beyond what admission reserved (never charged).
func (a *Admission) Collector() prometheus.Collector {
	labels := []string{"project", "period"}
	return &budgetCollector{
		a: a,
		remaining: prometheus.NewDesc("llmgw_budget_remaining_ratio",
			"Share of the budget neither spent nor reserved, 1 untouched to 0 spent.", labels, nil),
		spent: prometheus.NewDesc("llmgw_budget_spent",
			"Amount spent in the budget's current period, in the operator's price unit.", labels, nil),
		reserved: prometheus.NewDesc("llmgw_budget_reserved",
			"Amount reserved by requests in flight.", labels, nil),
		overshoot: prometheus.NewDesc("llmgw_usage_overshoot_tokens_total",
			"Tokens engines reported beyond what admission reserved for the request; never charged.", []string{"model", "kind"}, nil),
	}
}

func (c *budgetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.remaining
	ch <- c.spent
	ch <- c.reserved
	ch <- c.overshoot
}

func (c *budgetCollector) Collect(ch chan<- prometheus.Metric) {
	for _, b := range c.a.Budgets() {
		ratio := 0.0
		if b.Budget.Amount > 0 {
			ratio = max(0, 1-(b.Spent+b.Reserved)/b.Budget.Amount)
		}
		ch <- prometheus.MustNewConstMetric(c.remaining, prometheus.GaugeValue, ratio, b.Budget.Project, b.Budget.Period)
		ch <- prometheus.MustNewConstMetric(c.spent, prometheus.GaugeValue, b.Spent, b.Budget.Project, b.Budget.Period)
		ch <- prometheus.MustNewConstMetric(c.reserved, prometheus.GaugeValue, b.Reserved, b.Budget.Project, b.Budget.Period)
	}
	c.a.mu.Lock()
	over := make(map[overshootKey]int64, len(c.a.overshoot))
	for k, v := range c.a.overshoot {
		over[k] = v
	}
	c.a.mu.Unlock()
	for k, v := range over {
		ch <- prometheus.MustNewConstMetric(c.overshoot, prometheus.CounterValue, float64(v), k.model, k.kind)
	}
}
