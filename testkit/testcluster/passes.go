package testcluster

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"
)

var passesLine = regexp.MustCompile(`(?m)^llmgw_reconcile_passes_total (\S+)$`)

// ReconcilePasses reads llmgw_reconcile_passes_total, the reconcile passes
// the control plane has completed, from its metrics.
func (c *Cluster) ReconcilePasses() (uint64, error) {
	if err := c.readMetrics(); err != nil {
		return 0, err
	}
	c.metricsMu.Lock()
	text := c.metricsText
	c.metricsMu.Unlock()
	m := passesLine.FindStringSubmatch(text)
	if m == nil {
		return 0, fmt.Errorf("%s has no llmgw_reconcile_passes_total", c.metricsURL)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("llmgw_reconcile_passes_total %q: %w", m[1], err)
	}
	return uint64(v), nil
}

// AwaitPasses returns once the control plane has completed n reconcile
// passes more than when it was called. Call it after a change was stored
// (an apply returned): with n at least 2, a pass that began after the
// change has run to its end, so what the reconciler does about it has been
// done. A negative check ("nothing restarted") awaits this, not a sleep.
func (c *Cluster) AwaitPasses(t testing.TB, n uint64, timeout time.Duration) {
	t.Helper()
	from, err := c.ReconcilePasses()
	if err != nil {
		t.Fatal(err)
	}
	WaitFor(t, fmt.Sprintf("%d reconcile passes after pass %d", n, from), timeout, func() (bool, string) {
		now, err := c.ReconcilePasses()
		if err != nil {
			return false, err.Error()
		}
		return now >= from+n, fmt.Sprintf("%d passes completed", now)
	})
}
