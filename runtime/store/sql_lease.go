package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// now replaces NOW in a lease query with the dialect's clock.
func (s *sqlStore) nowSQL(query string) string {
	return strings.ReplaceAll(query, "NOW", s.d.nowMicros)
}

const leaseColumns = `name, holder, instance, token, agent_addr, client_addr, manage_addr, acquired_at, renewed_at, expires_at`

// AcquireLease takes, renews or fails to take the lease in one statement:
// the upsert's WHERE decides, so two claimants racing cannot both win. Only
// the instance holding the lease renews it; any other, even one with the
// holder's name, takes it only once it has expired (or was released).
func (s *sqlStore) AcquireLease(ctx context.Context, c LeaseClaim) (Lease, bool, error) {
	if c.Name == "" || c.Holder == "" || c.Instance == "" {
		return Lease{}, false, errors.New("acquiring lease: name, holder and instance are required")
	}
	if c.TTL <= 0 {
		return Lease{}, false, fmt.Errorf("acquiring lease %q: the TTL must be positive", c.Name)
	}
	q := s.nowSQL(`INSERT INTO leader_leases (` + leaseColumns + `)
		VALUES (?, ?, ?, 1, ?, ?, ?, NOW, NOW, NOW + ?)
		ON CONFLICT (name) DO UPDATE SET
			token = CASE WHEN leader_leases.instance = excluded.instance THEN leader_leases.token ELSE leader_leases.token + 1 END,
			acquired_at = CASE WHEN leader_leases.instance = excluded.instance THEN leader_leases.acquired_at ELSE excluded.acquired_at END,
			holder = excluded.holder, instance = excluded.instance,
			agent_addr = excluded.agent_addr, client_addr = excluded.client_addr, manage_addr = excluded.manage_addr,
			renewed_at = excluded.renewed_at, expires_at = excluded.expires_at
		WHERE leader_leases.instance = excluded.instance OR leader_leases.expires_at <= excluded.renewed_at
		RETURNING ` + leaseColumns + `, NOW`)
	l, err := scanLease(s.queryRowW(ctx, q, c.Name, c.Holder, c.Instance, c.AgentAddr, c.ClientAddr, c.ManageAddr, c.TTL.Microseconds()))
	if errors.Is(err, sql.ErrNoRows) {
		cur, gerr := s.GetLease(ctx, c.Name)
		if gerr != nil {
			return Lease{}, false, gerr
		}
		return cur, false, nil
	}
	if err != nil {
		return Lease{}, false, fmt.Errorf("acquiring lease %q: %w", c.Name, err)
	}
	return l, true, nil
}

func scanLease(r scanner) (Lease, error) {
	var l Lease
	var acquired, renewed, expires, now int64
	if err := r.Scan(&l.Name, &l.Holder, &l.Instance, &l.Token, &l.AgentAddr, &l.ClientAddr, &l.ManageAddr, &acquired, &renewed, &expires, &now); err != nil {
		return Lease{}, err
	}
	l.AcquiredAt, l.RenewedAt, l.ExpiresAt, l.Now = fromDB(acquired), fromDB(renewed), fromDB(expires), fromDB(now)
	return l, nil
}

// GetLease reads the lease through the writer, so that it is current.
func (s *sqlStore) GetLease(ctx context.Context, name string) (Lease, error) {
	l, err := scanLease(s.queryRowW(ctx, s.nowSQL(`SELECT `+leaseColumns+`, NOW FROM leader_leases WHERE name = ?`), name))
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return Lease{}, fmt.Errorf("reading lease %q: %w", name, err)
	}
	return l, nil
}

// ReleaseLease expires the lease now if instance still holds it.
func (s *sqlStore) ReleaseLease(ctx context.Context, name, instance string, token int64) error {
	_, err := s.exec(ctx, s.nowSQL(`UPDATE leader_leases SET expires_at = NOW WHERE name = ? AND instance = ? AND token = ?`), name, instance, token)
	if err != nil {
		return fmt.Errorf("releasing lease %q: %w", name, err)
	}
	return nil
}

// SeeControlPlane upserts a control plane's row with the database's now.
func (s *sqlStore) SeeControlPlane(ctx context.Context, cp ControlPlane) error {
	if cp.Name == "" {
		return errors.New("recording control plane: empty name")
	}
	_, err := s.exec(ctx, s.nowSQL(`INSERT INTO control_planes (name, instance, version, agent_addr, client_addr, manage_addr, started_at, seen_at)
		VALUES (?, ?, ?, ?, ?, ?, NOW, NOW)
		ON CONFLICT (name) DO UPDATE SET
			started_at = CASE WHEN control_planes.instance = excluded.instance THEN control_planes.started_at ELSE excluded.started_at END,
			instance = excluded.instance, version = excluded.version, agent_addr = excluded.agent_addr,
			client_addr = excluded.client_addr, manage_addr = excluded.manage_addr, seen_at = excluded.seen_at`),
		cp.Name, cp.Instance, cp.Version, cp.AgentAddr, cp.ClientAddr, cp.ManageAddr)
	if err != nil {
		return fmt.Errorf("recording control plane %q: %w", cp.Name, err)
	}
	return nil
}

