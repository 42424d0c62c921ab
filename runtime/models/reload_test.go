package models

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/llmgw/llmgw/spec"
)

// TestReloadFollowsTheStore: a standby's catalog, reloaded, gains models
// another control plane created, follows their updates and loses those it
// deleted; declared ones stay; an unchanged store changes nothing.
func TestReloadFollowsTheStore(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, filepath.Join(t.TempDir(), "llmgw.db"))
	defer st.Close()
	leader, err := New(nil, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	standby, err := New([]spec.Model{model("declared")}, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leader.Create(ctx, model("added", "a")); err != nil {
		t.Fatal(err)
	}
	if changed, err := standby.Reload(ctx); err != nil || !changed {
		t.Fatalf("reload after a create: changed=%v err=%v", changed, err)
	}
	if name, ok := standby.Resolve("a"); !ok || name != "added" {
		t.Fatalf("alias a on the standby = %q, %v", name, ok)
	}
	if changed, _ := standby.Reload(ctx); changed {
		t.Error("reload of an unchanged store reported a change")
	}
	m := model("added", "b")
	if _, err := leader.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	if changed, _ := standby.Reload(ctx); !changed {
		t.Error("reload after an update reported no change")
	}
	if name, ok := standby.Resolve("b"); !ok || name != "added" {
		t.Errorf("updated alias b on the standby = %q, %v", name, ok)
	}
	if err := leader.Delete(ctx, "added"); err != nil {
		t.Fatal(err)
	}
	if changed, _ := standby.Reload(ctx); !changed {
		t.Error("reload after a delete reported no change")
	}
	if _, ok := standby.Get("added"); ok {
		t.Error("a model deleted from the store is still in the standby's catalog")
	}
	if _, ok := standby.Get("declared"); !ok {
		t.Error("the declared model was dropped")
	}
}
