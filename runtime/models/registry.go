// Package models is the control plane's catalog at run time: the models
// declared in server.yaml (restored on every start, not editable through the
// API) merged with the models added through the management API (stored).
package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"

	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/spec"
)

// Origins of a catalog entry.
const (
	OriginConfig = "config"
	OriginAPI    = "api"
)

// Errors callers map to API status codes.
var (
	ErrNotFound      = errors.New("model not found")
	ErrAlreadyExists = errors.New("model already exists")
	ErrDeclarative   = errors.New("model is declared in server.yaml")
	ErrInvalid       = errors.New("invalid model")
	ErrConflict      = errors.New("model changed since it was read")
)

// Entry is one catalog model with where it came from.
type Entry struct {
	Model  spec.Model
	Origin string
	// Generation is spec.Generation: a hash over every profile's replica
	// generation, what RolloutModel and stall reports are keyed by.
	Generation string
	Revision   int64
	// generations is spec.ReplicaGeneration of each profile, by name, and
	// legacy spec.LegacyGeneration: what Stale compares a replica with.
	generations map[string]string
	legacy      string
}

// NewEntry is the catalog entry of a normalized model.
func NewEntry(m spec.Model, origin string, revision int64) Entry {
	return Entry{Model: m, Origin: origin, Generation: spec.Generation(m), Revision: revision,
		generations: spec.ReplicaGenerations(m), legacy: spec.LegacyGeneration(m)}
}

// ReplicaGeneration is what a replica placed now with profile is stamped
// with ("" for a profile the model does not have).
func (e Entry) ReplicaGeneration(profile string) string { return e.generations[profile] }

// Stale is spec.Stale of the model, from the hashes the entry keeps: a
// replica placed with profile and stamped with generation is built
// otherwise than the model now asks (its own profile's build fields, or
// the model's, changed, or the profile is gone). A replica stamped before
// generations were per replica is current while the model is exactly as it
// was placed.
func (e Entry) Stale(profile, generation string) bool {
	return spec.StaleStamp(e.generations[profile], e.legacy, generation)
}

// LegacyGeneration is spec.LegacyGeneration of the model: what a new
// replica's StartShard carries as model_generation, for a control plane of
// an earlier release that may lead later.
func (e Entry) LegacyGeneration() string { return e.legacy }

// Restamp returns the generation a live replica placed with profile and
// stamped with generation carries from now on, and true, when it carries
// the whole-model stamp of an earlier release (spec.LegacyGeneration) of
// exactly the current definition: it is current, and from then on only
// its own profile's build fields (or the model's) make it stale.
func (e Entry) Restamp(profile, generation string) (string, bool) {
	g, ok := e.generations[profile]
	if !ok || generation == g || generation != e.legacy {
		return "", false
	}
	return g, true
}

// Registry is the catalog. Safe for concurrent use; reads are cheap.
type Registry struct {
	store   store.ModelStore
	log     *slog.Logger
	mu      sync.RWMutex
	entries map[string]Entry
	aliases map[string]string // alias or name -> name
	// lookup is, by name and by alias, what the request path needs of
	// each model (Lookup); rebuilt with aliases, never changed in place.
	lookup  map[string]request.Model
	changed chan struct{}
}

// New returns a registry holding the declarative models. Call Load to add
// the stored ones.
func New(declared []spec.Model, st store.ModelStore, logger *slog.Logger) (*Registry, error) {
	if logger == nil {
		logger = slog.Default()
	}
	r := &Registry{store: st, log: logger.With("component", "catalog"), entries: map[string]Entry{}, changed: make(chan struct{}, 1)}
	for _, m := range declared {
		m = m.Clone()
		m.Normalize()
		if err := m.Validate(); err != nil {
			return nil, fmt.Errorf("model %q in server.yaml: %w", m.Name, err)
		}
		r.entries[m.Name] = NewEntry(m, OriginConfig, 1)
	}
	r.rebuildAliases()
	return r, nil
}

// Load reads the stored models. A stored model that clashes with a declared
// one is skipped with a warning: server.yaml wins.
func (r *Registry) Load(ctx context.Context) error {
	if r.store == nil {
		return nil
	}
	stored, err := r.store.ListModels(ctx)
	if err != nil {
		return fmt.Errorf("loading stored models: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, sm := range stored {
		var m spec.Model
		if err := json.Unmarshal(sm.Spec, &m); err != nil {
			r.log.Error("stored model unreadable, skipped", "model", sm.Name, "err", err)
			continue
		}
		m.Normalize()
		if e, ok := r.entries[m.Name]; ok && e.Origin == OriginConfig {
			r.log.Warn("stored model shadowed by server.yaml", "model", m.Name)
			continue
		}
		r.entries[m.Name] = NewEntry(m, OriginAPI, sm.Revision)
	}
	r.rebuildAliasesLocked()
	r.notify()
	return nil
}

// Changed is signalled (coalesced) when the catalog changes.
func (r *Registry) Changed() <-chan struct{} { return r.changed }

func (r *Registry) notify() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *Registry) rebuildAliases() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rebuildAliasesLocked()
}

