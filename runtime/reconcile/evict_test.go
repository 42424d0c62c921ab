package reconcile

import (
	"errors"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/router"
)

// A model evicted to make room stays idle until asked for again, and the
// room freed goes to the model that asked for it: no model takes turns.
func TestEvictedModelStaysIdleAndRoomGoesToAsker(t *testing.T) {
	h := askFourthOfThreeServing(t, nil)
	h.ackStops()
	h.rec.Pass()
	h.readyAll("od-d")
	t.Logf("after first eviction: a=%d b=%d c=%d d=%d live", len(h.live("od-a")), len(h.live("od-b")), len(h.live("od-c")), len(h.live("od-d")))
	if n := len(h.live("od-d")); n != 1 {
		t.Fatalf("od-d asked for room and a replica was evicted for it: %d live, want 1", n)
	}
	// Nobody asks anything for 5 minutes.
	for i := 0; i < 300; i++ {
		h.now = h.now.Add(time.Second)
		h.heartbeat()
		h.rec.Pass()
		h.ackStops()
		for _, m := range []string{"od-a", "od-b", "od-c", "od-d"} {
			h.readyAll(m)
		}
	}
	total := 0
	for _, c := range h.conns {
		total += len(c.stops())
	}
	t.Logf("after 5 idle minutes: a=%d b=%d c=%d d=%d live; stops sent=%d", len(h.live("od-a")), len(h.live("od-b")), len(h.live("od-c")), len(h.live("od-d")), total)
	if n := len(h.live("od-d")); n != 1 {
		t.Errorf("od-d: %d live after 5 idle minutes, want 1", n)
	}
	if total > 1 {
		t.Errorf("%d evictions with no request after the first", total-1)
	}
}

// The room freed by an eviction goes to the model that asked for it even
// when the evicted model (earlier in the catalog) is asked for again before
// the room is free.
func TestEvictionRoomHeldForAsker(t *testing.T) {
	h := askFourthOfThreeServing(t, nil)
	var victim string
	for _, m := range []string{"od-a", "od-b", "od-c"} {
		if h.stopped(m) == 1 {
			victim = m
		}
	}
	if victim == "" {
		t.Fatal("no replica evicted for od-d")
	}
	_, _ = h.rt.Pick(victim, "") // asked for again while its replica stops
	h.ackStops()
	h.rec.Pass()
	if n := len(h.live("od-d")); n != 1 {
		t.Errorf("od-d asked for room first: %d live, want 1 (the freed room went to %s?)", n, victim)
	}
}

// TestEvictionUndoneClearsRoom: an eviction given up (the evicted model is
// asked for again while its replica drains) makes no room, so the model
// that asked for it is told why it cannot be loaded, not that it loads.
func TestEvictionUndoneClearsRoom(t *testing.T) {
	h := askFourthOfThreeServing(t, func(h *routed) {
		h.rec.opts.DrainSettle = 10 * time.Second // the victim is still draining in the next pass
	})
	if len(h.rec.evicting) != 1 {
		t.Fatalf("evicting %v, want one replica evicted for od-d", h.rec.evicting)
	}
	if why, _ := h.rec.NotPlaced("od-d"); why != "" {
		t.Fatalf("od-d while room is made for it: not placed %q, want loading", why)
	}
	// Every model asked for again: the victim returns to routing, and no
	// other replica may be evicted (each was just asked for).
	h.now = h.now.Add(time.Second)
	for _, m := range []string{"od-a", "od-b", "od-c"} {
		_, _ = h.rt.Pick(m, "")
	}
	for range 2 {
		h.heartbeat()
		h.rec.Pass()
		h.now = h.now.Add(time.Second)
	}
	if len(h.rec.draining) != 0 || len(h.rec.evicting) != 0 {
		t.Fatalf("draining %v, evicting %v: want the eviction undone", h.rec.draining, h.rec.evicting)
	}
	if why, _ := h.rec.NotPlaced("od-d"); why == "" {
		t.Fatal("od-d is told it loads though no room is being made for it")
	}
	var nr *router.NotReadyError
	if _, err := h.rt.Pick("od-d", ""); !errors.As(err, &nr) || nr.Loading {
		t.Fatalf("request for od-d: %v, want not loading", err)
	}
}

// askFourthOfThreeServing fills the three nodes with one 8-GPU on-demand
// model each (od-a to od-c, ready, idle for 3 minutes), then asks for a
// fourth (od-d) and runs the pass that makes room for it; before, when set,
// adjusts the harness first.
func askFourthOfThreeServing(t *testing.T, before func(*routed)) *routed {
	t.Helper()
	h := newRouted(t, onDemand("od-a", 8, time.Hour), onDemand("od-b", 8, time.Hour), onDemand("od-c", 8, time.Hour), onDemand("od-d", 8, time.Hour))
	if before != nil {
		before(h)
	}
	for _, m := range []string{"od-a", "od-b", "od-c"} {
		_, _ = h.rt.Pick(m, "")
	}
	h.rec.Pass()
	for _, m := range []string{"od-a", "od-b", "od-c"} {
		h.readyAll(m)
	}
	h.now = h.now.Add(3 * time.Minute)
	h.heartbeat()
	_, _ = h.rt.Pick("od-d", "")
	h.rec.Pass()
	return h
}
