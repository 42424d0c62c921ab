package discovery

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestProbeCPU(t *testing.T) {
	tests := []struct {
		path           string
		model          string
		cores          int
		avx2, avx512   bool
		avx2Known      bool
		hasFlag, lacks string
	}{
		{path: "testdata/proc/cpuinfo-xeon", model: "Intel(R) Xeon(R) Platinum 8480+", cores: 4, avx2: true, avx512: true, avx2Known: true, hasFlag: "amx_tile", lacks: "sve"},
		// What a Proxmox guest with the default kvm64 CPU type looks like
		// (on a host that has AVX2) is the same: x86 flags without avx2.
		{path: "testdata/proc/cpuinfo-opteron", model: "AMD Opteron(tm) Processor 6380", cores: 2, avx2: false, avx512: false, avx2Known: true, hasFlag: "avx", lacks: "avx2"},
		// arm64 lists no avx2 ever: unknown, not absent.
		{path: "testdata/proc/cpuinfo-neoverse", model: "implementer 0x41 part 0xd4f", cores: 3, avx2Known: false, hasFlag: "asimd", lacks: "avx2"},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.path), func(t *testing.T) {
			c, err := ProbeCPU(tt.path)
			if err != nil {
				t.Fatal(err)
			}
			if c.Model != tt.model || c.Cores != tt.cores || c.AVX2 != tt.avx2 || c.AVX512 != tt.avx512 {
				t.Errorf("ProbeCPU() = {%q cores=%d avx2=%v avx512=%v}, want {%q %d %v %v}", c.Model, c.Cores, c.AVX2, c.AVX512, tt.model, tt.cores, tt.avx2, tt.avx512)
			}
			if has, known := c.HasAVX2(); has != tt.avx2 || known != tt.avx2Known {
				t.Errorf("HasAVX2() = (%v, %v), want (%v, %v)", has, known, tt.avx2, tt.avx2Known)
			}
			if !c.HasFlag(tt.hasFlag) || c.HasFlag(tt.lacks) {
				t.Errorf("HasFlag(%s)=%v HasFlag(%s)=%v", tt.hasFlag, c.HasFlag(tt.hasFlag), tt.lacks, c.HasFlag(tt.lacks))
			}
			for i := 1; i < len(c.Flags); i++ {
				if c.Flags[i-1] >= c.Flags[i] {
					t.Fatalf("flags not sorted and unique at %d: %q %q", i, c.Flags[i-1], c.Flags[i])
				}
			}
		})
	}
}

func TestProbeCPUErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "cpuinfo")
	if err := os.WriteFile(empty, []byte("Hardware: something\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ path, want string }{
		{empty, "no processor entries"},
		{filepath.Join(dir, "missing"), "no such file"},
	}
	for _, tt := range tests {
		_, err := ProbeCPU(tt.path)
		if err == nil || !strings.Contains(err.Error(), tt.path) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ProbeCPU(%s) error = %v, want one naming the file and containing %q", tt.path, err, tt.want)
		}
	}
}
