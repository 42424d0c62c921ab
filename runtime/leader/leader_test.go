package leader_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/leader"
	"github.com/llmgw/llmgw/runtime/store"
)

// cutStore fails every lease call once cut, as a control plane that lost
// its connection to the database sees.
type cutStore struct {
	store.LeaseStore
	cut atomic.Bool
}

func (c *cutStore) AcquireLease(ctx context.Context, cl store.LeaseClaim) (store.Lease, bool, error) {
	if c.cut.Load() {
		return store.Lease{}, false, errors.New("connection refused")
	}
	return c.LeaseStore.AcquireLease(ctx, cl)
}

type events struct {
	mu      sync.Mutex
	elected map[string]time.Time
	lost    map[string]time.Time
	changed chan struct{}
}

func (ev *events) record(m map[string]time.Time, name string) {
	ev.mu.Lock()
	m[name] = time.Now()
	ev.mu.Unlock()
	select {
	case ev.changed <- struct{}{}:
	default:
	}
}

func (ev *events) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		ev.mu.Lock()
		ok := cond()
		ev.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ev.changed:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestFailoverOrder cuts the leader off from the store: it must stop
// counting itself leader (OnLost) before the standby is elected, and the
// standby's token is one higher.
func TestFailoverOrder(t *testing.T) {
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ev := &events{elected: map[string]time.Time{}, lost: map[string]time.Time{}, changed: make(chan struct{}, 1)}
	tokens := map[string]int64{}
	mk := func(name string, s store.LeaseStore) *leader.Elector {
		return leader.New(leader.Options{Store: s, Name: name, AgentAddr: name + ":7443",
			TTL: 600 * time.Millisecond, Renew: 150 * time.Millisecond, Retry: 50 * time.Millisecond,
			OnElected: func(tok int64) {
				ev.mu.Lock()
				tokens[name] = tok
				ev.mu.Unlock()
				ev.record(ev.elected, name)
			},
			OnLost: func(string) { ev.record(ev.lost, name) },
		})
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cutA := &cutStore{LeaseStore: st}
	a := mk("cp-a", cutA)
	go a.Run(ctx)
	ev.wait(t, "cp-a elected", func() bool { return !ev.elected["cp-a"].IsZero() })
	b := mk("cp-b", st)
	go b.Run(ctx)
	// cp-b sees cp-a as the holder and stays standby.
	ev.wait(t, "cp-b to read the lease", func() bool { return b.Status().Lease.Holder == "cp-a" })
	if _, ok := b.Leading(); ok {
		t.Fatal("cp-b leads while cp-a holds the lease")
	}
	cutAt := time.Now()
	cutA.cut.Store(true)
	ev.wait(t, "cp-b elected", func() bool { return !ev.elected["cp-b"].IsZero() })
	lostAt, electedAt := ev.lost["cp-a"], ev.elected["cp-b"]
	if lostAt.IsZero() || !lostAt.Before(electedAt) {
		t.Fatalf("cp-a lost leadership at %v, cp-b elected at %v: the old leader must stop first", lostAt, electedAt)
	}
	if tokens["cp-b"] != tokens["cp-a"]+1 {
		t.Errorf("tokens: %v, want cp-b one above cp-a", tokens)
	}
	if d := electedAt.Sub(cutAt); d > 600*time.Millisecond+50*time.Millisecond+500*time.Millisecond {
		t.Errorf("failover took %v, want within TTL + Retry (+ scheduling)", d)
	}
	if _, ok := a.Leading(); ok {
		t.Error("cp-a still counts itself leader")
	}
	select {
	case <-a.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("cp-a's elector did not stop after losing")
	}
}

// TestReleaseHandsOver stops the leader cleanly: it releases the lease and
// the standby takes it without waiting for the TTL.
func TestReleaseHandsOver(t *testing.T) {
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	elected := make(chan string, 2)
	mk := func(name string) *leader.Elector {
		return leader.New(leader.Options{Store: st, Name: name, TTL: time.Minute, Renew: 100 * time.Millisecond, Retry: 50 * time.Millisecond,
			OnElected: func(int64) { elected <- name }})
	}
	actx, stopA := context.WithCancel(t.Context())
	a := mk("cp-a")
	go a.Run(actx)
	if got := <-elected; got != "cp-a" {
		t.Fatal(got)
	}
	b := mk("cp-b")
	go b.Run(t.Context())
	start := time.Now()
	stopA()
	<-a.Done()
	select {
	case got := <-elected:
		if got != "cp-b" {
			t.Fatal(got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cp-b was not elected after cp-a released a one-minute lease")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("handover took %v", d)
	}
}
