package bench

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// pinProcess binds every thread of this process to the CPUs in cpus (and
// so every thread it starts later: a new thread takes its creator's set).
// It returns the set the process had, for unpinning. A thread that ended
// while the list was walked is skipped; one started meanwhile took a set
// from its creator, pinned or not, so the walk runs until it pins nothing
// new.
func pinProcess(cpus []int) (unix.CPUSet, error) {
	var was unix.CPUSet
	if err := unix.SchedGetaffinity(0, &was); err != nil {
		return was, fmt.Errorf("reading this process's CPUs: %w", err)
	}
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	return was, setProcessCPUs(set)
}

// setProcessCPUs binds every thread of this process to set.
func setProcessCPUs(set unix.CPUSet) error {
	done := map[int]bool{}
	for {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("listing this process's threads: %w", err)
		}
		fresh := 0
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil || done[tid] {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
				return fmt.Errorf("binding thread %d to CPUs %v: %w", tid, set, err)
			}
			done[tid] = true
			fresh++
		}
		if fresh == 0 {
			return nil
		}
	}
}

// splitCPUs divides the CPUs this process may use between the load (the
// client and the engine) and the proxies: the last one for the proxies,
// the others for the load. ok is false with fewer than two.
func splitCPUs() (load, proxies []int, ok bool) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, nil, false
	}
	var all []int
	for c := 0; c < runtime.NumCPU()*4 && len(all) < set.Count(); c++ {
		if set.IsSet(c) {
			all = append(all, c)
		}
	}
	if len(all) < 2 {
		return nil, nil, false
	}
	return all[:len(all)-1], all[len(all)-1:], true
}

// cpuLatencyFile is Linux's CPU latency request (PM QoS): while a process
// holds it open with a bound written to it, the CPUs' idle states that
// take longer than the bound to leave are not used.
const cpuLatencyFile = "/dev/cpu_dma_latency"

// holdCPUsAwake asks, through cpuLatencyFile, that no CPU sleep deeper
// than polling until release is called: in a virtual machine a CPU that
// idles halts, and waking it for a request's packet goes through the
// hypervisor, which on this machine took 100-250 µs at the median and
// up to milliseconds in a tail, once on each hop of every path. The same
// wait met direct, gateway and bare proxy alike and measured the
// machine, not the proxies. It is what latency tools do (cyclictest; the
// latency-performance profile of tuned), and a busy server, whose CPUs
// have work, meets no such wake-ups either. It needs root; the error says
// why not.
func holdCPUsAwake() (release func(), err error) {
	f, err := os.OpenFile(cpuLatencyFile, os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	var zero [4]byte // an int32 in the machine's order: 0 µs
	if _, err := f.Write(zero[:]); err != nil {
		f.Close()
		return nil, fmt.Errorf("writing %s: %w", cpuLatencyFile, err)
	}
	return func() { _ = f.Close() }, nil
}

// TestHoldCPUsAwake: while held, the kernel's CPU latency bound reads 0
// µs; where the machine has no such file, or it may not be written (not
// root), holdCPUsAwake's error names it, and BenchmarkGatewayOverhead
// prints it.
func TestHoldCPUsAwake(t *testing.T) {
	release, err := holdCPUsAwake()
	if _, statErr := os.Stat(cpuLatencyFile); statErr != nil || os.Geteuid() != 0 {
		if err == nil || !strings.Contains(err.Error(), cpuLatencyFile) {
			t.Fatalf("%s cannot be held here (%v, uid %d), yet holdCPUsAwake said %v", cpuLatencyFile, statErr, os.Geteuid(), err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	b, err := os.ReadFile(cpuLatencyFile)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 4 || binary.NativeEndian.Uint32(b) != 0 {
		t.Fatalf("%s reads %v while held, want 0 µs", cpuLatencyFile, b)
	}
}
