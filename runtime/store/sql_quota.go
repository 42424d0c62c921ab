package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// staleSlice is how long an expired slice row is kept: usage rows written
// late by its holder may still charge it.
const staleSlice = time.Hour

// TakeSlice implements QuotaStore in one transaction that holds the
// subject's lock (an advisory lock on PostgreSQL; SQLite has one writer),
// so two holders growing at once cannot both take the same room.
func (s *sqlStore) TakeSlice(ctx context.Context, r SliceRequest) (sl Slice, ok bool, err error) {
	if r.Subject == "" || r.Holder == "" {
		return Slice{}, false, errors.New("taking a slice: subject and holder are required")
	}
	if r.TTL <= 0 {
		return Slice{}, false, fmt.Errorf("taking a slice of %q: the TTL must be positive", r.Subject)
	}
	what := fmt.Sprintf("taking a slice of %q", r.Subject)
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return Slice{}, false, fmt.Errorf("%s: %w", what, err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, rollback(tx))
		}
	}()
	if s.d.lockName != "" {
		if _, err := tx.ExecContext(ctx, s.d.rebind(s.d.lockName), "quota:"+r.Subject); err != nil {
			return Slice{}, false, fmt.Errorf("%s: locking: %w", what, err)
		}
	}
	q := func(query string) string { return s.d.rebind(s.nowSQL(query)) }
	if period, ok := budgetPeriod(r.Subject); ok && r.Project != "" {
		// The budget as stored now, not as the holder last read it.
		var amount, allowance float64
		var onExhausted string
		err := tx.QueryRowContext(ctx, s.d.rebind(`SELECT amount, fallback_allowance, on_exhausted FROM budgets WHERE project = ? AND period = ?`),
			r.Project, period).Scan(&amount, &allowance, &onExhausted)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			// No such budget (deleted meanwhile): nothing to cap against.
		case err != nil:
			return Slice{}, false, fmt.Errorf("%s: reading the budget: %w", what, err)
		default:
			if r.Fallback && onExhausted == OnExhaustedFallback {
				amount += allowance
			}
			r.Limit = min(r.Limit, amount)
		}
	}
	var now, expires int64
	var recorded, others, granted, spent float64
	var found int64
	// One statement, so the sums and the holder's own row come from one
	// snapshot: on PostgreSQL's READ COMMITTED a usage row of this holder
	// committed between two statements would be in its slice's spent but
	// not in the recorded spend, and the grant would pass the limit.
	err = tx.QueryRowContext(ctx, q(`SELECT NOW,
		(SELECT COALESCE(SUM(cost), 0) FROM usage_records WHERE ? <> '' AND project = ? AND at >= ?),
		(SELECT COALESCE(SUM(CASE WHEN granted > spent THEN granted - spent ELSE 0 END), 0)
			FROM quota_slices WHERE subject = ? AND holder <> ? AND expires_at + ? > NOW),
		(SELECT COUNT(*) FROM quota_slices WHERE subject = ? AND holder = ?),
		COALESCE((SELECT granted FROM quota_slices WHERE subject = ? AND holder = ?), 0),
		COALESCE((SELECT spent FROM quota_slices WHERE subject = ? AND holder = ?), 0),
		COALESCE((SELECT expires_at FROM quota_slices WHERE subject = ? AND holder = ?), 0)`),
		r.Project, r.Project, toDB(r.Since), r.Subject, r.Holder, r.Linger.Microseconds(),
		r.Subject, r.Holder, r.Subject, r.Holder, r.Subject, r.Holder, r.Subject, r.Holder).
		Scan(&now, &recorded, &others, &found, &granted, &spent, &expires)
	if err != nil {
		return Slice{}, false, fmt.Errorf("%s: reading the limit's use: %w", what, err)
	}
	if found == 0 {
		expires = now
	}
	// The holder's unspent part may take what the others and the recorded
	// spend leave of the limit.
	most := r.Limit - recorded - others + spent
	g := min(r.Want, most)
	if g < r.Need {
		live := granted
		if expires <= now {
			live = spent
		}
		sl = Slice{Granted: granted, Spent: spent, Committed: recorded + others + max(live-spent, 0), ExpiresAt: fromDB(expires), Now: fromDB(now)}
		return sl, false, tx.Commit()
	}
	g = max(g, spent)
	expires = now + r.TTL.Microseconds()
	if _, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO quota_slices (subject, holder, granted, spent, expires_at) VALUES (?, ?, ?, 0, ?)
		ON CONFLICT (subject, holder) DO UPDATE SET granted = excluded.granted, expires_at = excluded.expires_at`),
		r.Subject, r.Holder, g, expires); err != nil {
		return Slice{}, false, fmt.Errorf("%s: writing the slice: %w", what, err)
	}
	if _, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM quota_slices WHERE subject = ? AND expires_at < ?`),
		r.Subject, now-staleSlice.Microseconds()); err != nil {
		return Slice{}, false, fmt.Errorf("%s: dropping stale slices: %w", what, err)
	}
	if err := tx.Commit(); err != nil {
		return Slice{}, false, fmt.Errorf("%s: committing: %w", what, err)
	}
	return Slice{Granted: g, Spent: spent, Committed: recorded + others + max(g-spent, 0), ExpiresAt: fromDB(expires), Now: fromDB(now)}, true, nil
}

// chargeSlices adds the cost of rows written for a holder to its budget
// slices: the day, month and total budgets of each row's project.
func (s *sqlStore) chargeSlices(ctx context.Context, tx *sql.Tx, rows []UsageRow) error {
	type key struct{ subject, holder string }
	sums := map[key]float64{}
	var order []key
	for _, r := range rows {
		if r.Holder == "" || r.Cost <= 0 {
			continue
		}
		for _, period := range []string{PeriodDay, PeriodMonth, PeriodTotal} {
			k := key{BudgetSubject(r.Project, period, PeriodStart(period, r.At)), r.Holder}
			if _, ok := sums[k]; !ok {
				order = append(order, k)
			}
			sums[k] += r.Cost
		}
	}
	for _, k := range order {
		if _, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE quota_slices SET spent = spent + ? WHERE subject = ? AND holder = ?`),
			sums[k], k.subject, k.holder); err != nil {
			return fmt.Errorf("charging the slice of %q: %w", k.subject, err)
		}
	}
	return nil
}

// budgetPeriod returns the period of a budget's subject (BudgetSubject).
func budgetPeriod(subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, "budget/")
	if !ok {
		return "", false
	}
	period, _, ok := strings.Cut(rest, "/")
	return period, ok
}
