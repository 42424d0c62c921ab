package scheduler

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/llmgw/llmgw/spec"
)

// benchFleet builds nodes × 8 H100s in fabrics of 100 nodes, sorted by ID,
// 512 GB of memory each, vllm available.
func benchFleet(nodes int) Snapshot {
	s := Snapshot{Nodes: make([]Node, nodes)}
	for i := range s.Nodes {
		n := Node{
			ID:              fmt.Sprintf("node%05d", i),
			Ready:           true,
			MemoryBytes:     512 << 30,
			FreeMemoryBytes: 512 << 30,
			DiskFreeBytes:   4000 << 30,
			Engines:         map[string]bool{"vllm": true},
			Fabric:          fmt.Sprintf("ib-%03d", i/100),
			FabricRateGbps:  400,
			Labels:          map[string]string{"zone": "eu"},
		}
		for g := range 8 {
			n.GPUs = append(n.GPUs, GPU{Index: g, Class: "h100-80g", MemoryMiB: 81920})
		}
		s.Nodes[i] = n
	}
	return s
}

// benchDemands returns models = nodes/2 demands, each with its scaling.min
// (1–3): profiles mix tp 1/2/4/8 and 2-node tp 8, some with a fallback.
func benchDemands(nodes int) ([]Demand, []int) {
	var ds []Demand
	var mins []int
	for i := range nodes / 2 {
		var ps []spec.Profile
		switch i % 5 {
		case 0:
			ps = []spec.Profile{{Name: "tp1", Engine: "vllm", GPUClass: "h100-80g", TP: 1, MinMemoryGB: 16}}
		case 1:
			ps = []spec.Profile{{Name: "tp2", Engine: "vllm", GPUClass: "h100-80g", TP: 2, MinMemoryGB: 32, Labels: map[string]string{"zone": "eu"}}}
		case 2:
			ps = []spec.Profile{{Name: "tp4", Engine: "vllm", GPUClass: "h100-80g", TP: 4, MinMemoryGB: 64, Priority: 10},
				{Name: "tp2", Engine: "vllm", GPUClass: "h100-80g", TP: 2, MinMemoryGB: 32}}
		case 3:
			ps = []spec.Profile{{Name: "tp8", Engine: "vllm", GPUClass: "h100-80g", TP: 8, MinMemoryGB: 128}}
		case 4:
			ps = []spec.Profile{{Name: "2x8", Engine: "vllm", GPUClass: "h100-80g", TP: 8, Nodes: 2, MinMemoryGB: 128, Priority: 10},
				{Name: "tp8", Engine: "vllm", GPUClass: "h100-80g", TP: 8, MinMemoryGB: 128}}
		}
		ds = append(ds, Demand{Model: fmt.Sprintf("model%04d", i), Source: fmt.Sprintf("hf://org/model%04d", i), Profiles: ps})
		mins = append(mins, 1+i%3)
	}
	return ds, mins
}

// fullPass places every model's replicas up to its scaling.min, one Place
// and one Assume per replica on a Fleet built once, as the reconciler does.
func fullPass(s Snapshot, ds []Demand, mins []int) (*Fleet, int) {
	f := NewFleet(s)
	placed := 0
	for i, d := range ds {
		for range mins[i] {
			plan := f.Place(d)
			if !plan.Placed {
				break
			}
			f.Assume(d, plan)
			placed++
		}
	}
	return f, placed
}

func BenchmarkFullPass(b *testing.B) {
	for _, nodes := range []int{250, 500, 1000, 2000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			s := benchFleet(nodes)
			ds, mins := benchDemands(nodes)
			b.ReportAllocs()
			b.ResetTimer()
			placed := 0
			for b.Loop() {
				_, placed = fullPass(s, ds, mins)
			}
			b.ReportMetric(float64(placed), "replicas")
		})
	}
}

func BenchmarkExplain1000(b *testing.B) {
	s := benchFleet(1000)
	ds, mins := benchDemands(1000)
	// Half the catalog placed, so the fleet is part full.
	f, _ := fullPass(s, ds[:len(ds)/2], mins)
	d := ds[len(ds)-1] // 2-node tp 8, then tp 8
	b.ReportAllocs()
	for b.Loop() {
		e := f.Explain(d)
		if len(e.Profiles) == 0 {
			b.Fatal("no explanation")
		}
	}
}

