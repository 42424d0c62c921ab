// Package hostadmin is the local administration of an installation, run
// on the control-plane host against its store: `llmgw keys` (API keys,
// admin tokens, moving the store) and `llmgw users` (administrators). A
// shell on that host is what makes someone an administrator; nothing here
// goes through the management API.
package hostadmin

import (
	"fmt"
	"io"
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
