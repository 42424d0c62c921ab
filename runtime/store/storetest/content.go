package storetest

import (
	"errors"
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
