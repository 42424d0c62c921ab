package router

// Selector is a selection policy: it chooses one upstream of a non-empty pool
// for a request with the given prefix-affinity key (possibly empty). It must
// be safe for concurrent use and must not modify the pool; the Router
// increments the chosen upstream's counter. Returning nil means no upstream
// is acceptable.
type Selector interface {
	Select(p *Pool, key string) *Upstream
}

// LeastLoaded picks the upstream whose load after taking the request,
// (in-flight + 1) / weight, is lowest, so a weight-2 replica carries twice
// the requests of a weight-1 one. Ties are broken round-robin, starting at a
// position that advances on every pick, so equal load spreads evenly. It
// ignores the affinity key.
type LeastLoaded struct{}

// Select implements Selector.
func (LeastLoaded) Select(p *Pool, _ string) *Upstream {
	ups := p.upstreams
	n := len(ups)
	if n == 1 {
		return ups[0]
	}
	start := p.Rotate()
	best := ups[start]
	bestLoad := best.inflight.Load() + 1
	for i := 1; i < n; i++ {
		u := ups[(start+i)%n]
		load := u.inflight.Load() + 1
		// load/u.weight < bestLoad/best.weight, without division.
		if load*best.weight < bestLoad*u.weight {
			best, bestLoad = u, load
		}
	}
	return best
}

var _ Selector = LeastLoaded{}
