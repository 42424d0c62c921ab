package discovery

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParseNvidiaSMI: whatever nvidia-smi prints, the parser returns GPUs
// or an error naming the line, never a panic; a GPU it returns has an
// index, a uuid and a name, and finite utilization and temperature (a
// NaN would reach the metrics and the scheduler).
func FuzzParseNvidiaSMI(f *testing.F) {
	for _, seed := range []string{
		"0, GPU-1c2d, NVIDIA H100 80GB HBM3, 81559, 3, 34, 0, 1\n",
		"index, uuid, name, memory.total [MiB], utilization.gpu [%], temperature.gpu, ecc.errors.uncorrected.volatile.total, memory.used [MiB]\n0, GPU-a, NVIDIA A100-SXM4-40GB, 40960 MiB, 0 %, 31, [N/A], 0 MiB\n",
		"0, GPU-a, NVIDIA L40S, 46068, [Not Supported], [N/A], [N/A], [N/A]\n1, GPU-b, Tesla, V100, 16384, 1, 40, 0, 3\n",
		"0, GPU-a, X, 1, NaN, +Inf, 0, 0\n",
		"-1, GPU-a, X, 1, 1, 1, 0, 0\n",
		"\n\n0,,,,,,,\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, out string) {
		gpus, err := ParseNvidiaSMI(strings.NewReader(out))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "line ") && !strings.HasPrefix(err.Error(), "reading nvidia-smi output") {
				t.Fatalf("error does not name the line: %v", err)
			}
			return
		}
		for _, g := range gpus {
			if g.Index < 0 || g.UUID == "" || g.Name == "" {
				t.Fatalf("GPU without index, uuid or name: %+v", g)
			}
			for what, v := range map[string]*float64{"utilization": g.UtilizationPct, "temperature": g.TemperatureC} {
				if v != nil && (math.IsNaN(*v) || math.IsInf(*v, 0)) {
					t.Fatalf("GPU %d: %s %v is not a finite number", g.Index, what, *v)
				}
			}
		}
	})
}

// FuzzInfiniBandSysfs: whatever a port's state, phys_state, rate and
// link_layer files hold, probing the tree returns adapters or an error
// naming the file, never a panic; a port it returns has a known state and
// a finite rate of at least 0 (the fabric's rate is the slowest active
// link, and a NaN or infinite one would poison it).
func FuzzInfiniBandSysfs(f *testing.F) {
	f.Add("4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)", "InfiniBand")
	f.Add("1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)", "Ethernet")
	f.Add("4: ACTIVE", "5: LinkUp", "NaN Gb/sec", "InfiniBand")
	f.Add("4: ACTIVE", "5: LinkUp", "Inf Gb/sec", "InfiniBand")
	f.Add("4:ACTIVE\n", "5:", "-1 Gb/sec", "")
	f.Add("ACTIVE", "LinkUp", "200", "InfiniBand")
	f.Fuzz(func(t *testing.T, state, phys, rate, layer string) {
		root := t.TempDir()
		port := filepath.Join(root, "mlx5_0", "ports", "1")
		if err := os.MkdirAll(port, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, v := range map[string]string{"state": state, "phys_state": phys, "rate": rate, "link_layer": layer} {
			if err := os.WriteFile(filepath.Join(port, name), []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		adapters, err := ProbeInfiniBand(root)
		if err != nil {
			if !strings.Contains(err.Error(), root) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		for _, a := range adapters {
			for _, p := range a.Ports {
				switch p.State {
				case PortDown, PortInit, PortArmed, PortActive:
				default:
					t.Fatalf("port with state %q accepted", p.State)
				}
				if math.IsNaN(p.RateGbps) || math.IsInf(p.RateGbps, 0) || p.RateGbps < 0 {
					t.Fatalf("port rate %v accepted from %q", p.RateGbps, rate)
				}
			}
		}
	})
}
