package router

import "time"

// EngineLoad is what an engine last reported of its own load (vLLM's
// metrics: vllm:num_requests_running, vllm:num_requests_waiting,
// vllm:kv_cache_usage_perc).
type EngineLoad struct {
	// Known is false when the engine reported nothing usable.
	Known bool
	// Running and Waiting are the requests the engine is generating for
	// and the ones queued behind them.
	Running, Waiting int64
	// KVUsage is the fraction of the KV cache in use, 0 to 1; negative
	// when not reported.
	KVUsage float64
	// At is when the engine was asked (the prober's clock); zero when
	// not known.
	At time.Time
}

// Target is one endpoint as the prober sees it.
type Target struct {
	Endpoint
	// Down is true while the endpoint is out of the table after a failed
	// connection: the prober asks whether its engine answers again.
	Down bool
	st   *upstreamState
	ms   *modelState
}

// Targets returns every endpoint in the table, each once.
func (r *Router) Targets() []Target {
	t := *r.table.Load()
	var out []Target
	for _, p := range t {
		for _, u := range p.upstreams {
			out = append(out, Target{Endpoint: u.ep, Down: u.st.down.Load(), st: u.st, ms: u.model})
		}
	}
	return out
}

// MarkUp returns the target to the table: its engine answered again.
func (t Target) MarkUp() {
	if t.st == nil {
		return
	}
	if t.st.down.CompareAndSwap(true, false) {
		t.ms.wake()
	}
}

// MarkDown takes the target out of the table, as a failed connection does
// (a prober that finds the engine gone).
func (t Target) MarkDown() {
	if t.st != nil {
		t.st.down.Store(true)
	}
}

// InFlight is the requests this router has in flight on the target now.
func (t Target) InFlight() int64 {
	if t.st == nil {
		return 0
	}
	return t.st.inflight.Load()
}

// SetLoad records what the target's engine reported of its load; a load
// with Known false forgets the last one. before is InFlight read just
// before the engine was asked: the requests the engine reports beyond
// the more of that and of InFlight now were sent by others (a request of
// this router's in flight when the engine counted is in one of the two).
func (t Target) SetLoad(l EngineLoad, before int64) {
	if t.st == nil {
		return
	}
	if !l.Known {
		t.st.engine.Store(nil)
		t.st.external.Store(0)
		return
	}
	t.st.engine.Store(&l)
	t.st.external.Store(max(l.Running+l.Waiting-max(before, t.st.inflight.Load()), 0))
}
