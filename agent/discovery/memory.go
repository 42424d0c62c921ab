package discovery

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// DefaultMeminfoPath is where ProbeMemory reads by default.
const DefaultMeminfoPath = "/proc/meminfo"

// Memory is the node's RAM.
type Memory struct {
	TotalBytes uint64
	// AvailableBytes is MemAvailable: what can be allocated without
	// swapping. 0 when the kernel does not report it (before 3.14).
	AvailableBytes uint64
}

// ProbeMemory reads MemTotal and MemAvailable from a /proc/meminfo-shaped
// file. A file without MemTotal is an error naming it.
func ProbeMemory(meminfoPath string) (Memory, error) {
	data, err := os.ReadFile(meminfoPath)
	if err != nil {
		return Memory{}, fmt.Errorf("reading memory size: %w", err)
	}
	var m Memory
	haveTotal := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "MemTotal" && key != "MemAvailable") {
			continue
		}
		n, err := parseMeminfoValue(value)
		if err != nil {
			return Memory{}, fmt.Errorf("reading %s: %s: %w", meminfoPath, key, err)
		}
		if key == "MemTotal" {
			m.TotalBytes, haveTotal = n, true
		} else {
			m.AvailableBytes = n
		}
	}
	if err := sc.Err(); err != nil {
		return Memory{}, fmt.Errorf("reading %s: %w", meminfoPath, err)
	}
	if !haveTotal {
		return Memory{}, fmt.Errorf("reading %s: no MemTotal line", meminfoPath)
	}
	return m, nil
}

// parseMeminfoValue parses "   16318480 kB" into bytes.
func parseMeminfoValue(v string) (uint64, error) {
	fields := strings.Fields(v)
	if len(fields) == 0 || len(fields) > 2 {
		return 0, fmt.Errorf("%q is not shaped like \"16318480 kB\"", strings.TrimSpace(v))
	}
	n, err := strconv.ParseUint(fields[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", fields[0])
	}
	if len(fields) == 1 {
		return n, nil
	}
	if fields[1] != "kB" {
		return 0, fmt.Errorf("unit %q, want kB", fields[1])
	}
	return n * 1024, nil
}
