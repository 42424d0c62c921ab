//go:build darwin || freebsd || netbsd || openbsd

package ctl

import "golang.org/x/sys/unix"

// The ioctls that read and set a terminal's attributes.
const (
	ioctlGetTermios = unix.TIOCGETA
	ioctlSetTermios = unix.TIOCSETA
)
