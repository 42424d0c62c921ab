package router

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestDrainingEndpoint: an endpoint flagged Draining takes no new request,
// but its requests in flight are still counted (Snapshot, Demand), its
// weight is no capacity, and a Wait is not released by it; a model loaded
// on demand with only draining endpoints is loading (the request asks for
// one back). Unflagged, it serves again with its count kept.
func TestDrainingEndpoint(t *testing.T) {
	r := New()
	r.SetModel("od", ModelConfig{OnDemand: true})
	a, b := ep("a", 2), ep("b", 3)
	r.SetEndpoints("od", []Endpoint{a, b})
	var held []Lease
	for range 4 {
		l, err := r.Pick("od", "")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	before := inflight(r, "od")
	b.Draining = true
	r.SetEndpoints("od", []Endpoint{a, b})
	for range 10 {
		l, err := r.Pick("od", "")
		if err != nil || l.Endpoint().ReplicaID != "a" {
			t.Fatalf("pick with b draining: %q, %v, want a", l.Endpoint().ReplicaID, err)
		}
		l.Done()
	}
	if got := inflight(r, "od"); got["b"] != before["b"] || before["b"] == 0 {
		t.Fatalf("in flight %v with b draining, want b's %d still counted", got, before["b"])
	}
	var draining bool
	for _, l := range r.Snapshot()["od"] {
		if l.ReplicaID == "b" {
			draining = l.Draining
		}
	}
	if !draining {
		t.Error("the snapshot does not say b drains")
	}
	if d := r.Demand("od"); d.InFlight != 4 || d.Capacity != 2 || d.Queue != before["a"] {
		t.Errorf("demand %+v, want the 4 in flight, capacity 2 and a's queue %d alone", d, before["a"])
	}

	// Only draining endpoints: loading, and a Wait waits.
	a.Draining = true
	r.SetEndpoints("od", []Endpoint{a, b})
	_, err := r.Pick("od", "")
	var nr *NotReadyError
	if !errors.As(err, &nr) || !nr.Loading {
		t.Fatalf("pick with every endpoint draining: %v, want loading", err)
	}
	if !r.TakePending("od") {
		t.Error("a request that found every endpoint draining did not ask for one")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := r.Wait(ctx, "od"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait with every endpoint draining: %v, want the context's deadline", err)
	}

	// Back in routing: b serves again, its requests still counted.
	b.Draining = false
	r.SetEndpoints("od", []Endpoint{a, b})
	l, err := r.Pick("od", "")
	if err != nil || l.Endpoint().ReplicaID != "b" {
		t.Fatalf("pick with b back: %q, %v, want b", l.Endpoint().ReplicaID, err)
	}
	l.Done()
	for _, l := range held {
		l.Done()
	}
	if got := inflight(r, "od"); got["a"] != 0 || got["b"] != 0 {
		t.Errorf("in flight %v once every request is done, want none", got)
	}
}

// flagOnSelect is a policy that, the first time it chooses, has the
// endpoint it chose flagged draining before it returns it: the reconciler
// flagging a replica between a request's read of the table and its count.
type flagOnSelect struct {
	r    *Router
	eps  []Endpoint
	done bool
}

func (f *flagOnSelect) Select(p *Pool, _ Key) *Upstream {
	u := p.Upstreams()[0]
	if !f.done {
		f.done = true
		for i := range f.eps {
			if f.eps[i].ReplicaID == u.Endpoint().ReplicaID {
				f.eps[i].Draining = true
			}
		}
		f.r.SetEndpoints("m", f.eps)
	}
	return u
}

// TestRouteRechecksDraining: a request that chose a replica flagged
// draining after it read the table does not keep it (the reconciler may
// have read its count as zero and be stopping it): it goes to another,
// and the flagged one's count is back to none.
func TestRouteRechecksDraining(t *testing.T) {
	r := New()
	f := &flagOnSelect{r: r, eps: []Endpoint{ep("a", 1), ep("b", 1)}}
	r.SetModel("m", ModelConfig{Policy: f})
	r.SetEndpoints("m", f.eps)
	l, err := r.Route("m", Request{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Done()
	if !f.done {
		t.Fatal("the policy was not asked")
	}
	var flagged string
	for _, e := range f.eps {
		if e.Draining {
			flagged = e.ReplicaID
		}
	}
	if got := l.Endpoint().ReplicaID; got == flagged {
		t.Errorf("the request kept %s, flagged draining after it read the table", got)
	}
	if n := inflight(r, "m")[flagged]; n != 0 {
		t.Errorf("%s has %d in flight, want none", flagged, n)
	}
}
