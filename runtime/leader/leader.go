// Package leader elects the one control plane that owns the fleet among
// several sharing a store. It holds a lease in the store (see
// store.LeaseStore): the holder renews it every Renew; a standby tries to
// take it every Retry and gets it once it has expired, with a fencing token
// one higher than the last holder's.
//
// A holder counts itself leader only until Renew's start time plus TTL on
// its own monotonic clock: that ends no later than the database's expiry,
// so a holder cut off from the store stops acting before anyone else may
// start. Leadership lost is final for the process: OnLost runs and the
// server exits, to come back (under its supervisor) as a standby with a
// fresh fleet.
package leader

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/llmgw/llmgw/runtime/store"
)

// Defaults: a dead leader's lease runs out within TTL, a standby notices
// within Retry, so a new leader is elected within TTL + Retry (7 s).
const (
	DefaultTTL   = 6 * time.Second
	DefaultRenew = 2 * time.Second
	DefaultRetry = time.Second
)

// Options configure an Elector.
type Options struct {
	Store store.LeaseStore
	// Name is the control plane's name (ha.name), unique among those
	// sharing the store.
	Name string
	// Version is recorded in the control plane registry.
	Version string
	// The addresses other parts of the cluster reach this control plane at.
	AgentAddr, ClientAddr, ManageAddr string
	TTL, Renew, Retry                 time.Duration
	// OnElected runs (on its own goroutine) when this control plane becomes
	// leader, with the fencing token.
	OnElected func(token int64)
	// OnLost runs once when leadership is lost (not renewed in time, or
	// taken); the control plane must stop acting for the fleet at once.
	OnLost func(reason string)
	Logger *slog.Logger
	// Now is the monotonic clock (tests).
	Now func() time.Time
}

// Status is what an Elector knows.
type Status struct {
	// Leading is true while this control plane holds a lease it may act
	// on; Token is then its fencing token.
	Leading bool
	Token   int64
	// Lease is the last lease read from the store (this control plane's
	// or another's); zero before the first read. LeaseRead is when, on
	// this process's clock (the claim's start).
	Lease     store.Lease
	LeaseRead time.Time
	// ValidUntil is, while leading, when this control plane stops counting
	// itself leader unless it renews.
	ValidUntil time.Time
	// Instance is this process's instance id.
	Instance string
}

// LeaseValid reports whether the last lease read may still be valid at
// now on this process's clock: what was left of it when read, less the
// time since. A standby cut off from the store stops trusting the leader
// it last saw once that lease would have run out.
func (s Status) LeaseValid(now time.Time) bool {
	return s.Lease.Holder != "" && s.Lease.ExpiresAt.Sub(s.Lease.Now) > now.Sub(s.LeaseRead)
}

// Elector runs the election for one control plane.
type Elector struct {
	opts     Options
	instance string
	log      *slog.Logger

	mu     sync.Mutex
	st     Status
	lost   bool
	closed chan struct{}
}

// New returns an elector; Run runs it.
func New(opts Options) *Elector {
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	if opts.Renew <= 0 {
		opts.Renew = DefaultRenew
	}
	if opts.Retry <= 0 {
		opts.Retry = DefaultRetry
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	e := &Elector{opts: opts, instance: hex.EncodeToString(b), log: opts.Logger.With("component", "leader"), closed: make(chan struct{})}
	e.st.Instance = e.instance
	return e
}

// Status returns what the elector knows now. Leading turns false the moment
// the local validity ends, even before Run notices.
func (e *Elector) Status() Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.st
	if st.Leading && !e.opts.Now().Before(st.ValidUntil) {
		st.Leading = false
	}
	return st
}

// Leading returns the fencing token while this control plane may act for
// the fleet.
func (e *Elector) Leading() (int64, bool) {
	st := e.Status()
	return st.Token, st.Leading
}

// Run takes part in the election until ctx ends or leadership is lost; on
// return after ctx ends it releases a lease it holds so that a standby
// takes over at once.
func (e *Elector) Run(ctx context.Context) {
	defer close(e.closed)
	if err := e.checkUnique(ctx); err != nil {
		e.lose(err.Error())
		return
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			e.release()
			return
		case <-timer.C:
		}
		next := e.round(ctx)
		if e.isLost() {
			return
		}
		timer.Reset(next)
	}
}

// Done closes when Run has returned.
func (e *Elector) Done() <-chan struct{} { return e.closed }

func (e *Elector) isLost() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lost
}

