package store

import (
	"context"
	"time"
)

// Slices of limits and budgets, shared by control planes on one store.
//
// A control plane (the holder) leases a slice of a subject, a budget's
// period or one per-minute limit, and admits requests from it in memory;
// it asks the store again only when the slice runs short, to renew it, or
// to give back what it does not use. A slice row keeps what the holder was
// granted over the slice's life and what the usage rows written for it
// spent (InsertUsage adds a row's cost in the same transaction as the row),
// so at every commit
//
//	recorded spend of the period + Σ over live slices (granted - spent) <= limit
//
// holds for a budget, and Σ live granted <= limit for a rate limit. A budget
// slice the holder stops renewing stops counting at its expiry: its unspent
// part returns, and what it spent is already in the recorded spend. A rate
// slice counts for its Linger (a minute) past its expiry.

// SliceRequest asks for a holder's slice of a subject to be set to between
// Need and Want (totals over the slice's life, spent included).
type SliceRequest struct {
	Subject, Holder string
	// Limit is what the recorded spend (budgets) and every live slice of
	// the subject may reach together.
	Limit float64
	// Project and Since, for a budget, name the recorded spend that counts
	// against Limit: the project's usage rows at or after Since.
	Project string
	Since   time.Time
	// Need is the least the holder accepts; Want what it asks for. A
	// request with Need 0 always succeeds: it renews or shrinks the slice.
	Need, Want float64
	// TTL is how long the slice lasts from the database's now.
	TTL time.Duration
	// Fallback, for a budget, says the slice may take the budget's
	// fallback_allowance beyond its amount. The store caps Limit at what
	// the budget it holds allows (amount, plus the allowance for a
	// fallback), so a holder whose copy of the budget is stale (lowered
	// since it read it) cannot lease against the old amount.
	Fallback bool
	// Linger is how long past its expiry another holder's slice of the
	// subject still counts against Limit: for a per-minute limit, a
	// minute, since what that holder admitted in its last minute is still
	// in the window (it may have died, or been cut off from the store
	// while it admitted up to its lease's end). 0 for a budget, whose
	// spend is in the recorded rows.
	Linger time.Duration
}

// Slice is a holder's slice as the store left it.
type Slice struct {
	// Granted is the slice's total over its life; Spent what recorded
	// usage rows charged to it. Granted - Spent is the holder's to spend.
	Granted, Spent float64
	// Committed is what counts against the limit now, this slice included:
	// the recorded spend and every live slice's unspent part.
	Committed float64
	ExpiresAt time.Time
	// Now is the database's clock when the slice was taken.
	Now time.Time
}

// QuotaStore leases slices of limits and budgets.
type QuotaStore interface {
	// TakeSlice sets the holder's slice of r.Subject to the most between
	// r.Need and r.Want the limit leaves, and renews it for r.TTL. When
	// not even r.Need fits it changes nothing and returns the slice as it
	// stands with false.
	TakeSlice(ctx context.Context, r SliceRequest) (Slice, bool, error)
}

// BudgetSubject names a budget's period as a subject of slices: the
// project, the period and the period's start (the UTC day or month; a
// total budget's start is the epoch).
func BudgetSubject(project, period string, start time.Time) string {
	return "budget/" + period + "/" + start.UTC().Format("2006-01-02") + "/" + project
}

// PeriodStart returns the start of the budget period that holds t: UTC
// midnight, the first of the UTC month, or the epoch for a total budget.
func PeriodStart(period string, t time.Time) time.Time {
	t = t.UTC()
	switch period {
	case PeriodDay:
		return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	case PeriodMonth:
		return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	default:
		return time.Unix(0, 0).UTC()
	}
}

// SharesLimits reports whether st is a store several control planes can
// share (PostgreSQL), on which limits and budgets must be counted in
// slices; a SQLite store serves one control plane, which counts them in
// memory.
func SharesLimits(st Store) bool {
	s, ok := st.(*sqlStore)
	return ok && s.d.name == postgresDialect.name
}
