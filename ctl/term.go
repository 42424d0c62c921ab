package ctl

import (
	"os"

	"golang.org/x/term"
)

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// readNoEcho reads one line from the terminal f with echo turned off, and
// turns echo back on. The newline does not show either, so the caller
// ends the prompt's line itself. End of input on an empty line is an
// empty password.
func readNoEcho(f *os.File) (string, error) {
	b, err := term.ReadPassword(int(f.Fd()))
	return string(b), err
}
