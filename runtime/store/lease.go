package store

import (
	"context"
	"errors"
	"time"
)

// ErrFenced means a write was refused because the fencing token it carried
// is no longer the current holder's: another control plane took the lease,
// or it expired. The writer must stop acting for the fleet.
var ErrFenced = errors.New("fenced: this control plane no longer holds the leader lease")

// FleetLease is the name of the lease whose holder owns the fleet: the
// reconciler, placement, the agents' sessions.
const FleetLease = "fleet"

// Lease is a leader lease as the store holds it. Times are the database's.
type Lease struct {
	Name string
	// Holder is the control plane's name (ha.name); Instance tells its
	// processes apart (a restarted control plane is a new instance).
	Holder   string
	Instance string
	// Token is the fencing token: one more every time the holding instance
	// changes. Writes made for the fleet carry it and are refused once it
	// is no longer current.
	Token int64
	// The holder's advertised addresses.
	AgentAddr, ClientAddr, ManageAddr string
	AcquiredAt, RenewedAt, ExpiresAt  time.Time
	// Now is the database's clock when the lease was read.
	Now time.Time
}

// Valid reports whether the lease had not expired when it was read.
func (l Lease) Valid() bool { return l.Now.Before(l.ExpiresAt) }

// LeaseClaim is a control plane's bid for (or renewal of) a lease.
type LeaseClaim struct {
	Name, Holder, Instance            string
	AgentAddr, ClientAddr, ManageAddr string
	// TTL is how long the lease lasts from the database's now.
	TTL time.Duration
}

// ControlPlane is one control plane that runs on this store.
type ControlPlane struct {
	Name, Instance, Version           string
	AgentAddr, ClientAddr, ManageAddr string
	StartedAt, SeenAt                 time.Time
}

// FleetState is one value the leader wrote for the fleet.
type FleetState struct {
	Value     string
	Token     int64
	UpdatedAt time.Time
}

// LeaseStore coordinates control planes sharing one store.
type LeaseStore interface {
	// AcquireLease takes the lease when it is free, expired, or held by
	// the same holder name (a restarted control plane), and renews it when
	// the claiming instance holds it. It returns the lease as it stands
	// afterwards and whether the claimant holds it.
	AcquireLease(ctx context.Context, c LeaseClaim) (Lease, bool, error)
	// GetLease returns the lease or an error wrapping ErrNotFound when it
	// was never taken.
	GetLease(ctx context.Context, name string) (Lease, error)
	// ReleaseLease ends the lease now if instance holds it with token (a
	// control plane stopping cleanly), so a standby need not wait for it
	// to expire.
	ReleaseLease(ctx context.Context, name, instance string, token int64) error

	// SeeControlPlane records that a control plane is running.
	SeeControlPlane(ctx context.Context, cp ControlPlane) error
	// ListControlPlanes returns every control plane seen, by name.
	ListControlPlanes(ctx context.Context) ([]ControlPlane, error)

	// PutFleetState writes key under the fleet lease's token; it returns an
	// error wrapping ErrFenced unless token is the current token of an
	// unexpired fleet lease.
	PutFleetState(ctx context.Context, token int64, key, value string) error
	// GetFleetState returns a value the leader wrote, or an error wrapping
	// ErrNotFound.
	GetFleetState(ctx context.Context, key string) (FleetState, error)
	// SetNodeDrain records (or, with draining false, clears) an operator's
	// drain of a node, fenced as PutFleetState.
	SetNodeDrain(ctx context.Context, token int64, node string, draining bool) error
	// ListNodeDrains returns the drained nodes, by name.
	ListNodeDrains(ctx context.Context) ([]string, error)
}
