package scheduler

import (
	"fmt"
	"math"
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
// On two cores shared with other work one timing says little, so the
// figures are robust three ways. Each is the process's CPU time (a pass
// waiting for a core does not count; the garbage collector's work on the
// other core does, so on an idle machine it is never below the pass's wall
// time and the goals are not loosened). The sizes are timed in turn, round
// after round, so a busy spell falls on all of them. And a size's figure is
// its fastest round, the least disturbed: other work evicting the pass's
// data from the caches slows a large fleet more than a small one, so a
// typical round overstates the growth, which is the ratio of the fastest
// rounds; over the whole range from 250 to 2,000 nodes, where one step's
// noise weighs an eighth as much, it is printed as the mean per doubling
// too. The median round, the median of the rounds' own ratios and the
// fastest wall time are printed beside them to show the noise.
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
	goalRounds = 20
	goalSlice  = 30 * time.Millisecond
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
	rounds := interleaved(append(passes, explain), goalRounds, goalSlice)

	fmt.Printf("placement: full pass (models = nodes/2, 8 H100s per node, Place + Assume per replica): CPU ms, fastest of %d interleaved rounds (median round, fastest wall)\n", goalRounds)
	for k, nodes := range sizes {
		cpu, wall := rounds.cpu(k), rounds.wall(k)
		a := allocsOf(passes[k])
		line := fmt.Sprintf("  %5d nodes: %6.2f ms (%6.2f, %6.2f)  %6d allocs  %4.1f MB", nodes, ms(cpu[0]), ms(cpu[len(cpu)/2]), ms(wall[0]), a.allocs, float64(a.bytes)/1e6)
		if k > 0 {
			g := float64(cpu[0]) / float64(rounds.cpu(k - 1)[0])
			line += fmt.Sprintf("  growth %.2fx (goal <= %.1fx: %s; rounds' median %.2fx)", g, growthGoal, mark(g <= growthGoal), rounds.growth(k-1, k))
		}
		if nodes == 1000 {
			line += fmt.Sprintf("  (goal < %v: %s)", passGoal, mark(cpu[0] < passGoal))
		}
		fmt.Println(line)
	}
	// Over the whole range the noise of one step weighs an eighth as much.
	last := len(sizes) - 1
	mean := math.Pow(float64(rounds.cpu(last)[0])/float64(rounds.cpu(0)[0]), 1/float64(last))
	fmt.Printf("  %d to %d nodes: growth %.2fx per doubling (goal <= %.1fx: %s)\n", sizes[0], sizes[last], mean, growthGoal, mark(mean <= growthGoal))
	e, ew := rounds.cpu(len(sizes)), rounds.wall(len(sizes))
	fmt.Printf("placement: explain one model at 1000 nodes: %.2f ms (%.2f, %.2f)  %d allocs  (goal <= %v: %s)\n",
		ms(e[0]), ms(e[len(e)/2]), ms(ew[0]), allocsOf(explain).allocs, explainGoal, mark(e[0] <= explainGoal))
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// timed holds, for each round, each function's mean CPU and wall time per
// call.
type timed struct{ cpus, walls [][]time.Duration }

// cpu returns function k's CPU time per call in each round, fastest first.
func (t timed) cpu(k int) []time.Duration { return column(t.cpus, k) }

// wall returns function k's wall time per call in each round, fastest first.
func (t timed) wall(k int) []time.Duration { return column(t.walls, k) }

// growth returns the median over the rounds of function k's CPU time over
// function j's.
func (t timed) growth(j, k int) float64 {
	ratios := make([]float64, len(t.cpus))
	for r, round := range t.cpus {
		ratios[r] = float64(round[k]) / float64(round[j])
	}
	slices.Sort(ratios)
	return ratios[len(ratios)/2]
}

func column(rounds [][]time.Duration, k int) []time.Duration {
	out := make([]time.Duration, len(rounds))
	for r, round := range rounds {
		out[r] = round[k]
	}
	slices.Sort(out)
	return out
}

// interleaved times each of fs over rounds rounds, one after another within
// a round, each for at least slice of wall time (and at least once), after
// a warm-up call of each.
func interleaved(fs []func(), rounds int, slice time.Duration) timed {
	var t timed
	for _, f := range fs {
		f()
	}
	for range rounds {
		cpus, walls := make([]time.Duration, len(fs)), make([]time.Duration, len(fs))
		for k, f := range fs {
			runtime.GC()
			start, cpu, n := time.Now(), cpuTime(), 0
			for n == 0 || time.Since(start) < slice {
				f()
				n++
			}
			cpus[k] = (cpuTime() - cpu) / time.Duration(n)
			walls[k] = time.Since(start) / time.Duration(n)
		}
		t.cpus, t.walls = append(t.cpus, cpus), append(t.walls, walls)
	}
	return t
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
