package discovery

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func fptr(f float64) *float64 { return &f }
func uptr(u uint64) *uint64   { return &u }

func TestParseNvidiaSMI(t *testing.T) {
	tests := []struct {
		file  string
		count int
		// checks on selected GPUs, by position
		want map[int]GPU
	}{
		{file: "h100x8.csv", count: 8, want: map[int]GPU{
			0: {Index: 0, UUID: "GPU-4b7d7a5e-1f0c-6e3b-9a2d-3c5f8e1a7b90", Name: "NVIDIA H100 80GB HBM3", Class: "h100-80g", MemoryMiB: 81559,
				UtilizationPct: fptr(0), TemperatureC: fptr(33), ECCErrors: uptr(0), MemoryUsedMiB: uptr(1)},
			3: {Index: 3, UUID: "GPU-71a3e9c8-5b2d-4f6e-a0c7-d9e8f1b3a264", Name: "NVIDIA H100 80GB HBM3", Class: "h100-80g", MemoryMiB: 81559,
				UtilizationPct: fptr(100), TemperatureC: fptr(58), ECCErrors: uptr(0), MemoryUsedMiB: uptr(78802)},
			7: {Index: 7, UUID: "GPU-b8e2f6d4-0a7c-4d1e-a3b9-6c5f2e8d0a17", Name: "NVIDIA H100 80GB HBM3", Class: "h100-80g", MemoryMiB: 81559,
				UtilizationPct: fptr(0), TemperatureC: fptr(34), ECCErrors: uptr(2), MemoryUsedMiB: uptr(1)},
		}},
		{file: "a100-sxm4-40gb.csv", count: 2, want: map[int]GPU{
			1: {Index: 1, UUID: "GPU-6d2b9e4f-1a7c-5c3e-b8f0-9e4a2d7c1b63", Name: "NVIDIA A100-SXM4-40GB", Class: "a100-40g", MemoryMiB: 40960,
				UtilizationPct: fptr(87), TemperatureC: fptr(61), ECCErrors: uptr(0), MemoryUsedMiB: uptr(38112)},
		}},
		{file: "l40s.csv", count: 1, want: map[int]GPU{
			0: {Index: 0, UUID: "GPU-a47c1e9b-3f6d-2a8e-c5b0-7d1f4e9a2c38", Name: "NVIDIA L40S", Class: "l40s-48g", MemoryMiB: 46068,
				UtilizationPct: fptr(3), TemperatureC: fptr(42), ECCErrors: uptr(0), MemoryUsedMiB: uptr(812)},
		}},
		{file: "rtx4090.csv", count: 1, want: map[int]GPU{
			0: {Index: 0, UUID: "GPU-3e8b5d1a-9c4f-e2a7-6b0d-f8c1a5e9d742", Name: "NVIDIA GeForce RTX 4090", Class: "rtx4090-24g", MemoryMiB: 24564,
				UtilizationPct: fptr(1), TemperatureC: fptr(45), ECCErrors: nil, MemoryUsedMiB: uptr(2210)},
		}},
		{file: "na.csv", count: 3, want: map[int]GPU{
			0: {Index: 0, UUID: "GPU-1c7e4a9d-2b5f-8e3c-a6d0-4f9b1e7c2a58", Name: "NVIDIA A100-SXM4-80GB", Class: "a100-80g", MemoryMiB: 81920,
				UtilizationPct: nil, TemperatureC: fptr(38), ECCErrors: uptr(0), MemoryUsedMiB: uptr(512)},
			1: {Index: 1, UUID: "GPU-8f2a6d3c-7e1b-4c9a-b5e0-2d8f6a1c9e47", Name: "Tesla T4", Class: "t4-16g", MemoryMiB: 15360},
			2: {Index: 2, UUID: "GPU-d4b9e1f7-6a2c-3e8d-9f5b-0c7a4e2d8b16", Name: "NVIDIA A100 80GB PCIe", Class: "a100-80g", MemoryMiB: 81920},
		}},
		{file: "with-header-units.csv", count: 1, want: map[int]GPU{
			0: {Index: 0, UUID: "GPU-4b7d7a5e-1f0c-6e3b-9a2d-3c5f8e1a7b90", Name: "NVIDIA H100 80GB HBM3", Class: "h100-80g", MemoryMiB: 81559,
				UtilizationPct: fptr(7), TemperatureC: fptr(33), ECCErrors: uptr(0), MemoryUsedMiB: uptr(1024)},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", "nvidia-smi", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			gpus, err := ParseNvidiaSMI(f)
			if err != nil {
				t.Fatalf("ParseNvidiaSMI: %v", err)
			}
			if len(gpus) != tt.count {
				t.Fatalf("got %d GPUs, want %d", len(gpus), tt.count)
			}
			for i, want := range tt.want {
				assertGPU(t, gpus[i], want)
			}
		})
	}
}

