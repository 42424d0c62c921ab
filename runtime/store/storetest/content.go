package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/store"
)

func testContentRetention(t *testing.T, s store.Store) {
	ctx := t.Context()
	if h, err := s.Retention(ctx, store.DefaultProject, store.ContentThreads); err != nil || h != 0 {
		t.Fatalf("retention of a project that never opted in: %d, %v; want 0 (off)", h, err)
	}
	if err := s.SetRetention(ctx, store.DefaultProject, store.ContentThreads, 24); err != nil {
		t.Fatal(err)
	}
	if err := s.SetRetention(ctx, store.DefaultProject, store.ContentThreads, 48); err != nil {
		t.Fatal(err)
	}
	if h, _ := s.Retention(ctx, store.DefaultProject, store.ContentThreads); h != 48 {
		t.Fatalf("threads retention %d, want 48", h)
	}
	if h, _ := s.Retention(ctx, store.DefaultProject, store.ContentMemory); h != 0 {
		t.Fatalf("memory retention %d, want 0: kinds are apart", h)
	}
	if err := s.SetRetention(ctx, "nobody", store.ContentThreads, 1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown project: %v, want ErrNotFound", err)
	}
	if err := s.SetRetention(ctx, store.DefaultProject, store.ContentThreads, store.MaxRetainHours+1); err == nil || !strings.Contains(err.Error(), "from 0 to 87600") {
		t.Fatalf("a retention past ten years: %v", err)
	}
	if err := s.SetRetention(ctx, store.DefaultProject, "diaries", 1); err == nil {
		t.Fatal("unknown kind accepted")
	}
	if err := s.SetRetention(ctx, store.DefaultProject, store.ContentThreads, 0); err != nil {
		t.Fatal(err)
	}
	if h, _ := s.Retention(ctx, store.DefaultProject, store.ContentThreads); h != 0 {
		t.Fatalf("retention after turning it off: %d", h)
	}
}

// testStoredResponses: a response is read back by its own project only,
// not after it expired, and the prune deletes what expired and what a
// project turned off.
func testStoredResponses(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, p := range []string{"a", "b"} {
		if err := s.CreateProject(ctx, store.Project{Name: p}); err != nil {
			t.Fatal(err)
		}
		if err := s.SetRetention(ctx, p, store.ContentThreads, 1); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	put := func(project, id string, expires time.Time) {
		t.Helper()
		err := s.PutResponse(ctx, store.StoredResponse{Project: project, ID: id, Model: "m", Body: []byte(`{"id":"` + id + `"}`),
			History: []byte(`[{"role":"user","content":"hi"}]`), CreatedAt: now, ExpiresAt: expires})
		if err != nil {
			t.Fatal(err)
		}
	}
	put("a", "resp_1", now.Add(time.Hour))
	put("a", "resp_old", now.Add(-time.Second))
	put("b", "resp_2", now.Add(time.Hour))
	if err := s.PutResponse(ctx, store.StoredResponse{Project: "a", ID: "resp_1", ExpiresAt: now}); !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("duplicate id: %v", err)
	}
	got, err := s.GetResponse(ctx, "a", "resp_1", now)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Body) != `{"id":"resp_1"}` || string(got.History) != `[{"role":"user","content":"hi"}]` || !got.CreatedAt.Equal(now) || got.Model != "m" {
		t.Fatalf("read back %+v", got)
	}
	for _, tt := range []struct{ project, id, why string }{
		{"b", "resp_1", "another project's"},
		{"a", "resp_old", "expired"},
		{"a", "resp_none", "unknown"},
	} {
		if _, err := s.GetResponse(ctx, tt.project, tt.id, now); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s response: %v, want ErrNotFound", tt.why, err)
		}
	}
	if err := s.DeleteResponse(ctx, "b", "resp_1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleting another project's response: %v", err)
	}
	// b turns threads off: its responses go at the prune, with a's expired one.
	if err := s.SetRetention(ctx, "b", store.ContentThreads, 0); err != nil {
		t.Fatal(err)
	}
	n, err := s.PruneContent(ctx, now)
	if err != nil || n != 2 {
		t.Fatalf("prune deleted %d, %v; want 2 (an expired one, a project turned off)", n, err)
	}
	if _, err := s.GetResponse(ctx, "a", "resp_1", now); err != nil {
		t.Fatalf("the prune took a live response: %v", err)
	}
	if err := s.DeleteResponse(ctx, "a", "resp_1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetResponse(ctx, "a", "resp_1", now); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
}

