package simengine

import (
	"container/list"
	"encoding/binary"
	"hash/fnv"
	"sync"
)

// prefixCache is a bounded LRU of prompt blocks. A block is BlockSize tokens
// and is keyed by a hash chained through every token before it, so a block
// hits only when the whole prefix up to and including it was seen before —
// the same rule vLLM's automatic prefix caching follows. Only full blocks are
// cached.
type prefixCache struct {
	blockSize int
	capacity  int // <= 0 disables caching

	mu    sync.Mutex
	lru   *list.List               // front = most recently used; values are uint64 keys
	index map[uint64]*list.Element // key -> element in lru
}

func newPrefixCache(capacity, blockSize int) *prefixCache {
	return &prefixCache{
		blockSize: blockSize,
		capacity:  capacity,
		lru:       list.New(),
		index:     make(map[uint64]*list.Element),
	}
}

// blockKeys returns the chained hash of every full block of tokens.
func (c *prefixCache) blockKeys(tokens []string) []uint64 {
	n := len(tokens) / c.blockSize
	keys := make([]uint64, 0, n)
	var parent uint64
	var buf [8]byte
	for b := range n {
		h := fnv.New64a()
		binary.LittleEndian.PutUint64(buf[:], parent)
		h.Write(buf[:])
		for _, t := range tokens[b*c.blockSize : (b+1)*c.blockSize] {
			h.Write([]byte(t))
			h.Write([]byte{0})
		}
		parent = h.Sum64()
		keys = append(keys, parent)
	}
	return keys
}

// lookup returns how many leading tokens of the prompt are cached and then
// records every full block of it as most recently used.
func (c *prefixCache) lookup(tokens []string) (cachedTokens int) {
	if c.capacity <= 0 {
		return 0
	}
	keys := c.blockKeys(tokens)
	c.mu.Lock()
	defer c.mu.Unlock()
	hits := 0
	for _, k := range keys {
		if _, ok := c.index[k]; !ok {
			break
		}
		hits++
	}
	c.insertLocked(keys)
	return hits * c.blockSize
}

// insert records every full block of tokens (e.g. prompt plus completion,
// so that the next turn of a conversation hits) as most recently used.
func (c *prefixCache) insert(tokens []string) {
	if c.capacity <= 0 {
		return
	}
	keys := c.blockKeys(tokens)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.insertLocked(keys)
}

// insertLocked touches keys from the last block to the first, so a chain's
// first block is the most recently used and eviction eats chains from their
// tails, keeping the shared prefixes that make hits possible.
func (c *prefixCache) insertLocked(keys []uint64) {
	for i := len(keys) - 1; i >= 0; i-- {
		k := keys[i]
		if e, ok := c.index[k]; ok {
			c.lru.MoveToFront(e)
			continue
		}
		c.index[k] = c.lru.PushFront(k)
	}
	for c.lru.Len() > c.capacity {
		oldest := c.lru.Back()
		c.lru.Remove(oldest)
		delete(c.index, oldest.Value.(uint64))
	}
}

// usage is the fraction of the cache's blocks in use, 0 to 1.
func (c *prefixCache) usage() float64 {
	if c.capacity <= 0 {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return float64(c.lru.Len()) / float64(c.capacity)
}

// len is the number of cached blocks.
func (c *prefixCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}
