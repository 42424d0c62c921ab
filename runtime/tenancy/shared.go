package tenancy

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/store"
)

// Limits and budgets shared by control planes on one store.
//
// With Options.Shared set, every budget and every per-minute limit is
// counted in slices leased from the store (store.QuotaStore): a control
// plane admits from the slice it holds, in memory and under the same lock
// as before, and goes to the store only when the slice runs short (one
// round trip, which takes a slice's worth more than the request needs),
// to renew a slice before it expires, and to give back what it has not
// used once the subject is idle.
//
// Budgets. A slice is spend counted against the budget before it is
// spent: the store grants it only while recorded spend plus every live
// slice's unspent part stays within the amount, and usage rows written by
// this control plane move cost from its slice to the recorded spend in the
// same transaction. So recorded spend never passes the amount (plus the
// fallback allowance, for fallback requests), however many control planes
// admit. A slice not renewed for its TTL (a control plane that died)
// returns its unspent part; what it spent is already recorded.
//
// Rate limits. A control plane's window never holds more than its slice,
// and the live slices never add up to more than the limit: tokens and
// requests per minute over all control planes stay within the limit. A
// slice is shrunk only down to what its window still holds. A control
// plane that dies, or is cut off from the store and admits until its
// lease ends, leaves its slice counted until a minute (RateLinger) after
// the slice expires: what it admitted is never counted twice, whatever
// the TTL.
//
// A slice is used only until its lease runs out on this process's clock
// (the renewal's start plus the TTL), before the store lets anyone else
// have it.

// Shared configures shared counting.
type Shared struct {
	Store store.QuotaStore
	// Holder tells this control plane's slices apart; one per process.
	Holder string
	// BudgetSlice and RateSlice are the fractions of a budget's amount and
	// of a per-minute limit taken beyond what a request needs when a
	// slice runs short. Defaults 0.1.
	BudgetSlice, RateSlice float64
	// TTL is how long a slice lasts without renewal. Default one minute.
	TTL time.Duration
	// Idle is how long a subject goes without a request before its unused
	// slice is given back. Default 2s.
	Idle time.Duration
	// RateLinger is how long past its lease's end a rate slice still
	// counts in the store: what its holder admitted in its last minute is
	// in the window that long. Default a minute (tests shorten it).
	RateLinger time.Duration
}

// Default shared-counting settings.
const (
	DefaultSliceFraction = 0.1
	DefaultSliceTTL      = time.Minute
	DefaultSliceIdle     = 2 * time.Second
	DefaultRateLinger    = time.Minute
)

// slice is this control plane's slice of one subject.
type slice struct {
	subject string
	// project and since name a budget's recorded spend; "" for a rate.
	project string
	since   time.Time
	// granted is the slice's total over its life, as the store holds it;
	// main is the part requests for the model asked for may use (the rest
	// was granted against a fallback allowance). For a budget, consumed
	// is what settled requests spent from it (recorded or not) and
	// reserved what requests in flight hold; a rate slice bounds w.
	granted, main      float64
	consumed, reserved float64
	// limit is what the last lease was taken against.
	limit float64
	w     *window
	// deadline is when this process stops using the slice; used when a
	// request last used it.
	deadline, used time.Time
	// op makes store calls on the slice one at a time.
	op sync.Mutex
}

// base is what the slice must keep: a budget's spend and reservations, a
// rate's window. Called with the admission lock held.
func (s *slice) base(now time.Time) float64 {
	if s.w != nil {
		return float64(s.w.sum(now.Unix()))
	}
	return s.consumed + s.reserved
}

// room is what a request may still take from the slice now; fallback
// requests may use what was granted against the fallback allowance.
func (s *slice) room(now time.Time, fallback bool) float64 {
	if !now.Before(s.deadline) {
		return 0
	}
	g := s.main
	if fallback {
		g = s.granted
	}
	return g - s.base(now)
}

