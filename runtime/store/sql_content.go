package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

func checkKind(kind string) error {
	if kind != ContentThreads && kind != ContentMemory {
		return fmt.Errorf("content kind %q is not one of %s, %s", kind, ContentThreads, ContentMemory)
	}
	return nil
}

// SetRetention sets a project's retention for one kind of content.
func (s *sqlStore) SetRetention(ctx context.Context, project, kind string, hours int) error {
	if err := checkKind(kind); err != nil {
		return fmt.Errorf("setting retention of project %q: %w", project, err)
	}
	if hours < 0 {
		return fmt.Errorf("setting %s retention of project %q: hours must not be negative, got %d", kind, project, hours)
	}
	err := s.inProjectTx(ctx, project, func(tx *sql.Tx) error {
		var one int
		if err := tx.QueryRowContext(ctx, s.d.rebind(`SELECT 1 FROM projects WHERE name = ?`), project).Scan(&one); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return ErrNotFound
			}
			return err
		}
		if hours == 0 {
			_, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM content_retention WHERE project = ? AND kind = ?`), project, kind)
			return err
		}
		_, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO content_retention (project, kind, retain_hours, updated_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (project, kind) DO UPDATE SET retain_hours = excluded.retain_hours, updated_at = excluded.updated_at`),
			project, kind, hours, toDB(s.now()))
		return err
	})
	if err != nil {
		return fmt.Errorf("setting %s retention of project %q: %w", kind, project, err)
	}
	return nil
}

// Retention returns a project's retention for one kind, 0 when off.
func (s *sqlStore) Retention(ctx context.Context, project, kind string) (int, error) {
	var hours int
	err := s.queryRow(ctx, `SELECT retain_hours FROM content_retention WHERE project = ? AND kind = ?`, project, kind).Scan(&hours)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading %s retention of project %q: %w", kind, project, err)
	}
	return hours, nil
}

// PutResponse stores a response.
func (s *sqlStore) PutResponse(ctx context.Context, r StoredResponse) error {
	if r.CreatedAt.IsZero() {
		r.CreatedAt = s.now()
	}
	_, err := s.exec(ctx, `INSERT INTO stored_responses (project, id, model, body, history, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		r.Project, r.ID, r.Model, string(r.Body), string(r.History), toDB(r.CreatedAt), toDB(r.ExpiresAt))
	if err != nil {
		if s.d.isUniqueViolation(err) {
			err = ErrAlreadyExists
		}
		return fmt.Errorf("storing response %q: %w", r.ID, err)
	}
	return nil
}

// GetResponse returns a project's unexpired response.
func (s *sqlStore) GetResponse(ctx context.Context, project, id string, now time.Time) (StoredResponse, error) {
	r := StoredResponse{Project: project, ID: id}
	var body, history string
	var created, expires int64
	err := s.queryRow(ctx, `SELECT model, body, history, created_at, expires_at FROM stored_responses
		WHERE project = ? AND id = ? AND expires_at > ?`, project, id, toDB(now)).Scan(&r.Model, &body, &history, &created, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return StoredResponse{}, fmt.Errorf("getting response %q: %w", id, err)
	}
	r.Body, r.History, r.CreatedAt, r.ExpiresAt = []byte(body), []byte(history), fromDB(created), fromDB(expires)
	return r, nil
}

// DeleteResponse deletes a project's response.
func (s *sqlStore) DeleteResponse(ctx context.Context, project, id string) error {
	if err := requireRow(s.exec(ctx, `DELETE FROM stored_responses WHERE project = ? AND id = ?`, project, id)); err != nil {
		return fmt.Errorf("deleting response %q: %w", id, err)
	}
	return nil
}

// PruneContent deletes expired content and the content of kinds turned
// off.
func (s *sqlStore) PruneContent(ctx context.Context, now time.Time) (int64, error) {
	res, err := s.exec(ctx, `DELETE FROM stored_responses WHERE expires_at <= ?
		OR project NOT IN (SELECT project FROM content_retention WHERE kind = ?)`, toDB(now), ContentThreads)
	if err != nil {
		return 0, fmt.Errorf("pruning stored responses: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("pruning stored responses: %w", err)
	}
	return n, nil
}
