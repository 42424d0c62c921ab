package enginecheck

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/llmgw/llmgw/agent/driver"
	"github.com/llmgw/llmgw/spec"
)

// helpMaxBytes bounds the help output read: vLLM's --help=all runs to a
// few hundred kilobytes. Output beyond it is cut, and the help is then
// read as truncated.
const helpMaxBytes = 8 << 20

// readHelp runs the engine's help commands, the widest first, and records
// in r the flags the first usable one lists. A help command that exits
// non-zero (vLLM before 0.10 refuses --help=all) gives way to the next.
// With the flags known, the flags llmgw's driver writes on every launch
// are looked up in them: one the engine does not take fails the check,
// since every replica of the engine on this node would fail to start.
func readHelp(ctx context.Context, r *Result, cmds []driver.Command, timeout time.Duration) {
	if len(cmds) == 0 {
		return
	}
	var h Help
	var why string
	for i, c := range cmds {
		r.HelpCommand = helpCommandLine(c)
		out, cut, err := output(ctx, c, timeout, helpMaxBytes)
		h = ParseHelp(string(out))
		why = ""
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			why = fmt.Sprintf("`%s` did not finish within %s", r.HelpCommand, timeout)
		case err != nil:
			why = fmt.Sprintf("`%s` failed: %v", r.HelpCommand, err)
		}
		if why != "" && i+1 < len(cmds) {
			continue
		}
		if why == "" && cut {
			why = fmt.Sprintf("the output of `%s` was cut short at %d bytes", r.HelpCommand, helpMaxBytes)
		}
		break
	}
	r.Flags = h.Flags
	switch {
	case why != "":
		r.HelpWarning = why + "; flags not checked on this node"
	case h.Summary:
		r.HelpWarning = fmt.Sprintf("`%s` printed only a summary that lists no flag; flags not checked on this node", r.HelpCommand)
	case h.Truncated:
		r.HelpWarning = fmt.Sprintf("the output of `%s` was cut short; a flag it does not list is not called missing", r.HelpCommand)
	case len(h.Flags) == 0:
		r.HelpWarning = fmt.Sprintf("`%s` listed no flag; flags not checked on this node", r.HelpCommand)
	}
	if r.HelpWarning != "" {
		return
	}
	var missing []string
	for _, f := range spec.LaunchFlags(spec.Profile{Engine: r.Engine, Nodes: 1}) {
		if !spec.EngineAcceptsFlag(r.Engine, r.Flags, f.Name) {
			missing = append(missing, f.Name)
		}
	}
	if len(missing) > 0 {
		r.OK = false
		r.Error = fmt.Sprintf("%s (%s) does not take %s, which llmgw passes on every launch: `%s` does not list %s",
			Name(r.Engine, r.Path), r.Version, strings.Join(missing, ", "), r.HelpCommand, plural(len(missing), "it", "them"))
	}
}

// output runs cmd like a check and returns the first max bytes of its
// output (stdout and stderr), whether more was cut, and the error.
func output(ctx context.Context, cmd driver.Command, timeout time.Duration, max int) ([]byte, bool, error) {
	out := &headBuffer{max: max}
	err := runGroup(ctx, cmd, timeout, out)
	out.mu.Lock()
	defer out.mu.Unlock()
	return out.buf, out.cut, err
}

// helpCommandLine is how messages show a help command: the program's base
// name and its arguments ("vllm serve --help=all").
func helpCommandLine(c driver.Command) string {
	return strings.Join(append([]string{filepath.Base(c.Path)}, c.Args...), " ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// headBuffer keeps the first max bytes written to it.
type headBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
	cut bool
}

func (h *headBuffer) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if room := h.max - len(h.buf); room < len(p) {
		h.buf = append(h.buf, p[:max(room, 0)]...)
		h.cut = true
		return len(p), nil
	}
	h.buf = append(h.buf, p...)
	return len(p), nil
}
