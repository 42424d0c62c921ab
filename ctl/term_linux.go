package ctl

import "golang.org/x/sys/unix"

// The ioctls that read and set a terminal's attributes.
const (
	ioctlGetTermios = unix.TCGETS
	ioctlSetTermios = unix.TCSETS
)
