package leader_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/leader"
	"github.com/llmgw/llmgw/runtime/store"
)

func openLeaseStore(t *testing.T) store.LeaseStore {
	t.Helper()
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), "l.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st.(store.LeaseStore)
}

// TestSameNameNeverBothLead starts two processes under one ha.name at once
// (neither in the registry yet): they must never both count themselves
// leader, as they did when a claim under the holder's name took a valid
// lease.
func TestSameNameNeverBothLead(t *testing.T) {
	ls := openLeaseStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	var els []*leader.Elector
	for range 2 {
		e := leader.New(leader.Options{Store: ls, Name: "host", TTL: 600 * time.Millisecond, Renew: 100 * time.Millisecond, Retry: 50 * time.Millisecond})
		els = append(els, e)
		go e.Run(ctx)
	}
	defer func() {
		cancel()
		for _, e := range els {
			<-e.Done()
		}
	}()
	led := false
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		_, l0 := els[0].Leading()
		_, l1 := els[1].Leading()
		if l0 && l1 {
			t.Fatal("both processes named host count themselves leader")
		}
		led = led || l0 || l1
		time.Sleep(10 * time.Millisecond) // sampling both for overlap
	}
	if !led {
		t.Error("neither process was elected")
	}
}

// TestSameNameRefused: a process started under the name of a live control
// plane stops with an error naming the clash; the live one keeps leading.
// A process restarted under the name once its predecessor stopped starts.
func TestSameNameRefused(t *testing.T) {
	ls := openLeaseStore(t)
	opts := leader.Options{Store: ls, Name: "host", TTL: 600 * time.Millisecond, Renew: 100 * time.Millisecond, Retry: 50 * time.Millisecond}
	ctx1, stop1 := context.WithCancel(context.Background())
	defer stop1()
	first := leader.New(opts)
	go first.Run(ctx1)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := first.Leading(); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first process was never elected")
		}
		time.Sleep(10 * time.Millisecond)
	}
	lost := make(chan string, 1)
	o2 := opts
	o2.OnLost = func(r string) { lost <- r }
	second := leader.New(o2)
	go second.Run(t.Context())
	select {
	case r := <-lost:
		if !strings.Contains(r, `under the name "host"`) {
			t.Errorf("second process stopped with %q; want the name clash", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a second process under a live control plane's name kept running")
	}
	<-second.Done()
	if _, ok := first.Leading(); !ok {
		t.Error("the first process lost its leadership to a duplicate")
	}
	stop1()
	<-first.Done()
	// The restart after a clean stop (the lease given up) is elected at
	// once, without waiting to see whether its predecessor still runs.
	o3 := opts
	o3.TTL, o3.Renew, o3.Retry = 6*time.Second, 2*time.Second, time.Second
	o3.OnLost = func(r string) { t.Errorf("restarted process stopped: %s", r) }
	ctx3, stop3 := context.WithCancel(context.Background())
	third := leader.New(o3)
	started := time.Now()
	go third.Run(ctx3)
	defer func() { stop3(); <-third.Done() }()
	deadline = time.Now().Add(10 * time.Second)
	for {
		if _, ok := third.Leading(); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the restarted process was never elected")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if took := time.Since(started); took >= 2*o3.Renew {
		t.Errorf("the restart after a clean stop was elected after %s; want at once, not after the %s wait", took, 2*o3.Renew)
	}
}

// TestStandbyViewGoesStale: a standby cut off from the store stops
// trusting the leader it last read once that lease would have run out on
// its own clock, although the lease it holds still says valid (it carries
// the database's clock at the read).
func TestStandbyViewGoesStale(t *testing.T) {
	ls := openLeaseStore(t)
	ttl := 600 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	a := leader.New(leader.Options{Store: ls, Name: "a", TTL: ttl, Renew: 100 * time.Millisecond, Retry: 50 * time.Millisecond})
	cut := &cutStore{LeaseStore: ls}
	b := leader.New(leader.Options{Store: cut, Name: "b", TTL: ttl, Renew: 100 * time.Millisecond, Retry: 50 * time.Millisecond})
	go a.Run(ctx)
	defer func() { cancel(); <-a.Done(); <-b.Done() }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := a.Leading(); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a was never elected")
		}
		time.Sleep(10 * time.Millisecond)
	}
	go b.Run(ctx)
	for {
		st := b.Status()
		if st.Lease.Holder == "a" && st.LeaseValid(time.Now()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b never saw a's lease: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cut.cut.Store(true)
	cutAt := time.Now()
	for {
		st := b.Status()
		if !st.LeaseValid(time.Now()) {
			if !st.Lease.Valid() {
				t.Errorf("the lease b last read says invalid by itself; the test needs one that still says valid")
			}
			if took := time.Since(cutAt); took > ttl+200*time.Millisecond {
				t.Errorf("b trusted a's lease %s after it was cut off; want at most the TTL %s", took, ttl)
			}
			return
		}
		if time.Since(cutAt) > 5*ttl {
			t.Fatalf("b, cut off, still trusts a's lease %s later", time.Since(cutAt))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
