package models

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/spec"
)

func model(name string, aliases ...string) spec.Model {
	return spec.Model{Name: name, Aliases: aliases, Source: "sim://" + name, Scaling: spec.Scaling{Min: 1, Max: 1},
		Profiles: []spec.Profile{{Name: "p", Engine: "sim", GPUClass: "h100-80g", TP: 1}}}
}

func openStore(t *testing.T, path string) store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Models added through the API survive a restart; declared ones come back
// from server.yaml and win over a stored model of the same name.
func TestStoredModelsSurviveRestart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "llmgw.db")
	st := openStore(t, path)
	r, err := New([]spec.Model{model("declared", "d")}, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Create(ctx, model("added", "a")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Create(ctx, model("clash", "d")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("alias clash with a declared model: err = %v, want ErrInvalid", err)
	}
	st.Close()

	st = openStore(t, path)
	defer st.Close()
	r, err = New([]spec.Model{model("declared", "d")}, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Load(ctx); err != nil {
		t.Fatal(err)
	}
	for alias, want := range map[string]string{"a": "added", "added": "added", "d": "declared"} {
		if got, ok := r.Resolve(alias); !ok || got != want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", alias, got, ok, want)
		}
	}
	e, ok := r.Get("added")
	if !ok || e.Origin != OriginAPI || e.Revision != 1 {
		t.Fatalf("added after restart = %+v, %v", e, ok)
	}
	if d, _ := r.Get("declared"); d.Origin != OriginConfig {
		t.Fatalf("declared origin = %q", d.Origin)
	}
}

func TestChangedIsSignalled(t *testing.T) {
	r, err := New(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Create(context.Background(), model("m")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Changed():
	default:
		t.Fatal("no change signalled after Create")
	}
}
