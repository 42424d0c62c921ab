package bench

import (
	"fmt"
	"os"
	"runtime"
	"strconv"

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