// testThreads: a thread is replaced whole at the revision it was read
// at, read by its own project only and not past its expiry, and pruned
// with its project's retention.
func testThreads(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, p := range []string{"a", "b"} {
		if err := s.CreateProject(ctx, store.Project{Name: p}); err != nil {
			t.Fatal(err)
		}
		if err := s.SetRetention(ctx, p, store.ContentThreads, 1); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	rev, err := s.PutThread(ctx, "a", "t1", []byte(`[1]`), now.Add(time.Hour), 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutThread(ctx, "a", "t1", []byte(`[9]`), now.Add(time.Hour), 0, ""); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a second thread begun over a live one: %v, want ErrConflict", err)
	}
	if got, err := s.GetThread(ctx, "a", "t1", now); err != nil || got.TurnKey != "" {
		t.Fatalf("a thread stored with no turn key reads %q, %v", got.TurnKey, err)
	}
	rev2, err := s.PutThread(ctx, "a", "t1", []byte(`[1,2]`), now.Add(2*time.Hour), rev, "k2")
	if err != nil || rev2 == rev || rev2 <= 0 {
		t.Fatalf("PutThread at its revision: %d (was %d), %v", rev2, rev, err)
	}
	if _, err := s.PutThread(ctx, "a", "t1", []byte(`[1,3]`), now.Add(2*time.Hour), rev, ""); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("PutThread at a revision written over: %v, want ErrConflict", err)
	}
	if _, err := s.PutThread(ctx, "b", "t1", []byte(`["bé"]`), now.Add(time.Hour), 0, "kb"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetThread(ctx, "a", "t1", now); err != nil || string(got.Messages) != `[1,2]` || got.Revision != rev2 || got.TurnKey != "k2" {
		t.Fatalf("GetThread = %s at %d, key %q, %v; want [1,2] at %d, key k2", got.Messages, got.Revision, got.TurnKey, err, rev2)
	}
	if n, err := s.ThreadSize(ctx, "a", "t1", now); err != nil || n != int64(len(`[1,2]`)) {
		t.Fatalf("ThreadSize = %d, %v; want %d", n, err, len(`[1,2]`))
	}
	if n, err := s.ThreadSize(ctx, "b", "t1", now); err != nil || n != int64(len(`["bé"]`)) {
		t.Fatalf("ThreadSize of another project's thread of the same id = %d, %v", n, err)
	}
	if _, err := s.ThreadSize(ctx, "a", "t1", now.Add(2*time.Hour)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ThreadSize of an expired thread: %v", err)
	}
	if _, err := s.ThreadSize(ctx, "a", "nope", now); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ThreadSize of an unknown thread: %v", err)
	}
	if got, err := s.GetThread(ctx, "b", "t1", now); err != nil || string(got.Messages) != `["bé"]` || got.TurnKey != "kb" {
		t.Fatalf("the same id in another project = %s, %v", got.Messages, err)
	}
	if _, err := s.GetThread(ctx, "a", "t1", now.Add(2*time.Hour)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("expired thread: %v", err)
	}
	if _, err := s.GetThread(ctx, "a", "nope", now); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown thread: %v", err)
	}
	if err := s.DeleteThread(ctx, "b", "t1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteThread(ctx, "b", "t1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleting twice: %v", err)
	}
	if _, err := s.GetThread(ctx, "a", "t1", now); err != nil {
		t.Fatalf("deleting b's thread took a's: %v", err)
	}
	if n, err := s.PruneContent(ctx, now.Add(3*time.Hour)); err != nil || n != 1 {
		t.Fatalf("prune after expiry: %d, %v", n, err)
	}
}

