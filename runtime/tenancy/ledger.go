package tenancy

import (
	"context"
	"fmt"
	"time"

	"github.com/llmgw/llmgw/runtime/store"
)

// ledgerKey names one budget: a project's budget for a period.
type ledgerKey struct {
	project, period string
}

// ledger is a budget's running account for its current period: what was
// spent (settled) and what requests in flight have reserved.
type ledger struct {
	period   string
	start    time.Time
	spent    float64
	reserved float64
}

// PeriodStart returns the start of the period that holds t: UTC midnight,
// the first of the UTC month, or the zero time for a total budget.
func PeriodStart(period string, t time.Time) time.Time { return store.PeriodStart(period, t) }

// PeriodEnd returns when the period starting at start ends; false for a
// total budget, which never resets.
func PeriodEnd(period string, start time.Time) (time.Time, bool) {
	switch period {
	case store.PeriodDay:
		return start.AddDate(0, 0, 1), true
	case store.PeriodMonth:
		return start.AddDate(0, 1, 0), true
	default:
		return time.Time{}, false
	}
}

// roll starts a new period when now has left the ledger's: nothing spent.
// Reservations of requests still running carry over: they settle, and are
// recorded, in the new period.
func (l *ledger) roll(now time.Time) {
	if s := PeriodStart(l.period, now); !s.Equal(l.start) {
		l.start, l.spent = s, 0
	}
}

// loadLedgers makes sure every budget of the project has a ledger, reading
// what was already spent in its period from the store (plus what the
// recorder holds but has not written) the first time.
func (a *Admission) loadLedgers(ctx context.Context, project string, budgets []store.Budget, now time.Time) error {
	for _, b := range budgets {
		k := ledgerKey{project, b.Period}
		a.mu.Lock()
		_, ok := a.ledgers[k]
		a.mu.Unlock()
		if ok {
			continue
		}
		start := PeriodStart(b.Period, now)
		spent, err := a.opts.Store.ProjectSpend(ctx, project, start)
		if err != nil {
			return fmt.Errorf("reading the spend of project %q: %w", project, err)
		}
		if a.opts.Pending != nil {
			spent += a.opts.Pending.PendingCost(project, start)
		}
		a.mu.Lock()
		if _, ok := a.ledgers[k]; !ok {
			a.ledgers[k] = &ledger{period: b.Period, start: start, spent: spent}
		}
		a.mu.Unlock()
	}
	return nil
}

// BudgetState is a budget's account as admission holds it now.
type BudgetState struct {
	Budget   store.Budget
	Start    time.Time
	Spent    float64
	Reserved float64
}

// Budgets returns the accounts of every budget admission has loaded, for
// metrics and the management API.
func (a *Admission) Budgets() []BudgetState {
	now := a.now()
	var out []BudgetState
	for _, p := range a.dir.cached() {
		for _, b := range p.budgets {
			a.mu.Lock()
			l := a.ledgers[ledgerKey{p.project.Name, b.Period}]
			var st BudgetState
			if l != nil {
				l.roll(now)
				st = BudgetState{Budget: b, Start: l.start, Spent: l.spent, Reserved: l.reserved}
			}
			a.mu.Unlock()
			if l != nil {
				out = append(out, st)
			}
		}
	}
	return out
}
