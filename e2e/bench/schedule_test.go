package bench

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestOrderings: every order of k numbers, each once.
func TestOrderings(t *testing.T) {
	for k, want := range []int{1, 1, 2, 6, 24} {
		seen := map[string]bool{}
		for _, o := range orderings(k) {
			s := slices.Clone(o)
			slices.Sort(s)
			for i, v := range s {
				if v != i {
					t.Fatalf("orderings(%d) holds %v, not an order of 0..%d", k, o, k-1)
				}
			}
			seen[fmt.Sprint(o)] = true
		}
		if len(seen) != want || len(orderings(k)) != want {
			t.Errorf("orderings(%d): %d distinct of %d, want %d", k, len(seen), len(orderings(k)), want)
		}
	}
}

// TestBlocked: a block alternates the engine (base 0) and one proxy; the
// proxies take blocks in turn, each as many, in changing orders.
func TestBlocked(t *testing.T) {
	const k, n = 4, 20
	s := blocked(k, n)
	perProxy := map[int]int{}
	var firsts []int
	for b := 0; b < 60; b++ {
		proxy := -1
		for i := b * n; i < (b+1)*n; i++ {
			base, blk := s(i)
			if blk != b {
				t.Fatalf("request %d: block %d, want %d", i, blk, b)
			}
			switch {
			case i%2 == 0 && base != 0:
				t.Fatalf("request %d went to base %d, want the engine (0)", i, base)
			case i%2 == 1 && (base == 0 || (proxy != -1 && base != proxy)):
				t.Fatalf("request %d went to base %d in a block of proxy %d", i, base, proxy)
			case i%2 == 1:
				proxy = base
			}
		}
		perProxy[proxy]++
		if b%(k-1) == 0 {
			firsts = append(firsts, proxy)
		}
	}
	for p := 1; p < k; p++ {
		if perProxy[p] != 60/(k-1) {
			t.Errorf("proxy %d had %d blocks of 60, want %d", p, perProxy[p], 60/(k-1))
		}
	}
	if len(slices.Compact(slices.Sorted(slices.Values(firsts)))) < 2 {
		t.Errorf("every round began with the same proxy: %v", firsts)
	}
}

// TestBlockGap: two sets of blocks from one distribution differ at the
// median by less than the gap; a set 50 µs slower in every block by more.
func TestBlockGap(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	draw := func(first, blocks int, shift time.Duration) result {
		var r result
		for b := first; b < first+blocks; b++ {
			drift := time.Duration(rng.IntN(40)) * time.Microsecond // the machine, block by block
			for range 10 {
				r.lat = append(r.lat, 250*time.Microsecond+drift+shift+time.Duration(rng.IntN(60))*time.Microsecond)
				r.blk = append(r.blk, b)
			}
		}
		return r
	}
	a, b := draw(0, 150, 0), draw(150, 150, 0)
	if d, gap := a.pct(0.5)-b.pct(0.5), blockGap(a, b, 0.5); d > gap || gap <= 0 {
		t.Errorf("one distribution: medians differ by %s, gap %s: want a positive gap no smaller", d, gap)
	}
	slow := draw(300, 150, 50*time.Microsecond)
	if d, gap := slow.pct(0.5)-b.pct(0.5), blockGap(slow, b, 0.5); d <= gap {
		t.Errorf("50µs slower: medians differ by %s, within the gap %s", d, gap)
	}
}