// sliceFor returns the slice of subject, made on first use. Called with
// the admission lock held.
func (a *Admission) sliceFor(subject string, w *window, project string, since time.Time) *slice {
	s := a.slices[subject]
	if s == nil {
		s = &slice{subject: subject, w: w, project: project, since: since}
		a.slices[subject] = s
	}
	if w != nil {
		s.w = w // a meter swept and made again
	}
	return s
}

// growth is one slice a request needs more of: extra beyond what the
// slice must keep, leased against limit.
type growth struct {
	s        *slice
	extra    float64
	limit    float64
	fallback bool
	// retake takes the slice again against limit, lower than the one it
	// was taken against: it keeps what the new limit leaves of it, and
	// grows by extra if that fits.
	retake bool
}

type growKey struct {
	s        *slice
	fallback bool
}

// grow leases more of each slice, one store call per slice.
func (a *Admission) grow(ctx context.Context, gs []growth) error {
	for _, g := range gs {
		if g.retake {
			if err := a.take(ctx, g.s, g.limit, false, func(base, _ float64) (float64, float64, bool) {
				return 0, max(g.s.granted, base+g.extra), false
			}); err != nil {
				return err
			}
			continue
		}
		if err := a.take(ctx, g.s, g.limit, g.fallback, func(base, room float64) (need, want float64, skip bool) {
			if room >= g.extra {
				return 0, 0, true // another request grew it meanwhile
			}
			frac := a.shared.RateSlice
			if g.s.w == nil {
				frac = a.shared.BudgetSlice
			}
			need = base + g.extra
			return need, min(need+frac*g.limit, max(g.limit, need)), false
		}); err != nil {
			return err
		}
	}
	return nil
}

// take makes one store call for s: size is told the slice's base and room
// (under the admission lock) and says what to ask for.
func (a *Admission) take(ctx context.Context, s *slice, limit float64, fallback bool,
	size func(base, room float64) (need, want float64, skip bool)) error {
	s.op.Lock()
	defer s.op.Unlock()
	now := a.now()
	a.mu.Lock()
	need, want, skip := size(s.base(now), s.room(now, fallback))
	consumed, rate := s.consumed, s.w != nil
	if !skip && want < s.granted {
		// Shrinking: stop admitting beyond the new size before the store
		// hears of it.
		s.granted, s.main = want, min(s.main, want)
	}
	a.mu.Unlock()
	if skip {
		return nil
	}
	started := time.Now()
	var linger time.Duration
	if rate {
		linger = a.shared.RateLinger
	}
	res, ok, err := a.shared.Store.TakeSlice(ctx, store.SliceRequest{Subject: s.subject, Holder: a.shared.Holder, Limit: limit,
		Project: s.project, Since: s.since, Need: need, Want: want, TTL: a.shared.TTL, Linger: linger, Fallback: fallback})
	// Need and Want count what this process knows it spent; the store's
	// row may know more (a slice forgotten while idle and made again
	// starts from nothing). Ask again with the store's figure, or the
	// grant would leave the request no room.
	if d := res.Spent - consumed; err == nil && ok && !rate && need > 0 && d > 1e-9 {
		need, want = need+d, want+d
		started = time.Now()
		res, ok, err = a.shared.Store.TakeSlice(ctx, store.SliceRequest{Subject: s.subject, Holder: a.shared.Holder, Limit: limit,
			Project: s.project, Since: s.since, Need: need, Want: want, TTL: a.shared.TTL, Linger: linger, Fallback: fallback})
	}
	if err != nil {
		a.log.Warn("leasing a slice of a shared limit", "subject", s.subject, "err", err)
		return &request.Rejection{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "limits_unavailable", Reason: "limit",
			RetryAfter: time.Second, Message: "limits and budgets are shared through the store, which cannot be reached now; retry shortly"}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	s.consumed = max(s.consumed, res.Spent)
	if !ok {
		return nil
	}
	s.granted = res.Granted
	if limit > s.limit || !fallback {
		s.limit = limit
	}
	if fallback {
		s.main = min(s.main, res.Granted)
	} else {
		s.main = res.Granted
	}
	// Used until the lease ends on this clock, which is never after the
	// store's: the lease started no earlier than the call.
	s.deadline = a.nowAfter(started).Add(a.shared.TTL)
	return nil
}

// nowAfter maps a wall-clock start onto the admission clock (tests move
// it).
func (a *Admission) nowAfter(started time.Time) time.Time {
	return a.now().Add(-time.Since(started))
}

// upkeep renews slices in use and gives back what idle ones hold, until
// ctx ends.
func (a *Admission) upkeep(ctx context.Context) {
	defer close(a.upkeepDone)
	tick := time.NewTicker(min(a.shared.Idle/2, a.shared.TTL/4))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		a.tend(ctx, false)
		if now := a.now(); now.Sub(a.refreshed) >= a.opts.CacheTTL {
			a.refreshed = now
			a.refreshSpend(ctx, now)
		}
	}
}

