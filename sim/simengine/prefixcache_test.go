package simengine

import (
	"fmt"
	"strings"
	"testing"
)

func words(n int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

func TestPrefixCacheLookup(t *testing.T) {
	shared := words(8, "w") // two blocks of 4
	tests := []struct {
		name       string
		seen       [][]string
		prompt     []string
		wantCached int
	}{
		{name: "cold cache", prompt: shared, wantCached: 0},
		{name: "identical prompt", seen: [][]string{shared}, prompt: shared, wantCached: 8},
		{name: "partial trailing block is not cached", seen: [][]string{append(words(8, "w"), "x", "y")}, prompt: append(words(8, "w"), "x", "y"), wantCached: 8},
		{name: "longer prompt with seen prefix", seen: [][]string{shared}, prompt: append(words(8, "w"), words(4, "z")...), wantCached: 8},
		{name: "divergence in first block breaks the chain", seen: [][]string{shared}, prompt: append([]string{"other"}, shared[1:]...), wantCached: 0},
		{name: "same second block after a different first block misses", seen: [][]string{shared}, prompt: append(words(4, "q"), shared[4:]...), wantCached: 0},
		{name: "shorter than a block", seen: [][]string{{"a", "b"}}, prompt: []string{"a", "b"}, wantCached: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newPrefixCache(100, 4)
			for _, s := range tt.seen {
				c.lookup(s)
			}
			if got := c.lookup(tt.prompt); got != tt.wantCached {
				t.Fatalf("lookup cached %d tokens, want %d", got, tt.wantCached)
			}
		})
	}
}

func TestPrefixCacheLRUBound(t *testing.T) {
	tests := []struct {
		name     string
		capacity int
		prompts  int // distinct one-block prompts inserted in order
		wantLen  int
		wantHit  []int // prompt indexes still cached afterwards
		wantMiss []int // prompt indexes evicted
	}{
		{name: "under capacity", capacity: 4, prompts: 3, wantLen: 3, wantHit: []int{0, 1, 2}},
		{name: "evicts least recently used", capacity: 3, prompts: 5, wantLen: 3, wantHit: []int{2, 3, 4}, wantMiss: []int{0, 1}},
		{name: "disabled", capacity: -1, prompts: 3, wantLen: 0, wantMiss: []int{0, 1, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newPrefixCache(tt.capacity, 2)
			prompt := func(i int) []string { return []string{fmt.Sprint("p", i), "x"} }
			for i := range tt.prompts {
				c.lookup(prompt(i))
				if c.len() > max(tt.capacity, 0) {
					t.Fatalf("cache holds %d blocks, capacity %d", c.len(), tt.capacity)
				}
			}
			if c.len() != tt.wantLen {
				t.Fatalf("cache holds %d blocks, want %d", c.len(), tt.wantLen)
			}
			// Probe without disturbing order: count via blockKeys.
			for _, i := range tt.wantHit {
				if _, ok := c.index[c.blockKeys(prompt(i))[0]]; !ok {
					t.Errorf("prompt %d evicted, want cached", i)
				}
			}
			for _, i := range tt.wantMiss {
				if _, ok := c.index[c.blockKeys(prompt(i))[0]]; ok {
					t.Errorf("prompt %d cached, want evicted", i)
				}
			}
		})
	}
}

func TestPrefixCacheTouchKeepsRecentlyUsed(t *testing.T) {
	c := newPrefixCache(2, 1)
	c.lookup([]string{"a"})
	c.lookup([]string{"b"})
	c.lookup([]string{"a"}) // a is now most recent
	c.lookup([]string{"c"}) // evicts b
	if got := c.lookup([]string{"a"}); got != 1 {
		t.Fatalf("a cached %d tokens, want 1 (recently used)", got)
	}
	if got := c.lookup([]string{"b"}); got != 0 {
		t.Fatalf("b cached %d tokens, want 0 (evicted)", got)
	}
}

func TestPrefixCacheEvictsChainTailsFirst(t *testing.T) {
	c := newPrefixCache(3, 1)
	c.lookup(strings.Fields("a b c"))
	c.lookup([]string{"z"}) // one block over capacity: the tail "c" goes
	if got := c.lookup(strings.Fields("a b c")); got != 2 {
		t.Fatalf("cached %d tokens of a b c, want 2 (prefix kept, tail evicted)", got)
	}
}

func TestPlanCompletion(t *testing.T) {
	ptr := func(n int) *int { return &n }
	tests := []struct {
		name      string
		maxTokens *int
		prompt    int
		maxLen    int
		eosAfter  int
		ignoreEOS bool
		want      completionPlan
	}{
		{name: "default length stops", prompt: 3, maxLen: 100, want: completionPlan{16, "stop"}},
		{name: "max tokens is a length stop", maxTokens: ptr(5), prompt: 3, maxLen: 100, want: completionPlan{5, "length"}},
		{name: "capped by context window", maxTokens: ptr(50), prompt: 90, maxLen: 100, want: completionPlan{10, "length"}},
		{name: "default capped by context window", prompt: 95, maxLen: 100, want: completionPlan{5, "length"}},
		{name: "end of sequence before max tokens", maxTokens: ptr(4096), prompt: 3, maxLen: 10000, eosAfter: 16, want: completionPlan{16, "stop"}},
		{name: "fewer asked than the end of sequence", maxTokens: ptr(5), prompt: 3, maxLen: 100, eosAfter: 16, want: completionPlan{5, "length"}},
		{name: "ignore_eos runs to max tokens", maxTokens: ptr(700), prompt: 3, maxLen: 10000, eosAfter: 16, ignoreEOS: true, want: completionPlan{700, "length"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := planCompletion(tt.maxTokens, tt.prompt, tt.maxLen, tt.eosAfter, tt.ignoreEOS); got != tt.want {
				t.Fatalf("planCompletion = %+v, want %+v", got, tt.want)
			}
		})
	}
}