func assertGPU(t *testing.T, got, want GPU) {
	t.Helper()
	if got.Index != want.Index || got.UUID != want.UUID || got.Name != want.Name || got.Class != want.Class || got.MemoryMiB != want.MemoryMiB {
		t.Errorf("GPU = {%d %s %q %s %d}, want {%d %s %q %s %d}",
			got.Index, got.UUID, got.Name, got.Class, got.MemoryMiB, want.Index, want.UUID, want.Name, want.Class, want.MemoryMiB)
	}
	eqF := func(field string, g, w *float64) {
		switch {
		case g == nil && w == nil:
		case g == nil || w == nil:
			t.Errorf("GPU %d %s = %v, want %v (nil means unknown)", got.Index, field, g, w)
		case *g != *w:
			t.Errorf("GPU %d %s = %v, want %v", got.Index, field, *g, *w)
		}
	}
	eqF("UtilizationPct", got.UtilizationPct, want.UtilizationPct)
	eqF("TemperatureC", got.TemperatureC, want.TemperatureC)
	eqU := func(field string, g, w *uint64) {
		switch {
		case g == nil && w == nil:
		case g == nil || w == nil:
			t.Errorf("GPU %d %s = %v, want %v (nil means unknown)", got.Index, field, g, w)
		case *g != *w:
			t.Errorf("GPU %d %s = %d, want %d", got.Index, field, *g, *w)
		}
	}
	eqU("ECCErrors", got.ECCErrors, want.ECCErrors)
	eqU("MemoryUsedMiB", got.MemoryUsedMiB, want.MemoryUsedMiB)
}

