package gateway

import (
	"sync"
	"time"
)

// fitMemory is what length refusals told of engines, kept for
// engineFitTTL so that a thread at the edge of a context shorter (or a
// tokenizer denser) than the catalog says is not refused on every turn.
// It is kept per project: one project's requests never change what
// another's are sent. Of a refusal it keeps the context the engine
// named, by the model and replica that refused (another replica of the
// model may hold more), and the engine's tokens per estimated token,
// by the thread and model (the rate is the thread's own text's; each
// later answer of the thread updates it with what the engine counted,
// and so does an answer of a thread fitted to a replica's context).
type fitMemory struct {
	mu     sync.Mutex
	limits map[replicaFit]fitEntry
	ratios map[threadFit]fitEntry
	swept  time.Time
}

type replicaFit struct{ project, model, replica string }

type threadFit struct{ project, thread, model string }

type fitEntry struct {
	limit int
	ratio float64
	at    time.Time
}

const engineFitTTL = 10 * time.Minute

// learn keeps what a refusal told: the replica's context, and the
// thread's rate.
func (m *fitMemory) learn(project, model, replica, thread string, f engineFit) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.limits == nil {
		m.limits, m.ratios = map[replicaFit]fitEntry{}, map[threadFit]fitEntry{}
	}
	m.sweep(now)
	if f.limit > 0 {
		m.limits[replicaFit{project, model, replica}] = fitEntry{limit: f.limit, at: now}
	}
	if f.ratio > 0 {
		m.ratios[threadFit{project, thread, model}] = fitEntry{ratio: f.ratio, at: now}
	}
}

// rated keeps what the engine counted of a request of a thread it
// answered as the thread's rate: when a rate of the thread is
// remembered, or the context of the replica that answered (the thread
// is fitted to it); else nothing is kept.
func (m *fitMemory) rated(project, thread, model, replica string, ratio float64) {
	if ratio <= 0 {
		return
	}
	k := threadFit{project, thread, model}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	r, rated := m.ratios[k]
	l, limited := m.limits[replicaFit{project, model, replica}]
	// A rate or limit past engineFitTTL is forgotten, swept or not.
	if rated && now.Sub(r.at) <= engineFitTTL || limited && now.Sub(l.at) <= engineFitTTL {
		m.ratios[k] = fitEntry{ratio: ratio, at: now}
	}
	// Each new thread answered by a replica whose context is known adds
	// a rate, with no refusal (learn) to sweep them.
	m.sweep(now)
}

// limitOf returns the context a replica's engine named to the project.
func (m *fitMemory) limitOf(project, model, replica string) (int, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.limits[replicaFit{project, model, replica}]
	if !ok || time.Since(e.at) > engineFitTTL {
		return 0, false
	}
	return e.limit, true
}

// ratioOf returns a thread's rate on a model, 1 when none is known.
func (m *fitMemory) ratioOf(project, thread, model string) (float64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.ratios[threadFit{project, thread, model}]
	if !ok || time.Since(e.at) > engineFitTTL {
		return 1, false
	}
	return e.ratio, true
}

// sweep drops what is past engineFitTTL, at most once per TTL.
func (m *fitMemory) sweep(now time.Time) {
	if now.Sub(m.swept) < engineFitTTL {
		return
	}
	m.swept = now
	for k, e := range m.limits {
		if now.Sub(e.at) > engineFitTTL {
			delete(m.limits, k)
		}
	}
	for k, e := range m.ratios {
		if now.Sub(e.at) > engineFitTTL {
			delete(m.ratios, k)
		}
	}
}