// refreshSpend reads again what every loaded budget's period has
// recorded, over all control planes, plus this one's unwritten rows: with
// shared limits the ledgers only show the budgets (metrics, messages);
// the slices decide.
func (a *Admission) refreshSpend(ctx context.Context, now time.Time) {
	a.mu.Lock()
	keys := make([]ledgerKey, 0, len(a.ledgers))
	for k := range a.ledgers {
		keys = append(keys, k)
	}
	a.mu.Unlock()
	for _, k := range keys {
		start := PeriodStart(k.period, now)
		spent, err := a.opts.Store.ProjectSpend(ctx, k.project, start)
		if err != nil {
			a.log.Warn("reading the spend of a budget", "project", k.project, "period", k.period, "err", err)
			continue
		}
		if a.opts.Pending != nil {
			spent += a.opts.Pending.PendingCost(k.project, start)
		}
		a.mu.Lock()
		if l := a.ledgers[k]; l != nil {
			l.roll(now)
			if l.start.Equal(start) {
				l.spent = spent
			}
		}
		a.mu.Unlock()
	}
}

// tend renews or shrinks every slice; all gives back everything not in
// use (at close).
func (a *Admission) tend(ctx context.Context, all bool) {
	now := a.now()
	a.mu.Lock()
	ss := make([]*slice, 0, len(a.slices))
	for _, s := range a.slices {
		ss = append(ss, s)
	}
	a.mu.Unlock()
	for _, s := range ss {
		a.mu.Lock()
		base := s.base(now)
		idle := all || (now.Sub(s.used) >= a.shared.Idle && s.reserved == 0)
		held := s.granted > base
		// A slice stays live while it holds anything, while requests it
		// reserved for run, while their usage rows may still be on their
		// way to the store, and while a rate window still counts what it
		// admitted: until then its expiry would let another control
		// plane take what this one used.
		keep := held || s.reserved > 0 || now.Sub(s.used) < a.shared.TTL || (s.w != nil && base > 0)
		expiring := s.deadline.Sub(now) < a.shared.TTL/2
		gone := !keep && now.Sub(s.used) > 2*a.shared.TTL
		if gone {
			delete(a.slices, s.subject)
		}
		limit := s.limit
		// A rate window drains second by second: give back when the part
		// unused is worth a store call (half a slice), or all is unused.
		worth := all || s.w == nil || base == 0 || s.granted-base >= a.shared.RateSlice*limit/2
		a.mu.Unlock()
		shrink := idle && held && worth
		renew := expiring && keep
		if gone || (!shrink && !renew) {
			continue
		}
		// A failure is logged by take; the next tick tries again.
		_ = a.take(ctx, s, limit, true, func(base, _ float64) (float64, float64, bool) {
			if shrink {
				return 0, base, false
			}
			return 0, s.granted, false
		})
	}
}

// Close gives back every slice not in use, and stops renewing them.
func (a *Admission) Close(ctx context.Context) {
	if a.shared == nil {
		return
	}
	a.stopUpkeep()
	<-a.upkeepDone
	a.tend(ctx, true)
}

// rateSubject names a rate limit's subject.
func rateSubject(c check) string {
	return fmt.Sprintf("rate/%s/%s/%s", c.subj, c.kind(), c.id)
}
