package models

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/spec"
)

// TestUpdateIfRevision: an update naming the revision it read is refused
// once another update moved the stored model on; 0 checks nothing.
func TestUpdateIfRevision(t *testing.T) {
	r, err := New(nil, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	m := spec.Model{Name: "m", Source: "sim://m", Scaling: spec.Scaling{Min: 1, Max: 1},
		Profiles: []spec.Profile{{Name: "cpu", Engine: "sim"}}}
	e, err := r.Create(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	read := e.Revision
	m.Scaling = spec.Scaling{Min: 2, Max: 2}
	if _, err := r.UpdateIf(context.Background(), m, read); err != nil {
		t.Fatalf("update at the revision read: %v", err)
	}
	m.Scaling = spec.Scaling{Min: 3, Max: 3}
	_, err = r.UpdateIf(context.Background(), m, read)
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "read at revision") {
		t.Fatalf("update over a stale revision: %v, want ErrConflict naming the revisions", err)
	}
	if got, _ := r.Get("m"); got.Model.Scaling.Min != 2 {
		t.Errorf("stored min %d after a refused update, want 2", got.Model.Scaling.Min)
	}
	if _, err := r.UpdateIf(context.Background(), m, 0); err != nil {
		t.Errorf("update without a revision: %v", err)
	}
}
