//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package ctl

import (
	"errors"
	"os"
)

// isTerminal reports false: this platform has no terminal support here, so
// a password comes from --password-file or stdin.
func isTerminal(*os.File) bool { return false }

func readNoEcho(*os.File) (string, error) {
	return "", errors.New("reading a password from the terminal is not supported on this platform")
}
