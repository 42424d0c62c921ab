package discovery

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/spec"
)

func TestDiscover(t *testing.T) {
	h100, err := filepath.Abs(filepath.Join("testdata", "nvidia-smi", "h100x8.csv"))
	if err != nil {
		t.Fatal(err)
	}
	models, err := filepath.Abs(filepath.Join("testdata", "models"))
	if err != nil {
		t.Fatal(err)
	}
	gpuScript := writeScript(t, "cat '"+h100+"'\n")
	brokenScript := writeScript(t, "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'\nexit 9\n")
	ibRoot := t.TempDir()
	writeSysfs(t, ibRoot, map[string]map[string]sysPort{
		"mlx5_0": {"1": activeHDR}, "mlx5_1": {"1": activeEDR},
		"mlx5_2": {"1": initNoSM},
	})
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fabrics := []spec.Fabric{
		{Name: "ib-a", Adapters: []string{"mlx5_0", "mlx5_1"}},
		{Name: "ib-b", Adapters: []string{"mlx5_2", "mlx5_3"}},
	}

	tests := []struct {
		name      string
		decl      spec.Declaration
		opts      Options
		path      string // PATH for the test, "" leaves it alone
		check     func(t *testing.T, inv Inventory)
		wantLogs  []string
		forbidLog []string
	}{
		{
			name: "GPU node with two fabrics, one out of service",
			decl: spec.Declaration{
				Fabrics:   fabrics,
				ModelDirs: []string{models, filepath.Join(models, "gone")},
				Discovery: spec.Discovery{NvidiaSMI: gpuScript, IBRoot: ibRoot},
			},
			opts: Options{MeminfoPath: "testdata/proc/meminfo", CPUInfoPath: "testdata/proc/cpuinfo-xeon"},
			check: func(t *testing.T, inv Inventory) {
				if len(inv.GPUs) != 8 || inv.GPUError != "" || inv.GPUs[0].Class != "h100-80g" {
					t.Errorf("GPUs = %d (%q), error %q", len(inv.GPUs), firstClass(inv.GPUs), inv.GPUError)
				}
				if len(inv.Fabrics) != 2 || !inv.Fabrics[0].InService || inv.Fabrics[0].RateGbps != 100 || inv.Fabrics[1].InService {
					t.Errorf("Fabrics = %+v", inv.Fabrics)
				}
				if inv.Memory.TotalBytes != 2113472512*1024 || inv.CPU.Cores != 4 || !inv.CPU.AVX2 {
					t.Errorf("Memory = %+v, CPU cores %d avx2 %v", inv.Memory, inv.CPU.Cores, inv.CPU.AVX2)
				}
				if inv.Disk.Path != models || inv.Disk.TotalBytes == 0 || inv.DiskError != "" {
					t.Errorf("Disk = %+v (%s), want the first model dir measured", inv.Disk, inv.DiskError)
				}
				if len(inv.Models) != 5 {
					t.Errorf("Models = %d, want 5", len(inv.Models))
				}
				if len(inv.ModelProblems) != 1 || !strings.Contains(inv.ModelProblems[0], "gone does not exist") {
					t.Errorf("ModelProblems = %q", inv.ModelProblems)
				}
			},
			wantLogs: []string{
				`level=INFO msg="fabric in service" fabric=ib-a adapters="[mlx5_0 mlx5_1]" rate_gbps=100`,
				`level=WARN msg="fabric out of service" fabric=ib-b adapter=mlx5_2 found="port 1: INIT, phys LinkUp, 200 Gb/s, InfiniBand" reason="adapter mlx5_2 has no ACTIVE port (port 1: INIT); port 1 has a physical link but no subnet manager has activated it" ib_root=` + ibRoot,
				`level=WARN msg="fabric out of service" fabric=ib-b adapter=mlx5_3 found="no such adapter under ` + ibRoot + `" reason="adapter mlx5_3 not found under ` + ibRoot + `"`,
				`level=WARN msg="model dir problem"`,
			},
			forbidLog: []string{"fabric=ib-a adapter="},
		},
		{
			name: "CPU node: no nvidia-smi anywhere, no IB, no model dirs",
			decl: spec.Declaration{Discovery: spec.Discovery{IBRoot: filepath.Join(ibRoot, "absent")}},
			opts: Options{MeminfoPath: "testdata/proc/meminfo-old", CPUInfoPath: "testdata/proc/cpuinfo-neoverse"},
			path: t.TempDir(),
			check: func(t *testing.T, inv Inventory) {
				if len(inv.GPUs) != 0 || !inv.NvidiaSMIMissing || !strings.HasPrefix(inv.GPUError, "GPU discovery failed: nvidia-smi not found") {
					t.Errorf("GPUs %d, missing %v, error %q", len(inv.GPUs), inv.NvidiaSMIMissing, inv.GPUError)
				}
				if inv.Fabrics != nil || inv.FabricError != "" {
					t.Errorf("Fabrics = %+v, error %q", inv.Fabrics, inv.FabricError)
				}
				if inv.Disk.Path != "" || inv.DiskError != "" || inv.Models != nil || inv.ModelProblems != nil {
					t.Errorf("Disk %+v %q, models %v %q: want nothing probed", inv.Disk, inv.DiskError, inv.Models, inv.ModelProblems)
				}
				if inv.CPU.Cores != 3 || inv.Memory.TotalBytes != 8167848*1024 {
					t.Errorf("CPU %+v Memory %+v", inv.CPU, inv.Memory)
				}
			},
			wantLogs:  []string{`level=INFO msg="no nvidia-smi on PATH, reporting no GPUs" nvidia_smi=nvidia-smi`},
			forbidLog: []string{"level=WARN"},
		},
		{
			// The declaration's cpuinfo path is read (a Proxmox guest on the
			// default kvm64 CPU type lists x86 flags without avx2).
			name: "declared cpuinfo without avx2 warns",
			decl: spec.Declaration{Discovery: spec.Discovery{IBRoot: filepath.Join(ibRoot, "absent"), CPUInfo: "testdata/proc/cpuinfo-opteron"}},
			opts: Options{MeminfoPath: "testdata/proc/meminfo"},
			path: t.TempDir(),
			check: func(t *testing.T, inv Inventory) {
				if has, known := inv.CPU.HasAVX2(); has || !known || inv.CPU.Model != "AMD Opteron(tm) Processor 6380" {
					t.Errorf("CPU %q HasAVX2() = (%v, %v), want (false, true)", inv.CPU.Model, has, known)
				}
			},
			wantLogs: []string{`level=WARN msg="cpu has no avx2, cpu inference will be slow" cpu="AMD Opteron(tm) Processor 6380" cpuinfo=testdata/proc/cpuinfo-opteron`},
		},
		{
			name: "configured nvidia-smi missing is loud",
			decl: spec.Declaration{Discovery: spec.Discovery{NvidiaSMI: filepath.Join(ibRoot, "nvidia-smi"), IBRoot: ibRoot}},
			opts: Options{MeminfoPath: "testdata/proc/meminfo", CPUInfoPath: "testdata/proc/cpuinfo-xeon"},
			check: func(t *testing.T, inv Inventory) {
				if !inv.NvidiaSMIMissing || inv.GPUs != nil {
					t.Errorf("NvidiaSMIMissing = %v, GPUs %v", inv.NvidiaSMIMissing, inv.GPUs)
				}
			},
			wantLogs: []string{`level=WARN msg="gpu discovery failed" nvidia_smi=` + filepath.Join(ibRoot, "nvidia-smi")},
		},
		{
			name: "broken driver, unreadable IB root, missing /proc files",
			decl: spec.Declaration{
				Fabrics:   fabrics,
				Discovery: spec.Discovery{NvidiaSMI: brokenScript, IBRoot: notADir},
			},
			opts: Options{MeminfoPath: filepath.Join(ibRoot, "meminfo"), CPUInfoPath: filepath.Join(ibRoot, "cpuinfo"), DiskPath: filepath.Join(ibRoot, "nope")},
			check: func(t *testing.T, inv Inventory) {
				if inv.NvidiaSMIMissing || !strings.Contains(inv.GPUError, "exit status 9: NVIDIA-SMI has failed") {
					t.Errorf("GPUError = %q, missing %v", inv.GPUError, inv.NvidiaSMIMissing)
				}
				if inv.FabricError == "" || len(inv.Fabrics) != 2 || inv.Fabrics[0].InService || inv.Fabrics[1].InService {
					t.Errorf("Fabrics = %+v, error %q", inv.Fabrics, inv.FabricError)
				}
				if !strings.Contains(inv.Fabrics[0].Reason(), "InfiniBand discovery failed: reading InfiniBand adapters") {
					t.Errorf("Reason = %q", inv.Fabrics[0].Reason())
				}
				if inv.MemoryError == "" || inv.CPUError == "" || !strings.Contains(inv.DiskError, filepath.Join(ibRoot, "nope")) {
					t.Errorf("errors: memory %q cpu %q disk %q", inv.MemoryError, inv.CPUError, inv.DiskError)
				}
			},
			wantLogs: []string{
				`level=WARN msg="gpu discovery failed"`,
				`level=WARN msg="fabric out of service" fabric=ib-a adapters="[mlx5_0 mlx5_1]" ib_root=` + notADir,
				`level=WARN msg="memory discovery failed"`,
				`level=WARN msg="cpu discovery failed"`,
				`level=WARN msg="disk discovery failed"`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.path != "" {
				t.Setenv("PATH", tt.path)
			}
			var logs bytes.Buffer
			opts := tt.opts
			opts.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{
				ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
					if a.Key == slog.TimeKey {
						return slog.Attr{}
					}
					return a
				},
			}))
			inv := Discover(context.Background(), tt.decl, opts)
			tt.check(t, inv)
			for _, want := range tt.wantLogs {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("logs lack %s\nlogs:\n%s", want, logs.String())
				}
			}
			for _, forbid := range tt.forbidLog {
				if strings.Contains(logs.String(), forbid) {
					t.Errorf("logs contain %s\nlogs:\n%s", forbid, logs.String())
				}
			}
		})
	}
}

func firstClass(gpus []GPU) string {
	if len(gpus) == 0 {
		return ""
	}
	return gpus[0].Class
}

func TestDiscoverNilLogger(t *testing.T) {
	inv := Discover(context.Background(), spec.Declaration{
		Discovery: spec.Discovery{NvidiaSMI: filepath.Join(t.TempDir(), "none"), IBRoot: t.TempDir()},
	}, Options{MeminfoPath: "testdata/proc/meminfo", CPUInfoPath: "testdata/proc/cpuinfo-xeon"})
	if !inv.NvidiaSMIMissing || inv.CPU.Cores != 4 {
		t.Fatalf("Discover without a logger: %+v", inv)
	}
}
