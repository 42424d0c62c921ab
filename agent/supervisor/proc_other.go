//go:build !linux

package supervisor

import (
	"errors"
	"syscall"
)

// Without /proc, liveness is signal 0, zombies included, and no process
// identity can be checked: Recover adopts nothing.

const canVerifyIdentity = false

func processAlive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func processStartTime(int) uint64 { return 0 }

func processCmdline(int) ([]string, error) {
	return nil, errors.New("reading a process's command line is only supported on linux")
}

func groupAlive(pgid int) bool { return syscall.Kill(-pgid, 0) == nil }
