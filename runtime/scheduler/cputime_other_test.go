//go:build !unix

package scheduler

import "time"

var processStart = time.Now()

// cpuTime is wall time where the process's CPU time is not read.
func cpuTime() time.Duration { return time.Since(processStart) }
