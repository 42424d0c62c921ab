package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
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
	if hours < 0 || hours > MaxRetainHours {
		return fmt.Errorf("setting %s retention of project %q: hours must be from 0 to %d (ten years), got %d", kind, project, MaxRetainHours, hours)
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

// live is the condition under which a row of table, last written at its
// column written, may still be read at the time given as the query's next
// argument: before its expires_at, and within its project's current
// retention for kind from that write. So a retention cut short ends
// access to what was written under the longer one, and a kind turned
// off (no retention row) ends it at once, before the prune deletes it.
func live(table, written, kind string) string {
	return `(` + table + `.expires_at > ? AND EXISTS (SELECT 1 FROM content_retention
		WHERE content_retention.project = ` + table + `.project AND content_retention.kind = '` + kind + `'
		AND ` + table + `.` + written + ` + content_retention.retain_hours * 3600000000 > ?))`
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
		WHERE project = ? AND id = ? AND `+live("stored_responses", "created_at", ContentThreads), project, id, toDB(now), toDB(now)).Scan(&r.Model, &body, &history, &created, &expires)
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

// GetThread returns a project's unexpired thread.
func (s *sqlStore) GetThread(ctx context.Context, project, id string, now time.Time) (Thread, error) {
	var msgs, key string
	var th Thread
	var updated int64
	err := s.queryRow(ctx, `SELECT messages, revision, updated_at, turn_key FROM threads WHERE project = ? AND id = ? AND `+live("threads", "updated_at", ContentThreads),
		project, id, toDB(now), toDB(now)).Scan(&msgs, &th.Revision, &updated, &key)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return Thread{}, fmt.Errorf("getting thread %q: %w", id, err)
	}
	th.Messages, th.TurnKey = []byte(msgs), turnKeyOf(key, th.Revision, updated)
	return th, nil
}

// storedTurnKey is a turn's key as the row keeps it: with the revision
// and updated_at of the write that stored the turn, so that a later
// write that leaves turn_key as it was (an older release's, which
// knows no turn_key, during a rolling upgrade; the one before migration
// 0010 leaves revision too, but never updated_at) does not pass that
// key on to a turn it stored.
func storedTurnKey(key string, revision, updated int64) string {
	if key == "" {
		return ""
	}
	return turnKeyPrefix(revision, updated) + key
}

func turnKeyPrefix(revision, updated int64) string {
	return strconv.FormatInt(revision, 10) + ":" + strconv.FormatInt(updated, 10) + ":"
}

// turnKeyOf is the key the row's last turn was stored with: stored's,
// when the write that stored it is the row's last (its revision and
// updated_at are the row's); else "".
func turnKeyOf(stored string, revision, updated int64) string {
	if key, ok := strings.CutPrefix(stored, turnKeyPrefix(revision, updated)); ok {
		return key
	}
	return ""
}

// ThreadSize returns the byte size of a project's unexpired thread:
// octet_length (PostgreSQL, and SQLite from 3.43) reads the length a
// stored value carries, not the value (neither SQLite's overflow pages
// nor PostgreSQL's TOAST chunks), so it costs one small row read
// whatever the thread's size.
func (s *sqlStore) ThreadSize(ctx context.Context, project, id string, now time.Time) (int64, error) {
	var n int64
	err := s.queryRow(ctx, `SELECT octet_length(messages) FROM threads WHERE project = ? AND id = ? AND `+live("threads", "updated_at", ContentThreads),
		project, id, toDB(now), toDB(now)).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return 0, fmt.Errorf("sizing thread %q: %w", id, err)
	}
	return n, nil
}

// newRevision is a thread's revision after a write: random, so a thread
// deleted and begun again never comes back to a revision a reader holds.
func newRevision() int64 { return rand.Int64N(math.MaxInt64-1) + 1 }

// PutThread stores a thread if it is at revision prev (0: there is no
// live thread of that id, though a dead row not yet pruned may be
// there, which the write replaces; or the live row is at revision 0,
// as one an older release wrote during a rolling upgrade, which reads as
// revision 0 and is written over the same way: this release never
// writes 0, so two first writes still cannot both land).
func (s *sqlStore) PutThread(ctx context.Context, project, id string, messages []byte, expires time.Time, prev int64, turnKey string) (int64, error) {
	rev, now := newRevision(), toDB(s.now())
	var res sql.Result
	var err error
	if prev == 0 {
		res, err = s.exec(ctx, `INSERT INTO threads (project, id, messages, updated_at, expires_at, revision, turn_key) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (project, id) DO UPDATE SET messages = excluded.messages, updated_at = excluded.updated_at,
			expires_at = excluded.expires_at, revision = excluded.revision, turn_key = excluded.turn_key
			WHERE threads.revision = 0 OR NOT `+live("threads", "updated_at", ContentThreads),
			project, id, string(messages), now, toDB(expires), rev, storedTurnKey(turnKey, rev, now), now, now)
	} else {
		res, err = s.exec(ctx, `UPDATE threads SET messages = ?, updated_at = ?, expires_at = ?, revision = ?, turn_key = ?
			WHERE project = ? AND id = ? AND revision = ?`,
			string(messages), now, toDB(expires), rev, storedTurnKey(turnKey, rev, now), project, id, prev)
	}
	if err = requireRow(res, err); errors.Is(err, ErrNotFound) {
		err = ErrConflict
	}
	if err != nil {
		return 0, fmt.Errorf("storing thread %q: %w", id, err)
	}
	return rev, nil
}

// DeleteThread deletes a project's thread.
func (s *sqlStore) DeleteThread(ctx context.Context, project, id string) error {
	if err := requireRow(s.exec(ctx, `DELETE FROM threads WHERE project = ? AND id = ?`, project, id)); err != nil {
		return fmt.Errorf("deleting thread %q: %w", id, err)
	}
	return nil
}

// PutNote creates a note or replaces its text.
func (s *sqlStore) PutNote(ctx context.Context, n Note) error {
	now := s.now()
	if n.CreatedAt.IsZero() {
		n.CreatedAt = now
	}
	if n.UpdatedAt.IsZero() {
		n.UpdatedAt = now
	}
	_, err := s.exec(ctx, `INSERT INTO memory_notes (project, agent, id, text, created_at, updated_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (project, agent, id) DO UPDATE SET text = excluded.text, updated_at = excluded.updated_at, expires_at = excluded.expires_at`,
		n.Project, n.Agent, n.ID, n.Text, toDB(n.CreatedAt), toDB(n.UpdatedAt), toDB(n.ExpiresAt))
	if err != nil {
		return fmt.Errorf("storing note %q: %w", n.ID, err)
	}
	return nil
}

// SearchNotes returns an agent's unexpired notes holding every word of
// query.
func (s *sqlStore) SearchNotes(ctx context.Context, project, agent, query string, now time.Time, limit int) ([]Note, error) {
	if limit <= 0 {
		limit = 20
	}
	q := `SELECT id, text, created_at, updated_at, expires_at FROM memory_notes WHERE project = ? AND agent = ? AND ` +
		live("memory_notes", "updated_at", ContentMemory)
	args := []any{project, agent, toDB(now), toDB(now)}
	for _, w := range strings.Fields(strings.ToLower(query)) {
		q += ` AND LOWER(text) LIKE ? ESCAPE '\'`
		args = append(args, "%"+likeEscaper.Replace(w)+"%")
	}
	q += ` ORDER BY updated_at DESC, id LIMIT ?`
	args = append(args, limit)
	return queryAll(ctx, s, "searching notes", q, func(r scanner) (Note, error) {
		n := Note{Project: project, Agent: agent}
		var created, updated, expires int64
		err := r.Scan(&n.ID, &n.Text, &created, &updated, &expires)
		n.CreatedAt, n.UpdatedAt, n.ExpiresAt = fromDB(created), fromDB(updated), fromDB(expires)
		return n, err
	}, args...)
}

// SaveNote stores a note within caps: the count and the write in one
// transaction holding the lock on the project's notes (PostgreSQL; on
// SQLite the one writer connection serialises them).
func (s *sqlStore) SaveNote(ctx context.Context, n Note, caps NoteCaps) (Note, error) {
	if n.UpdatedAt.IsZero() {
		n.UpdatedAt = s.now()
	}
	if n.CreatedAt.IsZero() {
		n.CreatedAt = n.UpdatedAt
	}
	err := s.inLockedTx(ctx, "notes:"+n.Project, func(tx *sql.Tx) error {
		at := toDB(n.UpdatedAt)
		// One read gives whether a live note is replaced and what is
		// held. Replacing one adds nothing: no cap refuses it, even one
		// lowered below what is held.
		var replacing, mine, all int
		err := tx.QueryRowContext(ctx, s.d.rebind(`SELECT COALESCE(SUM(CASE WHEN agent = ? AND id = ? THEN 1 ELSE 0 END), 0),
			COALESCE(SUM(CASE WHEN agent = ? THEN 1 ELSE 0 END), 0), COUNT(*) FROM memory_notes
			WHERE project = ? AND `+live("memory_notes", "updated_at", ContentMemory)),
			n.Agent, n.ID, n.Agent, n.Project, at, at).Scan(&replacing, &mine, &all)
		if err != nil {
			return fmt.Errorf("counting notes: %w", err)
		}
		if replacing == 0 {
			if caps.PerAgent > 0 && mine >= caps.PerAgent {
				return &NoteCapError{Project: n.Project, Agent: n.Agent, PerAgent: true, Held: mine, Cap: caps.PerAgent}
			}
			if caps.PerProject > 0 && all >= caps.PerProject {
				return &NoteCapError{Project: n.Project, Agent: n.Agent, Held: all, Cap: caps.PerProject}
			}
		}
		var created int64
		err = tx.QueryRowContext(ctx, s.d.rebind(`INSERT INTO memory_notes (project, agent, id, text, created_at, updated_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (project, agent, id) DO UPDATE SET text = excluded.text, updated_at = excluded.updated_at, expires_at = excluded.expires_at,
			created_at = CASE WHEN `+live("memory_notes", "updated_at", ContentMemory)+` THEN memory_notes.created_at ELSE excluded.created_at END
			RETURNING created_at`),
			n.Project, n.Agent, n.ID, n.Text, toDB(n.CreatedAt), at, toDB(n.ExpiresAt), at, at).Scan(&created)
		if err != nil {
			return err
		}
		n.CreatedAt = fromDB(created)
		return nil
	})
	if err != nil {
		if _, ok := errors.AsType[*NoteCapError](err); ok {
			return Note{}, err
		}
		return Note{}, fmt.Errorf("storing note %q: %w", n.ID, err)
	}
	return n, nil
}

// CountNotes counts an agent's and its project's unexpired notes other
// than the agent's note except.
func (s *sqlStore) CountNotes(ctx context.Context, project, agent, except string, now time.Time) (int, int, error) {
	var mine, all int
	err := s.queryRow(ctx, `SELECT COALESCE(SUM(CASE WHEN agent = ? THEN 1 ELSE 0 END), 0), COUNT(*) FROM memory_notes
		WHERE project = ? AND NOT (agent = ? AND id = ?) AND `+live("memory_notes", "updated_at", ContentMemory),
		agent, project, agent, except, toDB(now), toDB(now)).Scan(&mine, &all)
	if err != nil {
		return 0, 0, fmt.Errorf("counting notes: %w", err)
	}
	return mine, all, nil
}

var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// DeleteNote deletes an agent's note.
func (s *sqlStore) DeleteNote(ctx context.Context, project, agent, id string) error {
	if err := requireRow(s.exec(ctx, `DELETE FROM memory_notes WHERE project = ? AND agent = ? AND id = ?`, project, agent, id)); err != nil {
		return fmt.Errorf("deleting note %q: %w", id, err)
	}
	return nil
}

// PruneContent deletes what reads no longer return (see live): content
// expired, past its project's current retention, or of a kind turned
// off.
func (s *sqlStore) PruneContent(ctx context.Context, now time.Time) (int64, error) {
	var total int64
	for _, p := range []struct{ table, written, kind string }{
		{"stored_responses", "created_at", ContentThreads}, {"threads", "updated_at", ContentThreads}, {"memory_notes", "updated_at", ContentMemory},
	} {
		res, err := s.exec(ctx, `DELETE FROM `+p.table+` WHERE NOT `+live(p.table, p.written, p.kind), toDB(now), toDB(now))
		if err != nil {
			return total, fmt.Errorf("pruning %s: %w", p.table, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("pruning %s: %w", p.table, err)
		}
		total += n
	}
	return total, nil
}
