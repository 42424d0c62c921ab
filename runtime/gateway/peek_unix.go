//go:build linux || darwin || freebsd || netbsd || openbsd

package gateway

import "syscall"

// peekSocket looks at an idle connection's socket without blocking or
// consuming: it is open when there is nothing to read yet (EAGAIN); a zero
// read means the engine closed it, and data means it sent something unasked.
func (uc *upConn) peekSocket(fd uintptr) bool {
	_, _, err := syscall.Recvfrom(int(fd), uc.peekBuf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	uc.alive = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
	return true
}
