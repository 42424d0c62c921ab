package tenancy

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/llmgw/llmgw/runtime/store"
)

// projectInfo is what admission knows of a project: its settings and
// budgets, read from the store.
type projectInfo struct {
	project store.Project
	budgets []store.Budget
	expires time.Time
	// refreshing is true while a background read is under way.
	refreshing bool
}

// directory caches projects and their budgets. A project is read from the
// store the first time it is asked for; after the TTL the cached copy is
// still served while a fresh one is read in the background, so the request
// path waits on the store only once per project.
type directory struct {
	store Store
	ttl   time.Duration
	now   func() time.Time
	log   *slog.Logger

	mu      sync.Mutex
	entries map[string]*projectInfo
}

func newDirectory(st Store, ttl time.Duration, now func() time.Time, log *slog.Logger) *directory {
	return &directory{store: st, ttl: ttl, now: now, log: log, entries: map[string]*projectInfo{}}
}

// get returns the project's settings and budgets. A project missing from
// the store (deleted while a cached key still names it) has no limits of
// its own and no budgets.
func (d *directory) get(ctx context.Context, name string) (projectInfo, error) {
	now := d.now()
	d.mu.Lock()
	e := d.entries[name]
	if e != nil {
		info := *e
		if now.After(e.expires) && !e.refreshing {
			e.refreshing = true
			go d.refresh(name)
		}
		d.mu.Unlock()
		return info, nil
	}
	d.mu.Unlock()
	info, err := d.read(ctx, name)
	if err != nil {
		return projectInfo{}, err
	}
	d.mu.Lock()
	d.entries[name] = &info
	d.mu.Unlock()
	return info, nil
}

func (d *directory) read(ctx context.Context, name string) (projectInfo, error) {
	p, err := d.store.GetProject(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		p, err = store.Project{Name: name}, nil
	}
	if err != nil {
		return projectInfo{}, err
	}
	budgets, err := d.store.ListBudgets(ctx, name)
	if err != nil {
		return projectInfo{}, err
	}
	return projectInfo{project: p, budgets: budgets, expires: d.now().Add(d.ttl)}, nil
}

func (d *directory) refresh(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := d.read(ctx, name)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.log.Warn("refreshing project", "project", name, "err", err)
		if e := d.entries[name]; e != nil {
			e.refreshing = false
			e.expires = d.now().Add(d.ttl) // try again after another TTL
		}
		return
	}
	d.entries[name] = &info
}

// invalidate drops a project so the next request reads it afresh.
func (d *directory) invalidate(name string) {
	d.mu.Lock()
	delete(d.entries, name)
	d.mu.Unlock()
}

// cached returns a copy of every cached project.
func (d *directory) cached() []projectInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]projectInfo, 0, len(d.entries))
	for _, e := range d.entries {
		out = append(out, *e)
	}
	return out
}

// Invalidate makes admission read the project's settings and budgets again
// on its next request (the management API calls it after a change).
func (a *Admission) Invalidate(project string) { a.dir.invalidate(project) }
