//go:build unix

package gateway

import (
	"errors"
	"net"
	"syscall"
)

// ownConns says the gateway keeps its own connections to http:// engines
// here: open can tell an idle connection the engine closed, or wrote to
// unasked, without reading it.
const ownConns = true

// open reports whether an idle connection is still open: nothing to read
// and no end from the engine (which closes idle connections after its own
// keep-alive timeout). It looks without reading or waiting.
func open(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		alive = errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK)
		return true
	})
	return err == nil && alive
}
