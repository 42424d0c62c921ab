package router

import (
	"errors"
	"fmt"
	"sync"
	"testing"
)

func ep(id string, weight int) Endpoint {
	return Endpoint{ReplicaID: id, Model: "m", URL: "http://" + id + ":8000", Weight: weight}
}

// addLoad adds n requests in flight to one replica of model.
func addLoad(t *testing.T, r *Router, model, replica string, n int64) {
	t.Helper()
	for _, u := range (*r.table.Load())[model].Upstreams() {
		if u.ep.ReplicaID == replica {
			u.inflight.Add(n)
			return
		}
	}
	t.Fatalf("replica %q of %q not in the table", replica, model)
}

// inflight returns each replica's in-flight count for model.
func inflight(r *Router, model string) map[string]int64 {
	out := map[string]int64{}
	for _, l := range r.Snapshot()[model] {
		out[l.ReplicaID] = l.InFlight
	}
	return out
}

func TestPickLeastLoaded(t *testing.T) {
	tests := []struct {
		name string
		eps  []Endpoint
		// load is the in-flight count to create on each replica first.
		load map[string]int
		// want is the set of replicas an acceptable pick may return.
		want []string
	}{
		{name: "single endpoint", eps: []Endpoint{ep("a", 1)}, want: []string{"a"}},
		{name: "least in flight wins", eps: []Endpoint{ep("a", 1), ep("b", 1), ep("c", 1)},
			load: map[string]int{"a": 2, "b": 0, "c": 1}, want: []string{"b"}},
		{name: "weight normalises load", eps: []Endpoint{ep("a", 4), ep("b", 1)},
			load: map[string]int{"a": 2, "b": 0}, want: []string{"a"}},
		{name: "weight zero counts as one", eps: []Endpoint{ep("a", 0), ep("b", 1)},
			load: map[string]int{"a": 1}, want: []string{"b"}},
		{name: "equal load may go anywhere", eps: []Endpoint{ep("a", 1), ep("b", 1)},
			load: map[string]int{"a": 1, "b": 1}, want: []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New()
			r.SetEndpoints("m", tt.eps)
			for id, n := range tt.load {
				addLoad(t, r, "m", id, int64(n))
			}
			for id, n := range tt.load {
				if got := inflight(r, "m")[id]; got != int64(n) {
					t.Fatalf("setup: %s has %d in flight, want %d", id, got, n)
				}
			}
			l, err := r.Pick("m", "")
			if err != nil {
				t.Fatalf("Pick: %v", err)
			}
			got := l.Endpoint().ReplicaID
			ok := false
			for _, w := range tt.want {
				ok = ok || got == w
			}
			if !ok {
				t.Errorf("picked %q, want one of %v", got, tt.want)
			}
		})
	}
}

func TestPickNoReplica(t *testing.T) {
	r := New()
	r.SetEndpoints("other", []Endpoint{ep("a", 1)})
	r.SetEndpoints("gone", []Endpoint{ep("b", 1)})
	r.SetEndpoints("gone", nil)
	for _, model := range []string{"missing", "gone", ""} {
		if _, err := r.Pick(model, ""); !errors.Is(err, ErrNoReplica) {
			t.Errorf("Pick(%q) error = %v, want ErrNoReplica", model, err)
		}
	}
	if _, ok := r.Snapshot()["gone"]; ok {
		t.Errorf("Snapshot still lists a model whose endpoints were removed")
	}
}

func TestEqualLoadSpreadsRoundRobin(t *testing.T) {
	r := New()
	r.SetEndpoints("m", []Endpoint{ep("a", 1), ep("b", 1), ep("c", 1)})
	counts := map[string]int{}
	for i := 0; i < 30; i++ {
		l, err := r.Pick("m", "")
		if err != nil {
			t.Fatal(err)
		}
		counts[l.Endpoint().ReplicaID]++
		l.Done()
	}
	for _, id := range []string{"a", "b", "c"} {
		if counts[id] != 10 {
			t.Errorf("sequential picks at zero load: %s got %d of 30, want 10 (%v)", id, counts[id], counts)
		}
	}
}

func TestWeightedSpread(t *testing.T) {
	r := New()
	r.SetEndpoints("m", []Endpoint{ep("big", 2), ep("small", 1)})
	for i := 0; i < 30; i++ {
		if _, err := r.Pick("m", ""); err != nil {
			t.Fatal(err)
		}
	}
	got := inflight(r, "m")
	if got["big"] != 20 || got["small"] != 10 {
		t.Errorf("held picks = %v, want big 20 and small 10", got)
	}
}

