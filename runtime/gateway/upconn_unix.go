//go:build unix

package gateway

import (
	"errors"
	"syscall"
)

// ownConns says the gateway keeps its own connections to http:// engines
// here: open can tell an idle connection the engine closed, or wrote to
// unasked, without reading it.
const ownConns = true

// peeker looks at a connection's socket: raw is the socket, fn the look,
// which sets alive.
type peeker struct {
	raw   syscall.RawConn
	fn    func(fd uintptr) bool
	alive bool
}

// open reports whether an idle connection is still open: nothing to read
// and no end from the engine (which closes idle connections after its own
// keep-alive timeout). It looks without reading or waiting.
func (pc *upConn) open() bool {
	if pc.peek == nil {
		sc, ok := pc.c.(syscall.Conn)
		if !ok {
			return true
		}
		raw, err := sc.SyscallConn()
		if err != nil {
			return false
		}
		p := &peeker{raw: raw}
		p.fn = func(fd uintptr) bool {
			var b [1]byte
			_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			p.alive = errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK)
			return true
		}
		pc.peek = p
	}
	pc.peek.alive = false
	err := pc.peek.raw.Read(pc.peek.fn)
	return err == nil && pc.peek.alive
}
