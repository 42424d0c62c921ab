package bench

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// cpuTimes is one CPU's line of /proc/stat: the clock ticks it spent
// busy (user, system, irq, softirq), busy at a low priority (nice: other
// work on the machine, such as a build, that yields to the bench), idle
// (idle, iowait) and stolen (steal: the hypervisor ran something else
// while this virtual CPU wanted to run).
type cpuTimes struct{ busy, nice, idle, steal uint64 }

// readCPUTimes reads /proc/stat's per-CPU lines, by CPU number.
func readCPUTimes() (map[int]cpuTimes, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[int]cpuTimes{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 9 || !strings.HasPrefix(fields[0], "cpu") || fields[0] == "cpu" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimPrefix(fields[0], "cpu"))
		if err != nil {
			continue
		}
		var v [8]uint64
		for i := range v {
			if v[i], err = strconv.ParseUint(fields[i+1], 10, 64); err != nil {
				return nil, fmt.Errorf("/proc/stat %s field %d: %w", fields[0], i+1, err)
			}
		}
		// user nice system idle iowait irq softirq steal
		out[n] = cpuTimes{busy: v[0] + v[2] + v[5] + v[6], nice: v[1], idle: v[3] + v[4], steal: v[7]}
	}
	return out, sc.Err()
}

// cpuUse is what CPUs did between two readings of readCPUTimes: their
// busy, low-priority and stolen shares of their time.
type cpuUse struct{ busy, nice, steal float64 }

// cpuUseBetween returns cpus' use between a and b, over all of them.
func cpuUseBetween(a, b map[int]cpuTimes, cpus []int) cpuUse {
	var busy, nice, steal, all uint64
	for _, c := range cpus {
		x, y := a[c], b[c]
		db, dn, di, ds := y.busy-x.busy, y.nice-x.nice, y.idle-x.idle, y.steal-x.steal
		busy, nice, steal, all = busy+db, nice+dn, steal+ds, all+db+dn+di+ds
	}
	if all == 0 {
		return cpuUse{}
	}
	f := func(n uint64) float64 { return float64(n) / float64(all) }
	return cpuUse{busy: f(busy), nice: f(nice), steal: f(steal)}
}

func (u cpuUse) String() string {
	return fmt.Sprintf("busy %.0f%%, low-priority work %.0f%%, stolen %.0f%%", 100*u.busy, 100*u.nice, 100*u.steal)
}