func TestLeaseDoneIdempotent(t *testing.T) {
	r := New()
	r.SetEndpoints("m", []Endpoint{ep("a", 1)})
	l1, _ := r.Pick("m", "")
	l2, _ := r.Pick("m", "")
	l1.Done()
	l1.Done()
	if got := inflight(r, "m")["a"]; got != 1 {
		t.Fatalf("after double Done of one of two leases: in flight %d, want 1", got)
	}
	l2.Done()
	if got := inflight(r, "m")["a"]; got != 0 {
		t.Fatalf("after all leases done: in flight %d, want 0", got)
	}
	var zero Lease
	zero.Done() // must not panic
	if zero.Endpoint() != (Endpoint{}) {
		t.Errorf("zero lease endpoint = %+v, want zero", zero.Endpoint())
	}
}

func TestSetEndpointsKeepsCounters(t *testing.T) {
	tests := []struct {
		name string
		next []Endpoint
		want map[string]int64
	}{
		{name: "persisting endpoint keeps its count", next: []Endpoint{ep("a", 1), ep("c", 1)},
			want: map[string]int64{"a": 1, "c": 0}},
		{name: "weight change keeps count", next: []Endpoint{ep("a", 3)},
			want: map[string]int64{"a": 1}},
		{name: "url change is a new upstream", next: []Endpoint{{ReplicaID: "a", URL: "http://elsewhere:1"}},
			want: map[string]int64{"a": 0}},
		{name: "duplicates collapse", next: []Endpoint{ep("a", 1), ep("a", 1)},
			want: map[string]int64{"a": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New()
			r.SetEndpoints("m", []Endpoint{ep("a", 1)})
			la, _ := r.Pick("m", "")
			r.SetEndpoints("m", []Endpoint{ep("a", 1), ep("b", 1)})
			r.SetEndpoints("m", tt.next)
			snap := r.Snapshot()["m"]
			if len(snap) != len(tt.want) {
				t.Fatalf("snapshot has %d endpoints, want %d: %+v", len(snap), len(tt.want), snap)
			}
			for _, l := range snap {
				if l.InFlight != tt.want[l.ReplicaID] {
					t.Errorf("%s in flight %d, want %d", l.ReplicaID, l.InFlight, tt.want[l.ReplicaID])
				}
				if l.Model != "m" {
					t.Errorf("%s model %q, want filled in as %q", l.ReplicaID, l.Model, "m")
				}
			}
			la.Done() // a lease from an older table must stay harmless
			for _, l := range r.Snapshot()["m"] {
				if l.InFlight != 0 {
					t.Errorf("after Done %s in flight %d, want 0", l.ReplicaID, l.InFlight)
				}
			}
		})
	}
}

// TestConcurrentPickAndSet runs picks while the table changes underneath;
// run with -race. Every counter must return to zero.
func TestConcurrentPickAndSet(t *testing.T) {
	r := New()
	all := []Endpoint{ep("a", 1), ep("b", 2), ep("c", 1)}
	r.SetEndpoints("m", all)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				l, err := r.Pick("m", "")
				if err != nil {
					t.Errorf("Pick: %v", err)
					return
				}
				if l.Endpoint().ReplicaID == "" {
					t.Errorf("lease without endpoint")
				}
				l.Done()
			}
		}()
	}
	var setter sync.WaitGroup
	setter.Add(1)
	go func() {
		defer setter.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			r.SetEndpoints("m", all[:1+i%len(all)])
			r.SetEndpoints(fmt.Sprintf("other-%d", i%4), all)
			_ = r.Snapshot()
		}
	}()
	wg.Wait()
	close(stop)
	setter.Wait()
	r.SetEndpoints("m", all)
	for _, l := range r.Snapshot()["m"] {
		if l.InFlight != 0 {
			t.Errorf("%s in flight %d after all leases done, want 0", l.ReplicaID, l.InFlight)
		}
	}
}

func BenchmarkPick(b *testing.B) {
	r := New()
	r.SetEndpoints("m", []Endpoint{ep("a", 1), ep("b", 1), ep("c", 2), ep("d", 1)})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l, err := r.Pick("m", "")
			if err != nil {
				b.Fatal(err)
			}
			l.Done()
		}
	})
}
