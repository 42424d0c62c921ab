//go:build unix

package scheduler

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time the process has used (user and system, every
// thread: the garbage collector's too).
func cpuTime() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		panic("getrusage: " + err.Error())
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
