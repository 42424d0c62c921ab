package models

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	"github.com/llmgw/llmgw/spec"
)

// Reload makes the catalog's stored models what the store holds now: it
// adds and updates as Load does and also drops models deleted from the
// store. A standby control plane runs it periodically, since models are
// created and deleted through the leader. It reports whether anything
// changed, and notifies Changed only then.
func (r *Registry) Reload(ctx context.Context) (bool, error) {
	if r.store == nil {
		return false, nil
	}
	stored, err := r.store.ListModels(ctx)
	if err != nil {
		return false, fmt.Errorf("reloading stored models: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	next := map[string]Entry{}
	for name, e := range r.entries {
		if e.Origin == OriginConfig {
			next[name] = e
		}
	}
	for _, sm := range stored {
		if e, ok := next[sm.Name]; ok && e.Origin == OriginConfig {
			continue
		}
		if old, ok := r.entries[sm.Name]; ok && old.Origin == OriginAPI && old.Revision == sm.Revision {
			next[sm.Name] = old
			continue
		}
		e, err := storedEntry(sm.Spec, sm.Revision)
		if err != nil {
			r.log.Error("stored model unreadable, skipped", "model", sm.Name, "err", err)
			continue
		}
		next[e.Model.Name] = e
	}
	same := len(next) == len(r.entries)
	if same {
		for name, e := range next {
			old, ok := r.entries[name]
			if !ok || old.Origin != e.Origin || old.Revision != e.Revision {
				same = false
				break
			}
		}
	}
	if same {
		return false, nil
	}
	r.entries = maps.Clone(next)
	r.rebuildAliasesLocked()
	r.notify()
	return true, nil
}

// storedEntry decodes a stored model as Load does.
func storedEntry(specJSON []byte, revision int64) (Entry, error) {
	var m spec.Model
	if err := json.Unmarshal(specJSON, &m); err != nil {
		return Entry{}, err
	}
	m.Normalize()
	return NewEntry(m, OriginAPI, revision), nil
}