func TestParseNvidiaSMIErrors(t *testing.T) {
	tests := []struct {
		name, input, wantErr string
	}{
		{"too few fields", "0, GPU-1, NVIDIA L40S, 46068\n", "line 1: want 8 fields"},
		{"output of an older query without memory.used", "0, GPU-1, NVIDIA L40S, 46068, 0, 30, 0\n", "line 1: want 8 fields"},
		{"bad index", "x, GPU-1, NVIDIA L40S, 46068, 0, 30, 0, 812\n", `line 1: index "x"`},
		{"bad memory", "0, GPU-1, NVIDIA L40S, lots, 0, 30, 0, 812\n", `memory.total of GPU 0: "lots"`},
		{"bad temperature on line 2", "0, GPU-1, NVIDIA L40S, 46068, 0, 30, 0, 812\n1, GPU-2, NVIDIA L40S, 46068, 0, hot, 0, 812\n", `line 2: temperature.gpu of GPU 1: "hot"`},
		{"bad ecc", "0, GPU-1, NVIDIA L40S, 46068, 0, 30, -1, 812\n", "ecc.errors.uncorrected.volatile.total of GPU 0"},
		{"bad memory used", "0, GPU-1, NVIDIA L40S, 46068, 0, 30, 0, some\n", `line 1: memory.used of GPU 0: "some" is not a number of MiB`},
		{"negative memory used", "0, GPU-1, NVIDIA L40S, 46068, 0, 30, 0, -5 MiB\n", `memory.used of GPU 0: "-5 MiB"`},
		{"unknown uuid", "0, [N/A], NVIDIA L40S, 46068, 0, 30, 0, 812\n", "uuid of GPU 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseNvidiaSMI(strings.NewReader(tt.input))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ParseNvidiaSMI() error = %v, want containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestParseNvidiaSMINameWithComma(t *testing.T) {
	gpus, err := ParseNvidiaSMI(strings.NewReader("0, GPU-1, NVIDIA Odd, Name, 16384, 0, 30, 0, 2048\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 1 || gpus[0].Name != "NVIDIA Odd, Name" || gpus[0].MemoryMiB != 16384 ||
		gpus[0].MemoryUsedMiB == nil || *gpus[0].MemoryUsedMiB != 2048 {
		t.Fatalf("got %+v", gpus)
	}
}

// writeScript writes an executable sh script into a temp dir.
func writeScript(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nvidia-smi")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestProbeGPUs(t *testing.T) {
	h100, err := filepath.Abs(filepath.Join("testdata", "nvidia-smi", "h100x8.csv"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		path         string
		wantGPUs     int
		wantErr      string
		wantExact    bool
		wantNotFound bool
	}{
		{name: "prints the CSV", path: writeScript(t, `
case "$1" in --query-gpu=index,uuid,name,memory.total,utilization.gpu,temperature.gpu,ecc.errors.uncorrected.volatile.total,memory.used) ;; *) echo "bad args: $*" >&2; exit 2 ;; esac
case "$2" in --format=csv,noheader,nounits) ;; *) echo "bad format: $*" >&2; exit 2 ;; esac
cat '`+h100+`'
`), wantGPUs: 8},
		// Issue 18: "not found" once, saying where, not the exec package's
		// error nested in it too.
		{name: "missing executable", path: "/nonexistent/nvidia-smi", wantErr: "GPU discovery failed: nvidia-smi not found at /nonexistent/nvidia-smi", wantExact: true, wantNotFound: true},
		{name: "not on PATH", path: "llmgw-no-such-nvidia-smi", wantErr: `GPU discovery failed: nvidia-smi not found (no "llmgw-no-such-nvidia-smi" on PATH)`, wantExact: true, wantNotFound: true},
		{name: "driver not loaded, message on stdout", path: writeScript(t, `
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running."
echo
exit 9
`), wantErr: "GPU discovery failed: running "},
		{name: "failure on stderr wins", path: writeScript(t, `
echo "ignored stdout"
echo "" >&2
echo "Unable to determine the device handle for GPU0000:18:00.0: Unknown Error" >&2
echo "second line" >&2
exit 15
`), wantErr: "exit status 15: Unable to determine the device handle for GPU0000:18:00.0: Unknown Error"},
		{name: "no devices", path: writeScript(t, "echo 'No devices were found'\nexit 6\n"), wantErr: "exit status 6: No devices were found"},
		{name: "exit 0 with nothing", path: writeScript(t, "exit 0\n"), wantErr: "listed no GPUs"},
		{name: "garbage", path: writeScript(t, "echo hello\n"), wantErr: "GPU discovery failed: parsing output of"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gpus, err := ProbeGPUs(context.Background(), tt.path)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ProbeGPUs: %v", err)
				}
				if len(gpus) != tt.wantGPUs {
					t.Fatalf("got %d GPUs, want %d", len(gpus), tt.wantGPUs)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ProbeGPUs() = %d GPUs, error %v; want error containing %q", len(gpus), err, tt.wantErr)
			}
			if tt.wantExact && err.Error() != tt.wantErr {
				t.Errorf("ProbeGPUs() error %q, want exactly %q", err, tt.wantErr)
			}
			if gpus != nil {
				t.Errorf("ProbeGPUs returned %d GPUs with an error", len(gpus))
			}
			if got := errors.Is(err, ErrNvidiaSMINotFound); got != tt.wantNotFound {
				t.Errorf("errors.Is(err, ErrNvidiaSMINotFound) = %v, want %v (err: %v)", got, tt.wantNotFound, err)
			}
		})
	}
}

func TestProbeGPUsDriverMessage(t *testing.T) {
	path := writeScript(t, "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"\nexit 9\n")
	_, err := ProbeGPUs(context.Background(), path)
	want := "GPU discovery failed: running " + path + ": exit status 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v\nwant    %s", err, want)
	}
}

func TestProbeGPUsContextCancelled(t *testing.T) {
	path := writeScript(t, "exec sleep 30\n")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := ProbeGPUs(ctx, path)
	if err == nil || !strings.Contains(err.Error(), "GPU discovery failed") || !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v, want GPU discovery failed wrapping context.Canceled", err)
	}
}
