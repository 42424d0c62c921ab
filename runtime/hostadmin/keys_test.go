package hostadmin

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/runtime/store"
)

func TestKeysMoveStore(t *testing.T) {
	dir := t.TempDir()
	from, to := filepath.Join(dir, "from.db"), filepath.Join(dir, "to.db")
	src, err := store.Open(t.Context(), from)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.CreateAPIKey(t.Context(), store.APIKey{ID: "key-1", Name: "app", Hash: "hash-1"}); err != nil {
		t.Fatal(err)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		args []string
		want int
	}{
		{name: "missing --to", args: []string{"move-store", "--from", from}, want: 1},
		{name: "stray argument", args: []string{"move-store", "--from", from, "--to", to, "extra"}, want: 2}, // bad usage, as in ctl
		{name: "unknown flag", args: []string{"move-store", "--form", from}, want: 2},
		{name: "missing source", args: []string{"move-store", "--from", filepath.Join(dir, "nope.db"), "--to", to}, want: 1},
		{name: "copies", args: []string{"move-store", "--from", from, "--to", to}, want: 0},
		{name: "destination now full", args: []string{"move-store", "--from", from, "--to", to}, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Keys(t.Context(), tt.args, IO{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard}); got != tt.want {
				t.Fatalf("llmgw keys %v = %d, want %d", tt.args, got, tt.want)
			}
		})
	}
	dst, err := store.Open(t.Context(), to)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if k, err := dst.LookupAPIKey(t.Context(), "hash-1"); err != nil || k.ID != "key-1" {
		t.Errorf("moved store: LookupAPIKey = %+v, %v; want key-1", k, err)
	}
}

// TestKeysNameRequiredFirst: keys create and admin-token without --name
// say so, with the usage and exit 2 as for a bad flag, before any
// server.yaml is looked for (here there is none).
func TestKeysNameRequiredFirst(t *testing.T) {
	t.Chdir(t.TempDir())
	old := defaultConfigPaths
	t.Cleanup(func() { defaultConfigPaths = old })
	defaultConfigPaths = []string{"server.yaml"}
	for _, sub := range []string{"create", "admin-token"} {
		var out, errOut bytes.Buffer
		code := Keys(context.Background(), []string{sub}, IO{In: strings.NewReader(""), Out: &out, Err: &errOut})
		if code != 2 || !strings.Contains(errOut.String(), "--name is required") || !strings.Contains(errOut.String(), "usage:") {
			t.Errorf("keys %s without --name: exit %d, %q; want 2, the missing flag named and the usage", sub, code, errOut.String())
		}
	}
}
