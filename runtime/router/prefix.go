package router

import (
	"encoding/binary"
	"hash/maphash"
	mathbits "math/bits"
	"sync"
)

// Key is a prompt cut into blocks, each block's hash chained through every
// block before it, so two keys agree on block i only when the prompts agree
// on everything up to the end of block i. An engine's prefix cache works on
// the same rule (over tokens); the router cuts bytes, which it need not
// tokenize to compare.
type Key []uint64

// Affinity key sizes: blocks of KeyBlockBytes bytes, at most KeyMaxBlocks of
// them (the first 128 KiB of a prompt decide where it goes).
const (
	KeyBlockBytes = 512
	KeyMaxBlocks  = 256
)

var keySeed = maphash.MakeSeed()

// PrefixKey cuts a prompt (for a chat request, the raw JSON of its messages,
// which a conversation's next turn repeats byte for byte) into a Key. Only
// whole blocks count: a prompt shorter than one block has no key.
func PrefixKey(prompt []byte) Key {
	n := min(len(prompt)/KeyBlockBytes, KeyMaxBlocks)
	if n == 0 {
		return nil
	}
	key := make(Key, n)
	var h maphash.Hash
	h.SetSeed(keySeed)
	var parent [8]byte
	for i := range n {
		h.Reset()
		_, _ = h.Write(parent[:])
		_, _ = h.Write(prompt[i*KeyBlockBytes : (i+1)*KeyBlockBytes])
		key[i] = h.Sum64()
		binary.LittleEndian.PutUint64(parent[:], key[i])
	}
	return key
}

// PrefixAffinity sends a request to the replica that holds the longest
// prefix of its prompt, where that prefix is most likely still in the
// engine's cache, unless that replica is loaded well beyond the least
// loaded one: its load after taking the request, (queue + 1) / weight, may be
// at most Ratio times the least loaded one's plus Slack. Several replicas
// holding the prefix: the least loaded of them.
//
// A request sharing no useful prefix with earlier ones (or with no key)
// goes to the least loaded replica, as LeastLoaded sends it, so prompts
// that share nothing spread as evenly as without affinity. So does a
// request that starts a new conversation: its longest known prefix is a
// branch point, a prefix other prompts already continued differently (a
// system prompt many conversations share). Each replica then caches that
// shared prefix once, and conversations spread over the replicas' caches
// instead of piling onto the first replica that saw the system prompt;
// their next turns follow them.
//
// A prefix is useful when it is at least MinBlocks blocks or half the
// prompt: a short common header does not pull requests together.
type PrefixAffinity struct {
	// Ratio and Slack bound the imbalance affinity may cause (defaults 1.5
	// and 4: an idle pool lets the affine replica run four requests more
	// than the least loaded, a busy one half as many again). Below its
	// batch size an engine serves a few more requests at no cost to each,
	// while a miss costs the whole prefix's prefill.
	Ratio, Slack float64
	// MinBlocks is the shortest useful prefix in blocks (default 4, 2 KiB).
	MinBlocks int
}

// Select implements Selector.
func (a PrefixAffinity) Select(p *Pool, key Key) *Upstream {
	least := p.leastLoaded()
	if len(key) == 0 || len(p.upstreams) == 1 {
		return least
	}
	m := p.model.index.lookup(key)
	minBlocks := a.MinBlocks
	if minBlocks <= 0 {
		minBlocks = 4
	}
	if m.depth == 0 || (m.depth < minBlocks && m.depth*2 < len(key)) || (m.branched && m.depth < len(key)) {
		return least
	}
	var u *Upstream
	for _, c := range p.upstreams {
		if m.holders&c.st.bit != 0 && (u == nil || c.less(u)) {
			u = c
		}
	}
	if u == nil || u == least {
		return least
	}
	// A holder whose KV cache is full has likely evicted the prefix
	// already, and a request sent there waits for memory or preempts
	// another: it goes to the least loaded unless that one is as full.
	if u.kvFull() && !least.kvFull() {
		return least
	}
	ratio, slack := a.Ratio, a.Slack
	if ratio <= 0 {
		ratio = 1.5
	}
	if slack <= 0 {
		slack = 4
	}
	lu := float64(u.Queue()+1) / float64(u.weight)
	ll := float64(least.Queue()+1) / float64(least.weight)
	if lu <= ll*ratio+slack {
		return u
	}
	return least
}

