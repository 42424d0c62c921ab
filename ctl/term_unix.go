//go:build linux || darwin || freebsd || netbsd || openbsd

package ctl

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), ioctlGetTermios)
	return err == nil
}

// readNoEcho reads one line from the terminal f with echo turned off
// (the newline still shows), and turns echo back on.
func readNoEcho(f *os.File) (string, error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, ioctlGetTermios)
	if err != nil {
		return "", fmt.Errorf("reading the terminal's settings: %w", err)
	}
	quiet := *old
	quiet.Lflag &^= unix.ECHO
	quiet.Lflag |= unix.ICANON | unix.ECHONL
	if err := unix.IoctlSetTermios(fd, ioctlSetTermios, &quiet); err != nil {
		return "", fmt.Errorf("turning the terminal's echo off: %w", err)
	}
	line, rerr := readLine(f)
	if err := unix.IoctlSetTermios(fd, ioctlSetTermios, old); err != nil {
		return "", errors.Join(rerr, fmt.Errorf("turning the terminal's echo back on: %w", err))
	}
	return line, rerr
}
