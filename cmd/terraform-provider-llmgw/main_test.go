package main

import (
	"math"
	"runtime/debug"
	"testing"
)

// TestTuneGC: without GOGC and GOMEMLIMIT the provider collects at
// gcPercent under gcMemoryLimit; either variable set is left to Go.
func TestTuneGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))

	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	debug.SetGCPercent(100)
	debug.SetMemoryLimit(math.MaxInt64)
	tuneGC()
	if got := debug.SetGCPercent(100); got != gcPercent {
		t.Errorf("GC percent without GOGC = %d, want %d", got, gcPercent)
	}
	if got := debug.SetMemoryLimit(-1); got != gcMemoryLimit {
		t.Errorf("memory limit without GOMEMLIMIT = %d, want %d", got, gcMemoryLimit)
	}

	t.Setenv("GOGC", "150")
	t.Setenv("GOMEMLIMIT", "1GiB")
	debug.SetGCPercent(150)
	debug.SetMemoryLimit(1 << 30)
	tuneGC()
	if got := debug.SetGCPercent(100); got != 150 {
		t.Errorf("GC percent with GOGC=150 = %d, want 150 (the environment's)", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 1<<30 {
		t.Errorf("memory limit with GOMEMLIMIT=1GiB = %d, want %d (the environment's)", got, 1<<30)
	}
}
