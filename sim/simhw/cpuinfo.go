package simhw

import (
	"fmt"
	"strings"
)

// Flags of a simulated x86 CPU. KVM64Flags is what a Proxmox guest on the
// default CPU type (kvm64) sees: no AVX, AVX2, FMA or SSE4.2. HostFlags adds
// what `cpu = host` passes through from a recent Xeon.
var (
	KVM64Flags = []string{"fpu", "vme", "de", "pse", "tsc", "msr", "pae", "mce", "cx8", "apic", "sep", "mtrr", "pge", "mca", "cmov",
		"pat", "pse36", "clflush", "mmx", "fxsr", "sse", "sse2", "syscall", "nx", "lm", "constant_tsc", "nopl", "pni", "cx16", "x2apic", "hypervisor", "lahf_lm"}
	HostFlags = append(append([]string(nil), KVM64Flags...), "ssse3", "fma", "sse4_1", "sse4_2", "movbe", "popcnt", "aes", "xsave", "avx", "f16c", "bmi1", "avx2", "bmi2")
)

// WriteCPUInfo writes a /proc/cpuinfo-shaped file at path describing cores
// x86 processors of model with flags, which the real CPU probe reads (point
// discovery.cpuinfo at it).
func WriteCPUInfo(path, model string, cores int, flags []string) error {
	var b strings.Builder
	for i := range cores {
		fmt.Fprintf(&b, "processor\t: %d\nvendor_id\t: GenuineIntel\nmodel name\t: %s\nflags\t\t: %s\n\n", i, model, strings.Join(flags, " "))
	}
	return writeFileAtomic(path, []byte(b.String()), 0o644)
}