// testMemoryNotes: notes are private to project and agent, found by
// every word of a query, replaced by id, and gone after their expiry or
// when the project turns memory off.
func testMemoryNotes(t *testing.T, s store.Store) {
	ctx := t.Context()
	if err := s.SetRetention(ctx, store.DefaultProject, store.ContentMemory, 1); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	put := func(agent, id, text string, at time.Time) {
		t.Helper()
		if err := s.PutNote(ctx, store.Note{Project: store.DefaultProject, Agent: agent, ID: id, Text: text,
			CreatedAt: at, UpdatedAt: at, ExpiresAt: at.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	put("bot", "n1", "The deploy key lives in Vault", now)
	put("bot", "n2", "Prefer 50% less logging_noise", now.Add(time.Second))
	put("other", "n3", "deploy on fridays", now)
	ids := func(query string) string {
		t.Helper()
		notes, err := s.SearchNotes(ctx, store.DefaultProject, "bot", query, now.Add(2*time.Second), 0)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, n := range notes {
			out = append(out, n.ID)
		}
		return strings.Join(out, ",")
	}
	for q, want := range map[string]string{
		"":              "n2,n1",
		"deploy":        "n1",
		"VAULT deploy":  "n1",
		"deploy friday": "",
		"50%":           "n2",
		"g_n":           "n2",
		"%":             "n2",
		"_":             "n2",
	} {
		if got := ids(q); got != want {
			t.Errorf("search %q = %q, want %q", q, got, want)
		}
	}
	count := func(agent, except string, at time.Time) string {
		t.Helper()
		mine, all, err := s.CountNotes(ctx, store.DefaultProject, agent, except, at)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%d/%d", mine, all)
	}
	if n, o, x, e := count("bot", "", now), count("other", "", now), count("bot", "n1", now), count("bot", "", now.Add(2*time.Hour)); n != "2/3" || o != "1/3" || x != "1/2" || e != "0/0" {
		t.Errorf("CountNotes (agent/project): bot %s, other %s, bot but n1 %s, bot expired %s; want 2/3, 1/3, 1/2, 0/0", n, o, x, e)
	}
	put("bot", "n1", "the deploy key moved", now.Add(3*time.Second))
	if got := ids("vault"); got != "" {
		t.Errorf("replaced note still found by its old text: %q", got)
	}
	if err := s.DeleteNote(ctx, store.DefaultProject, "other", "n1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another agent deleted a note: %v", err)
	}
	if err := s.DeleteNote(ctx, store.DefaultProject, "bot", "n2"); err != nil {
		t.Fatal(err)
	}
	if notes, _ := s.SearchNotes(ctx, store.DefaultProject, "bot", "", now.Add(2*time.Hour), 0); len(notes) != 0 {
		t.Fatalf("expired notes found: %+v", notes)
	}
	if err := s.SetRetention(ctx, store.DefaultProject, store.ContentMemory, 0); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PruneContent(ctx, now); err != nil || n != 2 {
		t.Fatalf("prune after memory turned off: %d, %v; want 2", n, err)
	}
}

// testContentRetentionCut: a retention cut short ends access, on reads
// and at the prune, to what was written under the longer one (from its
// last write); a kind turned off ends it at once, before any prune.
func testContentRetentionCut(t *testing.T, s store.Store) {
	ctx := t.Context()
	p := store.DefaultProject
	for _, kind := range []string{store.ContentThreads, store.ContentMemory} {
		if err := s.SetRetention(ctx, p, kind, 720); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	expires := now.Add(720 * time.Hour)
	put := func() {
		t.Helper()
		if err := s.PutResponse(ctx, store.StoredResponse{Project: p, ID: "resp_" + now.Format("150405.000000"), Model: "m",
			Body: []byte(`{}`), History: []byte(`[]`), CreatedAt: now, ExpiresAt: expires}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PutThread(ctx, p, "t1", []byte(`[1]`), expires, 0, ""); err != nil {
			t.Fatal(err)
		}
		if err := s.PutNote(ctx, store.Note{Project: p, Agent: "bot", ID: "n1", Text: "kept",
			CreatedAt: now, UpdatedAt: now, ExpiresAt: expires}); err != nil {
			t.Fatal(err)
		}
	}
	// found reports which of the three reads return their row at.
	found := func(at time.Time) string {
		t.Helper()
		var out []string
		if _, err := s.GetResponse(ctx, p, "resp_"+now.Format("150405.000000"), at); err == nil {
			out = append(out, "response")
		} else if !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		if _, err := s.GetThread(ctx, p, "t1", at); err == nil {
			out = append(out, "thread")
		} else if !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		notes, err := s.SearchNotes(ctx, p, "bot", "", at, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(notes) > 0 {
			out = append(out, "note")
		}
		return strings.Join(out, ",")
	}
	put()
	if got := found(now.Add(2 * time.Hour)); got != "response,thread,note" {
		t.Fatalf("under a 720h retention, 2h later: found %q", got)
	}
	// Cut to 1h: what was written 2h ago is no longer read, though its
	// expires_at is 30 days away, and the prune deletes it.
	for _, kind := range []string{store.ContentThreads, store.ContentMemory} {
		if err := s.SetRetention(ctx, p, kind, 1); err != nil {
			t.Fatal(err)
		}
	}
	if got := found(now.Add(30 * time.Minute)); got != "response,thread,note" {
		t.Fatalf("within the shorter retention: found %q", got)
	}
	if got := found(now.Add(2 * time.Hour)); got != "" {
		t.Fatalf("past the shorter retention: found %q", got)
	}
	if n, err := s.PruneContent(ctx, now.Add(30*time.Minute)); err != nil || n != 0 {
		t.Fatalf("prune within the shorter retention: %d, %v", n, err)
	}
	if n, err := s.PruneContent(ctx, now.Add(2*time.Hour)); err != nil || n != 3 {
		t.Fatalf("prune past the shorter retention deleted %d, %v; want 3", n, err)
	}
	// Turned off: nothing is read any more, before the prune.
	now = now.Add(time.Second)
	for _, kind := range []string{store.ContentThreads, store.ContentMemory} {
		if err := s.SetRetention(ctx, p, kind, 720); err != nil {
			t.Fatal(err)
		}
	}
	put()
	if got := found(now); got != "response,thread,note" {
		t.Fatalf("written again: found %q", got)
	}
	for _, kind := range []string{store.ContentThreads, store.ContentMemory} {
		if err := s.SetRetention(ctx, p, kind, 0); err != nil {
			t.Fatal(err)
		}
	}
	if got := found(now); got != "" {
		t.Fatalf("after --off, before the prune: found %q", got)
	}
}

// testThreadRevisionRace: of writers that read a thread at one revision
// and write at once, exactly one lands; the others get ErrConflict. A
// thread whose row outlived its expiry (not pruned yet) is begun again
// as one that does not exist.
func testThreadRevisionRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	if err := s.SetRetention(ctx, store.DefaultProject, store.ContentThreads, 1); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := s.PutThread(ctx, store.DefaultProject, "old", []byte(`["old"]`), now.Add(-time.Minute), 0, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetThread(ctx, store.DefaultProject, "old", now); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an expired thread read: %v", err)
	}
	if _, err := s.PutThread(ctx, store.DefaultProject, "old", []byte(`["new"]`), now.Add(time.Hour), 0, ""); err != nil {
		t.Fatalf("beginning again a thread whose row expired: %v", err)
	}
	for _, start := range []string{"fresh", "written"} {
		var prev int64
		if start == "written" {
			var err error
			if prev, err = s.PutThread(ctx, store.DefaultProject, start, []byte(`[0]`), now.Add(time.Hour), 0, ""); err != nil {
				t.Fatal(err)
			}
		}
		const writers = 8
		var wg sync.WaitGroup
		var mu sync.Mutex
		won, lost := 0, 0
		for i := range writers {
			wg.Go(func() {
				_, err := s.PutThread(ctx, store.DefaultProject, start, fmt.Appendf(nil, "[%d]", i+1), now.Add(time.Hour), prev, "")
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					won++
				case errors.Is(err, store.ErrConflict):
					lost++
				default:
					t.Errorf("writer %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		if won != 1 || lost != writers-1 {
			t.Fatalf("%s thread: %d writes at one revision landed, %d conflicted; want 1 and %d", start, won, lost, writers-1)
		}
	}
}

// testNoteCapRace: notes saved at once never pass the bound on an
// agent's notes nor the one on a project's, and replacing a note is not
// a new one.
func testNoteCapRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	if err := s.SetRetention(ctx, store.DefaultProject, store.ContentMemory, 1); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	note := func(agent, id string) store.Note {
		return store.Note{Project: store.DefaultProject, Agent: agent, ID: id, Text: "x " + id,
			UpdatedAt: now, ExpiresAt: now.Add(time.Hour)}
	}
	caps := store.NoteCaps{PerAgent: 5, PerProject: 8}
	save := func(agents []string, per int) (saved int, capped []*store.NoteCapError) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, a := range agents {
			for i := range per {
				wg.Go(func() {
					_, err := s.SaveNote(ctx, note(a, fmt.Sprintf("%s-%d", a, i)), caps)
					mu.Lock()
					defer mu.Unlock()
					if ce, ok := errors.AsType[*store.NoteCapError](err); ok {
						capped = append(capped, ce)
						return
					}
					if err != nil {
						t.Errorf("saving a note of %s: %v", a, err)
						return
					}
					saved++
				})
			}
		}
		wg.Wait()
		return saved, capped
	}
	count := func(agent string) int {
		t.Helper()
		mine, _, err := s.CountNotes(ctx, store.DefaultProject, agent, "", now)
		if err != nil {
			t.Fatal(err)
		}
		return mine
	}
	// 12 at once for one agent: exactly 5 land.
	if saved, capped := save([]string{"bot"}, 12); saved != 5 || len(capped) != 7 || count("bot") != 5 {
		t.Fatalf("12 notes of one agent at once under a bound of 5: %d saved, %d refused, %d held", saved, len(capped), count("bot"))
	} else if !capped[0].PerAgent || capped[0].Held != 5 || capped[0].Cap != 5 {
		t.Fatalf("refusal %+v, want the agent's bound, 5 held of 5", capped[0])
	}
	// Two more agents, 4 notes each at once: the project holds 8 at most.
	saved, capped := save([]string{"a1", "a2"}, 4)
	_, all, err := s.CountNotes(ctx, store.DefaultProject, "", "", now)
	if err != nil {
		t.Fatal(err)
	}
	if saved != 3 || all != 8 {
		t.Fatalf("8 notes of two agents at once, 5 held, project bound 8: %d saved, %d held", saved, all)
	}
	for _, c := range capped {
		if c.PerAgent || c.Held != 8 {
			t.Fatalf("refusal %+v, want the project's bound, 8 held", c)
		}
	}
	// At the bounds, a note replaced by its id still saves, and keeps
	// when it was made.
	held, err := s.SearchNotes(ctx, store.DefaultProject, "bot", "", now, 1)
	if err != nil || len(held) != 1 {
		t.Fatalf("searching bot's notes: %v, %v", held, err)
	}
	later := note("bot", held[0].ID)
	later.Text, later.UpdatedAt = "replaced", now.Add(time.Second)
	got, err := s.SaveNote(ctx, later, caps)
	if err != nil {
		t.Fatalf("replacing a note at the bound: %v", err)
	}
	if !got.CreatedAt.Equal(now) || got.Text != "replaced" {
		t.Fatalf("replaced note %+v, want created at %v", got, now)
	}
	// Caps lowered below what is held (bot holds 5, the project 8): a
	// note replaced by its id still saves, since it adds nothing; a new
	// one is refused.
	lowered := store.NoteCaps{PerAgent: 3, PerProject: 4}
	later.Text, later.UpdatedAt = "replaced again", now.Add(2*time.Second)
	if _, err := s.SaveNote(ctx, later, lowered); err != nil {
		t.Fatalf("replacing a note by its id with caps lowered below what is held: %v", err)
	}
	fresh := note("bot", "bot-new")
	fresh.UpdatedAt = now.Add(2 * time.Second)
	if _, err := s.SaveNote(ctx, fresh, lowered); err == nil {
		t.Fatal("a new note was saved with caps lowered below what is held")
	} else if ce, ok := errors.AsType[*store.NoteCapError](err); !ok || !ce.PerAgent || ce.Held != 5 || ce.Cap != 3 {
		t.Fatalf("new note over lowered caps: %v, want the agent's bound, 5 held of 3", err)
	}
}
