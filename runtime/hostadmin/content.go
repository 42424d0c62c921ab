package hostadmin

import (
	"context"
	"fmt"

	"github.com/llmgw/llmgw/internal/cliflags"
	"github.com/llmgw/llmgw/runtime/config"
	"github.com/llmgw/llmgw/runtime/store"
)

// contentRetention runs `llmgw keys threads|memory --project P
// --retain-hours N` (or --off): whether a project keeps conversations
// (threads and stored responses) or agents' memory notes, and for how
// long. Nothing is kept until a project opts in, and a retention is
// required: content is never kept for ever.
func contentRetention(ctx context.Context, kind string, args []string, io IO) int {
	cmd := "keys " + kind
	fs := cliflags.New("llmgw "+cmd, "llmgw "+cmd+" --project P (--retain-hours N | --off) [-c server.yaml]", io.Err)
	cfgPath := fs.String("c", "", configFlagHelp)
	project := fs.String("project", "", "the project")
	hours := fs.Int("retain-hours", 0, "keep content this many hours after its last write (required to turn it on)")
	off := fs.Bool("off", false, "stop keeping content; what was kept is no longer read from now on and is deleted at the next hourly prune")
	if err := cliflags.ParseNoArgs(fs, args); err != nil {
		return cliflags.ExitCode(err)
	}
	if err := cliflags.Required(fs, "project"); err != nil {
		return cliflags.ExitCode(err)
	}
	switch {
	case *off && *hours != 0:
		return usageError(fs, "give --retain-hours or --off, not both")
	case !*off && *hours <= 0:
		return usageError(fs, "--retain-hours N (N > 0) is required: kept content must expire; or --off")
	case *hours > store.MaxRetainHours:
		return usageError(fs, "--retain-hours %d is more than %d (ten years), the longest content may be kept", *hours, store.MaxRetainHours)
	}
	path, err := configPath(fs, *cfgPath)
	if err != nil {
		return io.fail(cmd, err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		return io.fail(cmd, err)
	}
	st, err := store.Open(ctx, cfg.Auth.Store, store.MustExist())
	if err != nil {
		return io.fail(cmd, fmt.Errorf("auth.store: %w", err))
	}
	defer st.Close()
	storeKind := store.ContentThreads
	what := "conversations (threads and stored responses)"
	if kind == "memory" {
		storeKind, what = store.ContentMemory, "memory notes"
	}
	if err := st.SetRetention(ctx, *project, storeKind, *hours); err != nil {
		return io.fail(cmd, err)
	}
	if *off {
		fmt.Fprintf(io.Out, "project %s keeps no %s from now on; what it kept is no longer read and is deleted at the next hourly prune\n", *project, what)
		return 0
	}
	fmt.Fprintf(io.Out, "project %s keeps %s for %d hours after their last write\n", *project, what, *hours)
	return 0
}
