package server

import "runtime/debug"

// GCPercent is the GOGC the control plane runs with when GOGC is not set
// in its environment: the heap may grow to 1.75 times what is live between
// collections instead of twice. Its memory is mostly per connection
// (buffers, request headers, contexts, goroutine stacks: tens of KiB per
// stream), and at 1,000 streams (BenchmarkSoak1000Streams) this is what
// keeps it within 150 MB: peak RSS 140 MB, against 152-157 MB at GOGC=100,
// with the first event's p50/p99 as at 100. GOGC=50 went to 130-133 MB but
// slowed the first events of a 1,000-request burst (p99 0.8-1.1 s against
// 0.5-0.6 s), so 75.
const GCPercent = 75

// TuneGC sets the garbage collector's percent to GCPercent unless getenv
// says GOGC is set, which wins. It reports the percent in effect and
// whether it set it. For the control plane's main, not for tests or
// libraries: it changes the whole process.
func TuneGC(getenv func(string) string) (percent int, set bool) {
	if getenv("GOGC") != "" {
		p := debug.SetGCPercent(-1)
		debug.SetGCPercent(p)
		return p, false
	}
	debug.SetGCPercent(GCPercent)
	return GCPercent, true
}
