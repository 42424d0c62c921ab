package tenancy

import (
	"fmt"
	"time"

	"github.com/llmgw/llmgw/runtime/store"
)

// How budgets decide, apart from how they are counted: decideBudgets takes
// each budget with its account (spent and reserved) and a request's worst
// case, and says which model may serve it, or which budget refuses it. The
// accounts are this process's ledgers today; shared counters (a slice of
// a budget leased from PostgreSQL) plug in behind the same budgetLine.
//
// The rule, per budget and period:
//
//   - a request for the model asked for fits when spent + reserved + its
//     worst-case cost <= amount, in every budget of the project;
//   - otherwise, when a budget it does not fit has on_exhausted = fallback
//     and the project may use the fallback model, the request is served by
//     the fallback if the fallback's worst-case cost fits every budget:
//     within amount + fallback_allowance in each budget that falls back to
//     that model, within amount in the others;
//   - otherwise it is refused (402), naming the budget.
//
// So a project's spend in a period never passes amount + fallback_allowance
// of its budget for that period, and only fallback requests pass amount.

// budgetLine is one budget of the project and its account now.
type budgetLine struct {
	budget store.Budget
	ledger *ledger
	// fallback is the budget's fallback model by its canonical name; ""
	// when the budget refuses.
	fallback string
	// sl, when limits are shared (shared.go), is this control plane's
	// slice of the budget, which is what a request must fit in; now is
	// the admission's time.
	sl  *slice
	now time.Time
}

// fits reports whether a request costing cost, served by model, fits the
// budget: within limitFor locally, within the slice when shared.
func (bl budgetLine) fits(cost float64, model string, fallback bool) bool {
	if bl.sl != nil {
		fb := fallback && bl.budget.OnExhausted == store.OnExhaustedFallback && model == bl.fallback
		return cost <= bl.sl.room(bl.now, fb)
	}
	return bl.used()+cost <= bl.limitFor(model, fallback)
}

// used is what the budget's period has spent and has reserved for
// requests in flight.
func (bl budgetLine) used() float64 { return bl.ledger.spent + bl.ledger.reserved }

// limitFor is what the budget lets a request served by model reach:
// amount, plus fallback_allowance when model is the budget's fallback.
func (bl budgetLine) limitFor(model string, fallback bool) float64 {
	if fallback && bl.budget.OnExhausted == store.OnExhaustedFallback && model == bl.fallback {
		return bl.budget.Amount + bl.budget.FallbackAllowance
	}
	return bl.budget.Amount
}

// budgetDecision is what decideBudgets found.
type budgetDecision struct {
	// served is the fallback model serving the request; "" when the model
	// asked for serves it (or it is refused).
	served string
	// cost is the fallback's worst-case cost, when served is set.
	cost float64
	// refused is the budget that refuses the request, nil when admitted;
	// exhausted is the first budget the model asked for did not fit.
	refused, exhausted *budgetLine
	// fallbackTried is set when refused refused the fallback model too.
	fallbackTried string
}

// allFit reports whether a request whose worst case costs cost on the
// model asked for fits every budget, so no fallback need be considered.
func allFit(lines []budgetLine, cost float64) bool {
	for i := range lines {
		if !lines[i].fits(cost, "", false) {
			return false
		}
	}
	return true
}

// decideBudgets decides a request whose worst case costs cost on the model
// asked for. fallbackCost returns the worst-case cost of serving it on a
// fallback model (it is called at most once); allowed says whether the
// project may use a model.
func decideBudgets(lines []budgetLine, cost float64, fallbackCost func(model string) float64, allowed func(string) bool) budgetDecision {
	var d budgetDecision
	var via *budgetLine
	for i := range lines {
		bl := &lines[i]
		if bl.fits(cost, "", false) {
			continue
		}
		if d.exhausted == nil {
			d.exhausted = bl
		}
		if via == nil && bl.budget.OnExhausted == store.OnExhaustedFallback && bl.fallback != "" && allowed(bl.fallback) {
			via = bl
		}
	}
	if d.exhausted == nil {
		return d
	}
	if via == nil {
		d.refused = d.exhausted
		return d
	}
	fb := via.fallback
	fbCost := fallbackCost(fb)
	for i := range lines {
		bl := &lines[i]
		if !bl.fits(fbCost, fb, true) {
			d.refused, d.fallbackTried = bl, fb
			return d
		}
	}
	d.served, d.cost = fb, fbCost
	return d
}

// budgetMessage tells a client why a budget refused its request.
func budgetMessage(project string, d budgetDecision) string {
	bl := d.refused
	b, l := bl.budget, bl.ledger
	reset := "it does not reset; raise the budget to continue"
	if next, ok := PeriodEnd(b.Period, l.start); ok {
		reset = "it resets at " + next.Format(time.RFC3339)
	}
	if d.fallbackTried != "" && d.fallbackTried == bl.fallback {
		return fmt.Sprintf("the %s budget of project %q (%s) is spent and so is its fallback allowance for %q (%s): %s spent, %s reserved by requests in flight; %s",
			b.Period, project, money(b.Amount), d.fallbackTried, money(b.FallbackAllowance), money(l.spent), money(l.reserved), reset)
	}
	return fmt.Sprintf("the %s budget of project %q (%s) is spent: %s spent, %s reserved by requests in flight; %s",
		b.Period, project, money(b.Amount), money(l.spent), money(l.reserved), reset)
}

// reserve holds a request's worst-case cost.
func (l *ledger) reserve(cost float64) { l.reserved += cost }

// release gives back a reservation once its request has ended.
func (l *ledger) release(cost float64) {
	// Costs are never negative (token counts and prices are bounded and
	// checked), so only float rounding is cleared.
	if l.reserved -= cost; l.reserved < 1e-9 {
		l.reserved = 0
	}
}

// charge adds what a request cost to the period's spend.
func (l *ledger) charge(cost float64) { l.spent += cost }

// overshootKey names a count of usage reported beyond a reservation.
type overshootKey struct {
	model, kind string // kind: "prompt" or "completion"
}

// overshot counts and logs usage reported beyond a request's reservation,
// which is not charged.
func (a *Admission) overshot(model string, prompt, completion int64, reported bool) {
	a.mu.Lock()
	if prompt > 0 {
		a.overshoot[overshootKey{model, "prompt"}] += prompt
	}
	if completion > 0 {
		a.overshoot[overshootKey{model, "completion"}] += completion
	}
	a.mu.Unlock()
	a.log.Warn("usage above the reservation not charged", "model", model,
		"prompt_tokens_over", prompt, "completion_tokens_over", completion, "reported_by_engine", reported)
}
