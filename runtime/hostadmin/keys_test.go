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
		{name: "missing --to", args: []string{"move-store", "--from", from}, want: 2},                        // bad usage too
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

// TestUsageErrors: a command missing a required flag, or given flags that
// exclude each other or a value out of range, says so as a bad flag is
// reported: "llmgw CMD: " and the error naming the flag, then the usage
// with the flags, exit 2, nothing on stdout, before any server.yaml is
// looked for (here there is none) or any store opened.
func TestUsageErrors(t *testing.T) {
	t.Chdir(t.TempDir())
	old := defaultConfigPaths
	t.Cleanup(func() { defaultConfigPaths = old })
	defaultConfigPaths = []string{"server.yaml"}
	for _, tt := range []struct {
		run  func(context.Context, []string, IO) int
		args []string
		want string // the first line
		flag string // one flag the usage lists
	}{
		{Keys, []string{"create"}, "llmgw keys create: --name is required", "-expires duration"},
		{Keys, []string{"admin-token"}, "llmgw keys admin-token: --name is required", "-name string"},
		{Keys, []string{"create", "--name", "n", "--expires", "-1h"}, "llmgw keys create: --expires -1h0m0s is negative; 0 never expires", "-expires duration"},
		{Keys, []string{"threads", "--retain-hours", "24"}, "llmgw keys threads: --project is required", "-project string"},
		{Keys, []string{"memory", "--off"}, "llmgw keys memory: --project is required", "-project string"},
		{Keys, []string{"threads", "--project", "p"}, "llmgw keys threads: --retain-hours N (N > 0) is required", "-off"},
		{Keys, []string{"memory", "--project", "p", "--retain-hours", "2", "--off"}, "llmgw keys memory: give --retain-hours or --off, not both", "-off"},
		{Keys, []string{"threads", "--project", "p", "--retain-hours", "3000000"}, "llmgw keys threads: --retain-hours 3000000 is more than 87600", "-retain-hours int"},
		{Keys, []string{"move-store"}, "llmgw keys move-store: --from and --to are required", "-to string"},
		{Keys, []string{"move-store", "--to", "new.db"}, "llmgw keys move-store: --from is required", "-from string"},
		{Keys, []string{"move-store", "--from", "old.db"}, "llmgw keys move-store: --to is required", "-to string"},
		{Users, []string{"create", "a@example.com"}, "llmgw users create: a password is required", "-password-file string"},
		{Users, []string{"create", "a@example.com", "--password", "x", "--password-file", "f"}, "llmgw users create: give --password or --password-file, not both", "-password string"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := tt.run(context.Background(), tt.args, IO{In: strings.NewReader(""), Out: &out, Err: &errOut})
			lines := strings.SplitN(errOut.String(), "\n", 3)
			usage := "usage: " + tt.want[:strings.Index(tt.want, ":")] + " " // "usage: llmgw keys create "
			if code != 2 || out.Len() > 0 || len(lines) < 3 || !strings.HasPrefix(lines[0], tt.want) || !strings.HasPrefix(lines[1], usage) || !strings.Contains(lines[2], tt.flag) {
				t.Errorf("exit %d, stdout %q, stderr\n%s\nwant exit 2, no stdout, %q on the first line, then %q and the flags (%q among them)", code, out.String(), errOut.String(), tt.want, usage, tt.flag)
			}
		})
	}
}
