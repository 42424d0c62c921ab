// Package hostadmin is the local administration of an installation, run
// on the control-plane host against its store: `llmgw keys` (API keys,
// admin tokens, moving the store) and `llmgw users` (administrators). A
// shell on that host is what makes someone an administrator; nothing here
// goes through the management API.
package hostadmin

import (
	"flag"
	"fmt"
	"io"

	"github.com/llmgw/llmgw/internal/cliflags"
)

// IO is where a command reads and writes.
type IO struct {
	In       io.Reader
	Out, Err io.Writer
}

// fail reports err for cmd and returns exit code 1.
func (o IO) fail(cmd string, err error) int {
	fmt.Fprintf(o.Err, "llmgw %s: %v\n", cmd, err)
	return 1
}

// usageError reports bad input to the command of fs that its flags cannot
// catch (flags that exclude each other, a value out of range; a required
// flag missing goes through cliflags.Required) as a bad flag is, "llmgw
// keys memory: give --retain-hours or --off, not both" and the usage, and
// returns exit code 2. Callers say it before any file or store is opened.
func usageError(fs *flag.FlagSet, format string, args ...any) int {
	return cliflags.ExitCode(cliflags.UsageErrorf(fs, format, args...))
}