// BenchmarkPlacementGoals is what `make bench` runs: the full pass at
// 250–2,000 nodes and the explanation of one model at 1,000, each measured
// in one run (testing.Benchmark cannot be called inside a benchmark: it
// waits for the one running), printed against the goals of issue 17.
// Misses are printed, not failed: the figures depend on the machine. One
// round takes several seconds, so the benchmark runs it once.
//
// On two cores shared with other work one timing says little, so each
// figure is robust three ways: it is the process's CPU time (a pass waiting
// for a core does not count; the garbage collector's work on the other core
// does, so it is never below the pass's wall time on an idle machine and
// the goals are not loosened); the sizes are timed in turn, round after
// round, so a busy moment slows neighbouring sizes alike; and each size's
// figure is its fastest round, the least disturbed. The growth per
// doubling is the ratio of those figures. The median round and the fastest
// wall time are printed beside each to show the noise.
func BenchmarkPlacementGoals(b *testing.B) {
	for b.Loop() {
		placementGoals()
	}
}

// Placement goals (issue 17) and how they are measured.
const (
	passGoal    = 100 * time.Millisecond
	growthGoal  = 2.3
	explainGoal = 10 * time.Millisecond
	// goalRounds rounds of at least goalSlice each per size.
	goalRounds = 15
	goalSlice  = 40 * time.Millisecond
)

func placementGoals() {
	mark := func(ok bool) string {
		if ok {
			return "ok"
		}
		return "MISS"
	}
	sizes := []int{250, 500, 1000, 2000}
	passes := make([]func(), len(sizes))
	for k, nodes := range sizes {
		s := benchFleet(nodes)
		ds, mins := benchDemands(nodes)
		passes[k] = func() { fullPass(s, ds, mins) }
	}
	s := benchFleet(1000)
	ds, mins := benchDemands(1000)
	f, _ := fullPass(s, ds[:len(ds)/2], mins)
	explain := func() { f.Explain(ds[len(ds)-1]) }
	times := interleaved(append(passes, explain), goalRounds, goalSlice)

	fmt.Printf("placement: full pass (models = nodes/2, 8 H100s per node, Place + Assume per replica): CPU ms, fastest of %d interleaved rounds (median round, fastest wall)\n", goalRounds)
	var prev time.Duration
	for k, nodes := range sizes {
		t := times[k]
		a := allocsOf(passes[k])
		line := fmt.Sprintf("  %5d nodes: %7.2f ms (%7.2f, %7.2f)  %7d allocs  %6.1f MB", nodes, ms(t.cpu[0]), ms(t.cpu[len(t.cpu)/2]), ms(t.wall[0]), a.allocs, float64(a.bytes)/1e6)
		if prev > 0 {
			g := float64(t.cpu[0]) / float64(prev)
			line += fmt.Sprintf("  growth %.2fx (goal <= %.1fx: %s)", g, growthGoal, mark(g <= growthGoal))
		}
		if nodes == 1000 {
			line += fmt.Sprintf("  (goal < %v: %s)", passGoal, mark(t.cpu[0] < passGoal))
		}
		fmt.Println(line)
		prev = t.cpu[0]
	}
	e := times[len(sizes)]
	fmt.Printf("placement: explain one model at 1000 nodes: %.2f ms (%.2f, %.2f)  %d allocs  (goal <= %v: %s)\n",
		ms(e.cpu[0]), ms(e.cpu[len(e.cpu)/2]), ms(e.wall[0]), allocsOf(explain).allocs, explainGoal, mark(e.cpu[0] <= explainGoal))
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// timings are one function's mean CPU and wall time per call in each round,
// each sorted, fastest first.
type timings struct{ cpu, wall []time.Duration }

// interleaved times each of fs over rounds rounds, one after another within
// a round, each for at least slice of wall time (and at least once), after
// a warm-up call of each.
func interleaved(fs []func(), rounds int, slice time.Duration) []timings {
	out := make([]timings, len(fs))
	for _, f := range fs {
		f()
	}
	for range rounds {
		for k, f := range fs {
			runtime.GC()
			start, cpu, n := time.Now(), cpuTime(), 0
			for n == 0 || time.Since(start) < slice {
				f()
				n++
			}
			out[k].cpu = append(out[k].cpu, (cpuTime()-cpu)/time.Duration(n))
			out[k].wall = append(out[k].wall, time.Since(start)/time.Duration(n))
		}
	}
	for _, t := range out {
		slices.Sort(t.cpu)
		slices.Sort(t.wall)
	}
	return out
}

// allocated is what one call allocates.
type allocated struct{ allocs, bytes uint64 }

// allocsOf returns what one call of f allocates, the mean of three.
func allocsOf(f func()) allocated {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 3 {
		f()
	}
	runtime.ReadMemStats(&after)
	return allocated{allocs: (after.Mallocs - before.Mallocs) / 3, bytes: (after.TotalAlloc - before.TotalAlloc) / 3}
}