// ListControlPlanes returns every control plane seen.
func (s *sqlStore) ListControlPlanes(ctx context.Context) ([]ControlPlane, error) {
	return queryAll(ctx, s, "listing control planes", `SELECT name, instance, version, agent_addr, client_addr, manage_addr, started_at, seen_at
		FROM control_planes ORDER BY name`, func(r scanner) (ControlPlane, error) {
		var cp ControlPlane
		var started, seen int64
		err := r.Scan(&cp.Name, &cp.Instance, &cp.Version, &cp.AgentAddr, &cp.ClientAddr, &cp.ManageAddr, &started, &seen)
		cp.StartedAt, cp.SeenAt = fromDB(started), fromDB(seen)
		return cp, err
	})
}

// fenced runs write in a transaction that first checks, and on PostgreSQL
// locks against a takeover until it commits, that token is the fleet
// lease's current token and the lease has not expired.
func (s *sqlStore) fenced(ctx context.Context, what string, token int64, write func(tx *sql.Tx) error) (err error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%s: beginning transaction: %w", what, err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, rollback(tx))
		}
	}()
	var current int64
	err = tx.QueryRowContext(ctx, s.d.rebind(s.nowSQL(`SELECT token FROM leader_leases WHERE name = ? AND expires_at > NOW`+s.d.forShare)), FleetLease).Scan(&current)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("%s: %w (the lease expired)", what, ErrFenced)
	case err != nil:
		return fmt.Errorf("%s: reading the lease: %w", what, err)
	case current != token:
		return fmt.Errorf("%s: %w (token %d, current %d)", what, ErrFenced, token, current)
	}
	if err := write(tx); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%s: committing: %w", what, err)
	}
	return nil
}

// PutFleetState writes key under token; a row written under a newer token
// is never overwritten.
func (s *sqlStore) PutFleetState(ctx context.Context, token int64, key, value string) error {
	if key == "" {
		return errors.New("writing fleet state: empty key")
	}
	return s.fenced(ctx, "writing fleet state "+key, token, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.d.rebind(s.nowSQL(`INSERT INTO fleet_state (key, token, value, updated_at) VALUES (?, ?, ?, NOW)
			ON CONFLICT (key) DO UPDATE SET token = excluded.token, value = excluded.value, updated_at = excluded.updated_at
			WHERE fleet_state.token <= excluded.token`)), key, token, value)
		return err
	})
}

// GetFleetState reads a value the leader wrote.
func (s *sqlStore) GetFleetState(ctx context.Context, key string) (FleetState, error) {
	var fs FleetState
	var updated int64
	err := s.queryRow(ctx, `SELECT value, token, updated_at FROM fleet_state WHERE key = ?`, key).Scan(&fs.Value, &fs.Token, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return FleetState{}, fmt.Errorf("reading fleet state %q: %w", key, err)
	}
	fs.UpdatedAt = fromDB(updated)
	return fs, nil
}

// SetNodeDrain records or clears a drain under token.
func (s *sqlStore) SetNodeDrain(ctx context.Context, token int64, node string, draining bool) error {
	if err := checkName("node", node); err != nil {
		return fmt.Errorf("recording drain: %w", err)
	}
	return s.fenced(ctx, "recording the drain of node "+node, token, func(tx *sql.Tx) error {
		var err error
		if draining {
			_, err = tx.ExecContext(ctx, s.d.rebind(s.nowSQL(`INSERT INTO node_drains (node, token, updated_at) VALUES (?, ?, NOW)
				ON CONFLICT (node) DO UPDATE SET token = excluded.token, updated_at = excluded.updated_at`)), node, token)
		} else {
			_, err = tx.ExecContext(ctx, s.d.rebind(`DELETE FROM node_drains WHERE node = ?`), node)
		}
		return err
	})
}

// ListNodeDrains returns the drained nodes.
func (s *sqlStore) ListNodeDrains(ctx context.Context) ([]string, error) {
	return queryAll(ctx, s, "listing drained nodes", `SELECT node FROM node_drains ORDER BY node`, func(r scanner) (string, error) {
		var n string
		err := r.Scan(&n)
		return n, err
	})
}