// prefixIndex remembers, for each block of recent prompts, which replicas
// took a prompt with that prefix and whether prompts continued it in more
// than one way: an approximate radix tree kept as a map of chained block
// hashes. Replicas are bits of a 64-bit set: a replica gets a free bit,
// and a bit freed when its replica leaves is cleared from every block
// before it is given again, so a new replica never inherits a gone one's
// prefixes (a model with more than 64 replicas at once shares bits, which
// only blurs the choice). It holds about
// capacity blocks in two generations: when the newer fills, the older is
// dropped, so blocks not seen for a generation are forgotten and memory
// stays bounded.
type prefixIndex struct {
	mu       sync.Mutex
	capacity int
	cur, old map[uint64]block
}

// block is what the index knows of one prefix block.
type block struct {
	// holders are the replicas that took a prompt with this prefix.
	holders uint64
	// next is the block that first followed this one; branched is set
	// once another did.
	next     uint64
	branched bool
}

// defaultIndexBlocks bounds one model's index: 64 Ki blocks of 512 bytes
// are 32 MiB of distinct prompt text, more than the prefix caches of a
// model's replicas usually hold.
const defaultIndexBlocks = 1 << 16

func newPrefixIndex(capacity int) *prefixIndex {
	return &prefixIndex{capacity: capacity, cur: map[uint64]block{}}
}

// getLocked returns block k, promoting it from the older generation.
func (x *prefixIndex) getLocked(k uint64) (block, bool) {
	if b, ok := x.cur[k]; ok {
		return b, true
	}
	if b, ok := x.old[k]; ok {
		x.putLocked(k, b)
		return b, true
	}
	return block{}, false
}

func (x *prefixIndex) putLocked(k uint64, b block) {
	x.cur[k] = b
	if len(x.cur) >= x.capacity/2 {
		x.old, x.cur = x.cur, make(map[uint64]block, len(x.cur))
	}
}

// match is the longest known prefix of a key.
type match struct {
	depth    int
	holders  uint64
	branched bool
}

// lookup returns the longest known prefix of key. It searches by halving,
// taking a known block to mean every block before it is known too (what
// the chaining makes likely).
func (x *prefixIndex) lookup(key Key) match {
	x.mu.Lock()
	defer x.mu.Unlock()
	lo, hi := 0, len(key)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if _, ok := x.getLocked(key[mid-1]); ok {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if lo == 0 {
		return match{}
	}
	b, _ := x.getLocked(key[lo-1])
	return match{depth: lo, holders: b.holders, branched: b.branched}
}

// forget clears bit from every block: its replica is gone.
func (x *prefixIndex) forget(bit uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, m := range []map[uint64]block{x.cur, x.old} {
		for k, b := range m {
			if b.holders&bit != 0 {
				b.holders &^= bit
				m[k] = b
			}
		}
	}
}

// takeBit gives a new endpoint of the model a bit of its prefix index: the
// lowest free one, else (more than 64 endpoints) the least shared.
// r.mu must be held.
func (ms *modelState) takeBit() uint64 {
	best := 0
	for i, n := range ms.bitUsers {
		if n < ms.bitUsers[best] {
			best = i
		}
		if n == 0 {
			best = i
			break
		}
	}
	ms.bitUsers[best]++
	return 1 << best
}

// freeBit gives back an endpoint's bit; once no endpoint holds it, it is
// cleared from the index. r.mu must be held.
func (ms *modelState) freeBit(bit uint64) {
	i := mathbits.TrailingZeros64(bit)
	if i >= 64 || ms.bitUsers[i] == 0 {
		return
	}
	if ms.bitUsers[i]--; ms.bitUsers[i] == 0 {
		ms.index.forget(bit)
	}
}

// record adds the replica whose bit is holder to every block of key.
func (x *prefixIndex) record(key Key, holder uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for i, k := range key {
		b, _ := x.getLocked(k)
		nb := b
		nb.holders |= holder
		if i+1 < len(key) {
			switch next := key[i+1]; {
			case nb.next == 0:
				nb.next = next
			case nb.next != next:
				nb.branched = true
			}
		}
		if nb != b {
			x.putLocked(k, nb)
		}
	}
}