func (r *Registry) rebuildAliasesLocked() {
	a := make(map[string]string, len(r.entries)*2)
	for name, e := range r.entries {
		a[name] = name
		for _, al := range e.Model.Aliases {
			if _, taken := a[al]; !taken {
				a[al] = name
			}
		}
	}
	r.aliases = a
	// One entry per name a client may send, made once here so a request's
	// Lookup copies nothing; Price and Aliases are shared, read only.
	terms := make(map[string]request.Model, len(r.entries))
	for name, e := range r.entries {
		m := request.Model{Name: name, Limits: request.Limits{MaxOutput: e.Model.MaxOutput, ContextLength: e.Model.ContextLength}}
		if e.Model.Pricing != nil {
			p := *e.Model.Pricing
			m.Price = &p
		}
		terms[name] = m
	}
	for al, name := range a {
		if al != name {
			m := terms[name]
			m.Aliases = append(m.Aliases, al)
			terms[name] = m
		}
	}
	for _, m := range terms {
		sort.Strings(m.Aliases)
	}
	l := make(map[string]request.Model, len(a))
	for al, name := range a {
		l[al] = terms[name]
	}
	r.lookup = l
}

// List returns every entry sorted by name.
func (r *Registry) List() []Entry {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Entry, 0, len(r.entries))
	for _, e := range r.entries {
		out = append(out, cloneEntry(e))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Model.Name < out[j].Model.Name })
	return out
}

func cloneEntry(e Entry) Entry {
	e.Model = e.Model.Clone()
	return e
}

// Get returns one entry by name.
func (r *Registry) Get(name string) (Entry, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.entries[name]
	if !ok {
		return Entry{}, false
	}
	return cloneEntry(e), true
}

// Terms returns what the request path needs of a model, without copying
// the rest: its own price (nil when it has none) and its limits
// (max_output, context_length; 0: unstated).
func (r *Registry) Terms(name string) (price *spec.Pricing, limits request.Limits, ok bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.entries[name]
	if !ok {
		return nil, request.Limits{}, false
	}
	if e.Model.Pricing != nil {
		p := *e.Model.Pricing
		price = &p
	}
	return price, request.Limits{MaxOutput: e.Model.MaxOutput, ContextLength: e.Model.ContextLength}, true
}

// Lookup resolves a model name or alias and returns, in one look, what the
// request path needs of the model: its canonical name, aliases, own price
// and limits. The gateway calls it once per request and carries the result
// (request.Info.Model), so admission, settlement and the usage record need
// not look again. Nothing is copied: the result's Price and Aliases are
// shared and must not be changed.
func (r *Registry) Lookup(name string) (request.Model, bool) {
	r.mu.RLock()
	m, ok := r.lookup[name]
	r.mu.RUnlock()
	return m, ok
}

// Resolve maps a model name or alias to the model's name.
func (r *Registry) Resolve(name string) (string, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	n, ok := r.aliases[name]
	return n, ok
}

// Create adds a model through the API and stores it.
func (r *Registry) Create(ctx context.Context, m spec.Model) (Entry, error) {
	return r.put(ctx, m, false, 0)
}

// Update replaces a model added through the API.
func (r *Registry) Update(ctx context.Context, m spec.Model) (Entry, error) {
	return r.put(ctx, m, true, 0)
}

// UpdateIf is Update refused with ErrConflict unless the stored model is
// at revision (0: no check).
func (r *Registry) UpdateIf(ctx context.Context, m spec.Model, revision int64) (Entry, error) {
	return r.put(ctx, m, true, revision)
}

func (r *Registry) put(ctx context.Context, m spec.Model, update bool, ifRevision int64) (Entry, error) {
	m = m.Clone()
	m.Normalize()
	if err := m.Validate(); err != nil {
		return Entry{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	cur, exists := r.entries[m.Name]
	switch {
	case exists && cur.Origin == OriginConfig:
		return Entry{}, fmt.Errorf("%w: %q is declared in server.yaml and can only be changed there", ErrDeclarative, m.Name)
	case exists && !update:
		return Entry{}, fmt.Errorf("%w: %q", ErrAlreadyExists, m.Name)
	case !exists && update:
		return Entry{}, fmt.Errorf("%w: %q", ErrNotFound, m.Name)
	case ifRevision != 0 && cur.Revision != ifRevision:
		return Entry{}, fmt.Errorf("%w: %q was read at revision %d and is now at revision %d; read it again and redo the change", ErrConflict, m.Name, ifRevision, cur.Revision)
	}
	others := make([]spec.Model, 0, len(r.entries))
	for name, e := range r.entries {
		if name != m.Name {
			others = append(others, e.Model)
		}
	}
	if err := spec.ValidateSet(append(others, m)); err != nil {
		return Entry{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	data, err := json.Marshal(m)
	if err != nil {
		return Entry{}, fmt.Errorf("encoding model %q: %w", m.Name, err)
	}
	rev := cur.Revision + 1
	if r.store != nil {
		if rev, err = r.store.PutModel(ctx, m.Name, data); err != nil {
			return Entry{}, fmt.Errorf("storing model %q: %w", m.Name, err)
		}
	}
	e := NewEntry(m, OriginAPI, rev)
	r.entries[m.Name] = e
	r.rebuildAliasesLocked()
	r.notify()
	return cloneEntry(e), nil
}

// Delete removes a model added through the API.
func (r *Registry) Delete(ctx context.Context, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur, ok := r.entries[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	if cur.Origin == OriginConfig {
		return fmt.Errorf("%w: %q is declared in server.yaml; remove it there", ErrDeclarative, name)
	}
	if r.store != nil {
		if err := r.store.DeleteModel(ctx, name); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("deleting model %q: %w", name, err)
		}
	}
	delete(r.entries, name)
	r.rebuildAliasesLocked()
	r.notify()
	return nil
}
