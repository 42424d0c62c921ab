package metrics

import (
	"maps"
	"sync"
	"sync/atomic"
)

// cowMap is a copy-on-write map for label children: reads, on every
// request, are an atomic load and a typed map lookup with no lock; a miss,
// once per new label combination, copies the map.
type cowMap[K comparable, V any] struct {
	mu sync.Mutex
	m  atomic.Pointer[map[K]V]
}

func (c *cowMap[K, V]) load(k K) (V, bool) {
	if p := c.m.Load(); p != nil {
		v, ok := (*p)[k]
		return v, ok
	}
	var zero V
	return zero, false
}

// get returns the value of k, creating it with mk on a miss.
func (c *cowMap[K, V]) get(k K, mk func() V) V {
	if v, ok := c.load(k); ok {
		return v
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.load(k); ok {
		return v
	}
	var next map[K]V
	if p := c.m.Load(); p != nil {
		next = maps.Clone(*p)
	} else {
		next = map[K]V{}
	}
	v := mk()
	next[k] = v
	c.m.Store(&next)
	return v
}
