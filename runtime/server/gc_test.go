package server

import (
	"runtime/debug"
	"testing"
)

// TestTuneGC: without GOGC the control plane collects at GCPercent; a GOGC
// in the environment (which the runtime has applied) is left alone.
func TestTuneGC(t *testing.T) {
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "GOGC" {
				return v
			}
			return ""
		}
	}
	if p, set := TuneGC(env("")); !set || p != GCPercent {
		t.Fatalf("without GOGC: %d, %v; want %d set", p, set, GCPercent)
	}
	if got := debug.SetGCPercent(100); got != GCPercent {
		t.Fatalf("GC percent after TuneGC = %d, want %d", got, GCPercent)
	}
	if p, set := TuneGC(env("100")); set || p != 100 {
		t.Fatalf("with GOGC=100: %d, %v; want 100 left alone", p, set)
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GC percent with GOGC set = %d, want 100", got)
	}
}
