package store_test

import (
	"database/sql"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/testkit/pgtest"
)

// olderSQLite and olderPostgres open a store and, beside it, a raw
// connection to the same database (an older release's statements), with
// the placeholder rewrite its dialect needs.
func olderSQLite(t *testing.T) (store.Store, *sql.DB, func(string) string) {
	path := filepath.Join(t.TempDir(), "llmgw.db")
	s := openSQLite(t, path)
	db, err := sql.Open("sqlite", path+"?_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return s, db, func(q string) string { return q }
}

func olderPostgres(t *testing.T) (store.Store, *sql.DB, func(string) string) {
	dsn := pgtest.NewDatabase(t)
	return openPostgres(t, dsn), rawPostgres(t, dsn), dollars
}

// TestThreadFromOlderRelease: a thread an older release wrote after
// this one migrated (a rolling upgrade: that release inserts without
// naming revision) is continued, not lost: the next write at the
// revision read lands, and one more at the same revision conflicts. A
// live row at revision 0 is written over by a first write (prev 0),
// once.
func TestThreadFromOlderRelease(t *testing.T) {
	for _, tt := range []struct {
		name string
		open func(t *testing.T) (store.Store, *sql.DB, func(string) string)
		// defaultRevision is what the older release's insert gets.
		defaultRevision int64
	}{
		{"sqlite", olderSQLite, 0},
		{"postgres", olderPostgres, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			s, db, q := tt.open(t)
			t.Cleanup(func() { s.Close() })
			if err := s.SetRetention(ctx, store.DefaultProject, store.ContentThreads, 24); err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			// The statement of the release before 0010.
			if _, err := db.ExecContext(ctx, q(`INSERT INTO threads (project, id, messages, updated_at, expires_at) VALUES (?, ?, ?, ?, ?)`),
				store.DefaultProject, "old", `[{"role":"user","content":"hello"}]`, now.UnixMicro(), now.Add(time.Hour).UnixMicro()); err != nil {
				t.Fatal(err)
			}
			th, err := s.GetThread(ctx, store.DefaultProject, "old", now)
			if err != nil || th.Revision != tt.defaultRevision {
				t.Fatalf("the older release's thread: revision %d, %v; want %d", th.Revision, err, tt.defaultRevision)
			}
			exp := now.Add(time.Hour)
			if _, err := s.PutThread(ctx, store.DefaultProject, "old", []byte(`[1]`), exp, th.Revision, ""); err != nil {
				t.Fatalf("writing the older release's thread at the revision read (%d): %v", th.Revision, err)
			}
			if _, err := s.PutThread(ctx, store.DefaultProject, "old", []byte(`[2]`), exp, th.Revision, ""); !errors.Is(err, store.ErrConflict) {
				t.Fatalf("a second write at revision %d: %v, want ErrConflict", th.Revision, err)
			}
			// A live row at 0, however it came there.
			if _, err := db.ExecContext(ctx, q(`INSERT INTO threads (project, id, messages, updated_at, expires_at, revision) VALUES (?, ?, ?, ?, ?, 0)`),
				store.DefaultProject, "zero", `[]`, now.UnixMicro(), exp.UnixMicro()); err != nil {
				t.Fatal(err)
			}
			if _, err := s.PutThread(ctx, store.DefaultProject, "zero", []byte(`[1]`), exp, 0, ""); err != nil {
				t.Fatalf("writing a live thread at revision 0: %v", err)
			}
			if _, err := s.PutThread(ctx, store.DefaultProject, "zero", []byte(`[2]`), exp, 0, ""); !errors.Is(err, store.ErrConflict) {
				t.Fatalf("a second first write: %v, want ErrConflict", err)
			}
			th, err = s.GetThread(ctx, store.DefaultProject, "zero", now)
			if err != nil || string(th.Messages) != `[1]` {
				t.Fatalf("thread after the writes: %s, %v", th.Messages, err)
			}
		})
	}
}

// dollars numbers a statement's ? placeholders for PostgreSQL.
func dollars(q string) string {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// TestThreadTurnKeyAfterOlderRelease: a turn's key is the thread's
// only while the write that stored it is the thread's last: an older
// release's write (a rolling upgrade: the statement of the release
// before 0010, which knows neither revision nor turn_key and leaves
// both as they were) stores another last turn, which must not pass for
// the keyed one (a retry with that key would replace it).
func TestThreadTurnKeyAfterOlderRelease(t *testing.T) {
	for _, tt := range []struct {
		name string
		open func(t *testing.T) (store.Store, *sql.DB, func(string) string)
	}{
		{"sqlite", olderSQLite},
		{"postgres", olderPostgres},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			s, db, q := tt.open(t)
			t.Cleanup(func() { s.Close() })
			if err := s.SetRetention(ctx, store.DefaultProject, store.ContentThreads, 24); err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			exp := now.Add(time.Hour)
			rev, err := s.PutThread(ctx, store.DefaultProject, "t", []byte(`["X","a"]`), exp, 0, "k1")
			if err != nil {
				t.Fatal(err)
			}
			if th, err := s.GetThread(ctx, store.DefaultProject, "t", now); err != nil || th.TurnKey != "k1" || th.Revision != rev {
				t.Fatalf("the keyed turn reads key %q at %d, %v; want k1 at %d", th.TurnKey, th.Revision, err, rev)
			}
			// The older release stores the same turn again, with its own
			// answer, a moment later.
			if _, err := db.ExecContext(ctx, q(`INSERT INTO threads (project, id, messages, updated_at, expires_at) VALUES (?, ?, ?, ?, ?)
				ON CONFLICT (project, id) DO UPDATE SET messages = excluded.messages, updated_at = excluded.updated_at, expires_at = excluded.expires_at`),
				store.DefaultProject, "t", `["X","a","X","b"]`, now.Add(time.Second).UnixMicro(), exp.UnixMicro()); err != nil {
				t.Fatal(err)
			}
			th, err := s.GetThread(ctx, store.DefaultProject, "t", now.Add(time.Second))
			if err != nil || string(th.Messages) != `["X","a","X","b"]` {
				t.Fatalf("the older release's write reads %s, %v", th.Messages, err)
			}
			if th.TurnKey != "" {
				t.Fatalf("after an older release stored the last turn the thread reads key %q, want none (that turn was stored without one)", th.TurnKey)
			}
			// And a write of this release without a key clears it too.
			if _, err := s.PutThread(ctx, store.DefaultProject, "t", []byte(`["Y"]`), exp, th.Revision, ""); err != nil {
				t.Fatal(err)
			}
			if th, err := s.GetThread(ctx, store.DefaultProject, "t", now.Add(time.Second)); err != nil || th.TurnKey != "" {
				t.Fatalf("after a write without a key the thread reads key %q, %v", th.TurnKey, err)
			}
		})
	}
}
