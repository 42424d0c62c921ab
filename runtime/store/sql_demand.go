package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// PutDemand upserts name's record with the database's now.
func (s *sqlStore) PutDemand(ctx context.Context, name, instance, value string) error {
	if name == "" || instance == "" {
		return errors.New("recording demand: name and instance are required")
	}
	_, err := s.exec(ctx, s.nowSQL(`INSERT INTO control_plane_demand (name, instance, value, updated_at) VALUES (?, ?, ?, NOW)
		ON CONFLICT (name) DO UPDATE SET instance = excluded.instance, value = excluded.value, updated_at = excluded.updated_at`),
		name, instance, value)
	if err != nil {
		return fmt.Errorf("recording the demand of control plane %q: %w", name, err)
	}
	return nil
}

// ListDemand returns every record with its age by the database's clock.
func (s *sqlStore) ListDemand(ctx context.Context) ([]PeerDemand, error) {
	return queryAll(ctx, s, "listing control planes' demand", s.nowSQL(`SELECT name, instance, value, updated_at, NOW
		FROM control_plane_demand ORDER BY name`), func(r scanner) (PeerDemand, error) {
		var d PeerDemand
		var updated, now int64
		err := r.Scan(&d.Name, &d.Instance, &d.Value, &updated, &now)
		d.UpdatedAt = fromDB(updated)
		d.Age = fromDB(now).Sub(d.UpdatedAt)
		return d, err
	})
}

// DeleteDemand removes name's record if instance wrote it.
func (s *sqlStore) DeleteDemand(ctx context.Context, name, instance string) error {
	if _, err := s.exec(ctx, `DELETE FROM control_plane_demand WHERE name = ? AND instance = ?`, name, instance); err != nil {
		return fmt.Errorf("removing the demand of control plane %q: %w", name, err)
	}
	return nil
}

// PruneDemand removes the records older than olderThan in one statement,
// so a record rewritten meanwhile is not removed.
func (s *sqlStore) PruneDemand(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan <= 0 {
		return 0, fmt.Errorf("pruning control planes' demand: the age must be positive, not %s", olderThan)
	}
	res, err := s.exec(ctx, s.nowSQL(`DELETE FROM control_plane_demand WHERE updated_at < NOW - ?`), olderThan.Microseconds())
	if err != nil {
		return 0, fmt.Errorf("pruning control planes' demand: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("pruning control planes' demand: %w", err)
	}
	return n, nil
}
