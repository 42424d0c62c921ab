package discovery

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/llmgw/llmgw/spec"
)

// DefaultCPUInfoPath is where ProbeCPU reads by default.
const DefaultCPUInfoPath = spec.DefaultCPUInfo

// CPU describes the node's processors as /proc/cpuinfo lists them.
type CPU struct {
	// Model is the "model name" (x86) or, on arm64, the implementer and part.
	Model string
	// Cores is the number of logical CPUs (processor entries).
	Cores int
	// AVX2 and AVX512 say whether llama.cpp's fast CPU paths can run.
	AVX2   bool
	AVX512 bool
	// Flags are the first processor's feature flags ("flags" on x86,
	// "Features" on arm64), sorted.
	Flags []string
	// X86 is true when the flags came from an x86 "flags" line: only then
	// does a missing avx2 mean the CPU lacks it (arm64 never lists it).
	X86 bool
}

// HasAVX2 reports whether the CPU has AVX2, and whether that is known: it
// is not for a CPU whose x86 flags were not read.
func (c CPU) HasAVX2() (has, known bool) {
	return c.AVX2, c.X86
}

// HasFlag reports whether the CPU lists flag (e.g. "avx2", "asimd").
func (c CPU) HasFlag(flag string) bool {
	_, found := slices.BinarySearch(c.Flags, flag)
	return found
}

// ProbeCPU parses a /proc/cpuinfo-shaped file. A file listing no processor is
// an error naming it.
func ProbeCPU(cpuinfoPath string) (CPU, error) {
	data, err := os.ReadFile(cpuinfoPath)
	if err != nil {
		return CPU{}, fmt.Errorf("reading CPU description: %w", err)
	}
	var c CPU
	var implementer, part string
	haveFlags := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024) // flags lines are long
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		switch key {
		case "processor":
			c.Cores++
		case "model name":
			if c.Model == "" {
				c.Model = value
			}
		case "CPU implementer":
			if implementer == "" {
				implementer = value
			}
		case "CPU part":
			if part == "" {
				part = value
			}
		case "flags", "Features":
			if !haveFlags {
				c.Flags = strings.Fields(value)
				c.X86 = key == "flags"
				haveFlags = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		return CPU{}, fmt.Errorf("reading %s: %w", cpuinfoPath, err)
	}
	if c.Cores == 0 {
		return CPU{}, fmt.Errorf("reading %s: no processor entries", cpuinfoPath)
	}
	if c.Model == "" && (implementer != "" || part != "") {
		c.Model = "implementer " + implementer + " part " + part
	}
	slices.Sort(c.Flags)
	c.Flags = slices.Compact(c.Flags)
	c.AVX2 = c.HasFlag("avx2")
	c.AVX512 = c.HasFlag("avx512f")
	return c, nil
}
