package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/store"
)

func claim(holder, instance string, ttl time.Duration) store.LeaseClaim {
	return store.LeaseClaim{Name: store.FleetLease, Holder: holder, Instance: instance, TTL: ttl,
		AgentAddr: holder + ":7443", ClientAddr: holder + ":8080", ManageAddr: holder + ":9090"}
}

// testLeaseTakeover walks the lease's life: first taken with token 1,
// renewed with the same token, refused to a second holder while valid,
// taken by it with a new token once expired, and then refused to the first
// holder, whose fenced writes fail from then on.
func testLeaseTakeover(t *testing.T, s store.Store) {
	ctx := t.Context()
	if _, err := s.GetLease(ctx, store.FleetLease); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetLease before any claim: %v, want ErrNotFound", err)
	}
	a, ok, err := s.AcquireLease(ctx, claim("cp-a", "a1", 300*time.Millisecond))
	if err != nil || !ok || a.Token != 1 || a.Holder != "cp-a" || a.AgentAddr != "cp-a:7443" {
		t.Fatalf("first claim = %+v, %v, %v; want held with token 1", a, ok, err)
	}
	if !a.Valid() || a.ExpiresAt.Sub(a.RenewedAt) != 300*time.Millisecond {
		t.Errorf("lease %+v: want valid, expiring 300ms after renewal", a)
	}
	if err := s.PutFleetState(ctx, 1, "routes", `{"m":1}`); err != nil {
		t.Fatalf("fenced write by the holder: %v", err)
	}
	r, ok, err := s.AcquireLease(ctx, claim("cp-a", "a1", 300*time.Millisecond))
	if err != nil || !ok || r.Token != 1 || !r.AcquiredAt.Equal(a.AcquiredAt) || r.ExpiresAt.Before(a.ExpiresAt) {
		t.Fatalf("renewal = %+v, %v, %v; want the same token and acquisition, a later expiry", r, ok, err)
	}
	b, ok, err := s.AcquireLease(ctx, claim("cp-b", "b1", 300*time.Millisecond))
	if err != nil || ok || b.Holder != "cp-a" || b.Token != 1 || b.ManageAddr != "cp-a:9090" {
		t.Fatalf("claim while held = %+v, %v, %v; want refused, naming cp-a", b, ok, err)
	}
	// Wait until the database's clock passes the expiry.
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, err := s.GetLease(ctx, store.FleetLease)
		if err != nil {
			t.Fatal(err)
		}
		if !l.Valid() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease %+v still valid long after its TTL", l)
		}
		time.Sleep(20 * time.Millisecond) // polling the database's clock
	}
	if err := s.PutFleetState(ctx, 1, "routes", `{"m":2}`); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("fenced write on an expired lease: %v, want ErrFenced", err)
	}
	b, ok, err = s.AcquireLease(ctx, claim("cp-b", "b1", time.Minute))
	if err != nil || !ok || b.Token != 2 || b.Holder != "cp-b" {
		t.Fatalf("claim after expiry = %+v, %v, %v; want held with token 2", b, ok, err)
	}
	if _, ok, err := s.AcquireLease(ctx, claim("cp-a", "a1", time.Minute)); err != nil || ok {
		t.Fatalf("the deposed holder renewing: held=%v err=%v; want refused", ok, err)
	}
	if err := s.PutFleetState(ctx, 1, "routes", `{"m":3}`); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("fenced write with the old token: %v, want ErrFenced", err)
	}
	if err := s.SetNodeDrain(ctx, 1, "node01", true); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("drain with the old token: %v, want ErrFenced", err)
	}
	if err := s.PutFleetState(ctx, 2, "routes", `{"m":4}`); err != nil {
		t.Fatal(err)
	}
	fs, err := s.GetFleetState(ctx, "routes")
	if err != nil || fs.Value != `{"m":4}` || fs.Token != 2 {
		t.Fatalf("fleet state = %+v, %v", fs, err)
	}
	// A second cp-b (same name, new instance) may be a live duplicate: it
	// is refused while the lease is valid, and takes it once released.
	if l, ok, err := s.AcquireLease(ctx, claim("cp-b", "b2", time.Minute)); err != nil || ok || l.Instance != "b1" || l.Token != 2 {
		t.Fatalf("same name, other instance, while valid = %+v, %v, %v; want refused, b keeps token 2", l, ok, err)
	}
	if err := s.ReleaseLease(ctx, store.FleetLease, "b1", 2); err != nil {
		t.Fatal(err)
	}
	b2, ok, err := s.AcquireLease(ctx, claim("cp-b", "b2", time.Minute))
	if err != nil || !ok || b2.Token != 3 || b2.Instance != "b2" {
		t.Fatalf("restarted holder after release = %+v, %v, %v; want held with token 3", b2, ok, err)
	}
	if err := s.ReleaseLease(ctx, store.FleetLease, "b2", 3); err != nil {
		t.Fatal(err)
	}
	if l, err := s.GetLease(ctx, store.FleetLease); err != nil || l.Valid() {
		t.Fatalf("lease after release = %+v, %v; want expired", l, err)
	}
	a, ok, err = s.AcquireLease(ctx, claim("cp-a", "a2", time.Minute))
	if err != nil || !ok || a.Token != 4 {
		t.Fatalf("claim after release = %+v, %v, %v; want token 4", a, ok, err)
	}
}

// testLeaseRace has many claimants race for a free lease: exactly one
// wins.
func testLeaseRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := map[string]int64{}
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := string(rune('a' + i))
			l, ok, err := s.AcquireLease(ctx, claim("cp-"+name, name, time.Minute))
			if err != nil {
				t.Errorf("claim %s: %v", name, err)
				return
			}
			if ok {
				mu.Lock()
				won[l.Holder] = l.Token
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(won) != 1 {
		t.Fatalf("winners = %v, want exactly one", won)
	}
}

// testDrainsAndControlPlanes covers the drain records and the control
// plane registry.
func testDrainsAndControlPlanes(t *testing.T, s store.Store) {
	ctx := t.Context()
	l, ok, err := s.AcquireLease(ctx, claim("cp-a", "a1", time.Minute))
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	for _, n := range []string{"node02", "node01"} {
		if err := s.SetNodeDrain(ctx, l.Token, n, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetNodeDrain(ctx, l.Token, "node02", false); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ListNodeDrains(ctx); err != nil || len(got) != 1 || got[0] != "node01" {
		t.Fatalf("drains = %v, %v; want [node01]", got, err)
	}
	for _, cp := range []store.ControlPlane{{Name: "cp-b", Instance: "b1", Version: "v1"}, {Name: "cp-a", Instance: "a1", Version: "v1", ManageAddr: "a:9090"}} {
		if err := s.SeeControlPlane(ctx, cp); err != nil {
			t.Fatal(err)
		}
	}
	cps, err := s.ListControlPlanes(ctx)
	if err != nil || len(cps) != 2 || cps[0].Name != "cp-a" || cps[0].ManageAddr != "a:9090" || cps[0].SeenAt.IsZero() {
		t.Fatalf("control planes = %+v, %v", cps, err)
	}
}
