package store

import (
	"context"
	"time"
)

// PeerDemand is what one control plane that does not lead last reported of
// the requests it serves (its client API's demand on each model), for the
// leader to count with its own. The store does not read Value.
type PeerDemand struct {
	// Name is the control plane's ha.name; Instance tells its processes
	// apart.
	Name, Instance string
	Value          string
	// UpdatedAt is when it was written and Age how long before the read,
	// both by the database's clock.
	UpdatedAt time.Time
	Age       time.Duration
}

// DemandStore holds what control planes that do not lead report of their
// requests, one record per control plane name.
type DemandStore interface {
	// PutDemand writes name's record (replacing the one before, whichever
	// instance wrote it), stamped with the database's now.
	PutDemand(ctx context.Context, name, instance, value string) error
	// ListDemand returns every record, by name, with its age.
	ListDemand(ctx context.Context) ([]PeerDemand, error)
	// DeleteDemand removes name's record if instance wrote it (a control
	// plane stopping cleanly).
	DeleteDemand(ctx context.Context, name, instance string) error
	// PruneDemand removes the records written more than olderThan ago by
	// the database's clock (control planes that died without removing
	// theirs) and returns how many it removed. A record rewritten
	// meanwhile is kept.
	PruneDemand(ctx context.Context, olderThan time.Duration) (int64, error)
}