// round makes one claim and returns when to make the next.
func (e *Elector) round(ctx context.Context) time.Duration {
	start := e.opts.Now()
	e.mu.Lock()
	leading, validUntil, token := e.st.Leading, e.st.ValidUntil, e.st.Token
	e.mu.Unlock()
	// A claim may take no longer than the leader's remaining validity.
	timeout := e.opts.TTL
	if leading {
		timeout = max(validUntil.Sub(start), time.Millisecond)
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	l, held, err := e.opts.Store.AcquireLease(cctx, store.LeaseClaim{
		Name: store.FleetLease, Holder: e.opts.Name, Instance: e.instance, TTL: e.opts.TTL,
		AgentAddr: e.opts.AgentAddr, ClientAddr: e.opts.ClientAddr, ManageAddr: e.opts.ManageAddr,
	})
	cancel()
	if err == nil {
		e.see(ctx)
	}
	switch {
	case err != nil && leading:
		if !e.opts.Now().Before(validUntil) {
			e.lose("the lease could not be renewed before it ran out: " + err.Error())
			return 0
		}
		e.log.Warn("renewing the leader lease", "err", err, "valid_for", validUntil.Sub(e.opts.Now()).Round(time.Millisecond).String())
		return min(e.opts.Renew, max(validUntil.Sub(e.opts.Now())/4, 50*time.Millisecond))
	case err != nil:
		e.log.Warn("reading the leader lease", "err", err)
		return e.opts.Retry
	case !held && leading:
		e.lose("control plane " + l.Holder + " holds the lease (token " + strconv.FormatInt(l.Token, 10) + ")")
		return 0
	case !held:
		e.mu.Lock()
		e.st.Lease, e.st.LeaseRead = l, start
		e.mu.Unlock()
		return e.opts.Retry
	case leading && l.Token != token:
		// Someone else held the lease in between: what this control plane
		// did under its old token may have been undone.
		e.lose("the lease was taken over in between (token " + strconv.FormatInt(l.Token, 10) + ", had " + strconv.FormatInt(token, 10) + ")")
		return 0
	}
	e.mu.Lock()
	elected := !e.st.Leading
	e.st = Status{Leading: true, Token: l.Token, Lease: l, LeaseRead: start, ValidUntil: start.Add(e.opts.TTL), Instance: e.instance}
	e.mu.Unlock()
	if elected {
		e.log.Info("elected leader", "name", e.opts.Name, "token", l.Token, "lease", e.opts.TTL.String())
		if e.opts.OnElected != nil {
			go e.opts.OnElected(l.Token)
		}
		// The watchdog steps down at the local deadline even if a claim
		// hangs.
		go e.watchdog(ctx)
	}
	return e.opts.Renew
}

// checkUnique refuses a second live process under this control plane's
// name: when the registry holds the name, recently seen, it waits as long
// as a live holder of the name takes to record itself again and fails if
// it did. A process restarted under its name passes, after that wait when
// its predecessor was seen recently.
func (e *Elector) checkUnique(ctx context.Context) error {
	same := func() (store.ControlPlane, bool, error) {
		cps, err := e.opts.Store.ListControlPlanes(ctx)
		if err != nil {
			return store.ControlPlane{}, false, err
		}
		for _, cp := range cps {
			if cp.Name == e.opts.Name && cp.Instance != e.instance {
				return cp, true, nil
			}
		}
		return store.ControlPlane{}, false, nil
	}
	before, ok, err := same()
	if err != nil || !ok {
		return nil // best effort: the lease alone still keeps one leader
	}
	// A live process records itself after every claim: every Renew while
	// it leads, every Retry while it stands by.
	wait := 2 * max(e.opts.Renew, e.opts.Retry)
	if l, err := e.opts.Store.GetLease(ctx, store.FleetLease); err == nil &&
		(l.Now.Sub(before.SeenAt) > wait || (l.Instance == before.Instance && !l.Valid())) {
		// Seen long ago, or it led and gave the lease up (a clean stop)
		// or let it run out (it died or lost it, and exits): a restart.
		return nil
	}
	e.log.Info("waiting to see whether another process runs under this name", "name", e.opts.Name, "wait", wait.String())
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(wait):
	}
	after, ok, err := same()
	if err != nil || !ok || (after.Instance == before.Instance && !after.SeenAt.After(before.SeenAt)) {
		return nil
	}
	return errors.New("another control plane (instance " + after.Instance + ") is running under the name " + strconv.Quote(e.opts.Name) +
		"; ha.name must differ between control planes sharing a store")
}

// watchdog ends leadership when the local validity runs out without a
// renewal.
func (e *Elector) watchdog(ctx context.Context) {
	for {
		e.mu.Lock()
		until, leading, lost := e.st.ValidUntil, e.st.Leading, e.lost
		e.mu.Unlock()
		if !leading || lost {
			return
		}
		d := until.Sub(e.opts.Now())
		if d <= 0 {
			e.lose("the lease ran out before it was renewed")
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

func (e *Elector) lose(reason string) {
	e.mu.Lock()
	if e.lost {
		e.mu.Unlock()
		return
	}
	e.lost = true
	e.st.Leading = false
	e.mu.Unlock()
	e.log.Error("leadership lost", "reason", reason)
	if e.opts.OnLost != nil {
		e.opts.OnLost(reason)
	}
}

// see records this control plane in the registry (best effort).
func (e *Elector) see(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, e.opts.Retry)
	defer cancel()
	err := e.opts.Store.SeeControlPlane(cctx, store.ControlPlane{Name: e.opts.Name, Instance: e.instance, Version: e.opts.Version,
		AgentAddr: e.opts.AgentAddr, ClientAddr: e.opts.ClientAddr, ManageAddr: e.opts.ManageAddr})
	if err != nil && !errors.Is(err, context.Canceled) {
		e.log.Warn("recording this control plane", "err", err)
	}
}

// release gives the lease up when this control plane stops while leading.
func (e *Elector) release() {
	e.mu.Lock()
	st, lost := e.st, e.lost
	e.lost = true
	e.st.Leading = false
	e.mu.Unlock()
	if !st.Leading || lost {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := e.opts.Store.ReleaseLease(ctx, store.FleetLease, e.instance, st.Token); err != nil {
		e.log.Warn("releasing the leader lease", "err", err)
		return
	}
	e.log.Info("leader lease released", "token", st.Token)
}

// Abdicate ends leadership at once: the store refused a write under this
// control plane's token, so another has taken over.
func (e *Elector) Abdicate(reason string) { e.lose(reason) }
