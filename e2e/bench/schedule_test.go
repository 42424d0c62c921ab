package bench

import (
	"encoding/json"
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

// TestTargetJudgement: a median is held to the bare proxy's plus chance;
// a p99 to 1 ms, or to the bare proxy's plus chance (1 ms at most),
// whatever the bare proxy's own p99.
func TestTargetJudgement(t *testing.T) {
	us := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }
	for _, c := range []struct {
		name             string
		check            targetCheck
		wantP50, wantP99 bool
	}{
		{"both under", targetCheck{p50: us(300), bareP50: us(300), p99: us(900), bareP99: us(950)}, true, true},
		{"median within chance", targetCheck{p50: us(310), bareP50: us(300), p50Gap: us(12)}, true, true},
		{"median past chance", targetCheck{p50: us(313), bareP50: us(300), p50Gap: us(12)}, false, true},
		{"p99 past 1 ms within chance of a bare hop under it", targetCheck{p99: us(1177), bareP99: us(971), p99Gap: us(341)}, true, true},
		{"p99 past 1 ms within chance of a bare hop over it", targetCheck{p99: us(1500), bareP99: us(1400), p99Gap: us(200)}, true, true},
		{"p99 past 1 ms and past chance", targetCheck{p99: us(1099), bareP99: us(742), p99Gap: us(341)}, true, false},
		{"p99 past 1 ms, no band", targetCheck{p99: us(1001), bareP99: us(1001), p99Gap: -us(5)}, true, true},
		{"p99 over the bare proxy's by more than 1 ms, within a wide band", targetCheck{p99: us(2600), bareP99: us(1500), p99Gap: us(2475)}, true, false},
	} {
		if got := c.check.p50OK(); got != c.wantP50 {
			t.Errorf("%s: p50OK %v, want %v", c.name, got, c.wantP50)
		}
		if got := c.check.p99OK(); got != c.wantP99 {
			t.Errorf("%s: p99OK %v, want %v", c.name, got, c.wantP99)
		}
	}
}

// TestPayloadsAskUsageAlike: streams to the paths overhead lists ask the
// engine for the usage chunk, the gateway's do not (it asks on its
// clients' behalf), and no whole answer asks.
func TestPayloadsAskUsageAlike(t *testing.T) {
	l := &loader{withUsage: map[string]bool{"direct": true, "bare": true}}
	asks := func(b []byte) bool {
		var req struct {
			Stream        bool `json:"stream"`
			StreamOptions *struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		if err := json.Unmarshal(b, &req); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		return req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	}
	bases := []string{"direct", "gateway", "bare"}
	for _, stream := range []bool{true, false} {
		for i, p := range l.payloads(bases, stream) {
			if want := stream && bases[i] != "gateway"; asks(p) != want {
				t.Errorf("stream %t, %s: asks for usage %t, want %t", stream, bases[i], asks(p), want)
			}
		}
	}
}
