// The simulated hardware (sim/simhw) read back through the agent's own
// discovery code, as `llmgw dev` and the e2e tests rely on.
package discovery_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/agent/discovery"
	"github.com/llmgw/llmgw/sim/simhw"
	"github.com/llmgw/llmgw/spec"
)

func TestNvidiaSMIReadBack(t *testing.T) {
	tests := []struct {
		name    string
		gpus    []simhw.SimGPU
		classes []string
	}{
		{name: "eight simhw.H100s", gpus: simhw.H100s(8, "node01"), classes: []string{"h100-80g", "h100-80g", "h100-80g", "h100-80g", "h100-80g", "h100-80g", "h100-80g", "h100-80g"}},
		{name: "mixed cards, quotes in a name", gpus: []simhw.SimGPU{
			{Name: "NVIDIA L40S", MemoryMiB: 46068, MemoryUsedMiB: 41022, UUID: "GPU-a47c1e9b-3f6d-2a8e-c5b0-7d1f4e9a2c38"},
			{Name: "NVIDIA GeForce RTX 4090", MemoryMiB: 24564, MemoryUsedMiB: 24564},
			{Name: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, MemoryUsedUnknown: true},
			{Name: "Tesla T4 'lab' $HOME", MemoryMiB: 15360},
		}, classes: []string{"l40s-48g", "rtx4090-24g", "a100-40g", "t4labhome-16g"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, err := simhw.WriteNvidiaSMI(t.TempDir(), tt.gpus)
			if err != nil {
				t.Fatal(err)
			}
			got, err := discovery.ProbeGPUs(context.Background(), path)
			if err != nil {
				t.Fatalf("ProbeGPUs on the simulated nvidia-smi: %v", err)
			}
			if len(got) != len(tt.gpus) {
				t.Fatalf("read back %d GPUs, wrote %d", len(got), len(tt.gpus))
			}
			uuids := map[string]bool{}
			for i, g := range got {
				want := tt.gpus[i]
				if g.Index != i || g.Name != want.Name || g.MemoryMiB != want.MemoryMiB || g.Class != tt.classes[i] {
					t.Errorf("GPU %d = {%d %q %d %s}, want {%d %q %d %s}", i, g.Index, g.Name, g.MemoryMiB, g.Class, i, want.Name, want.MemoryMiB, tt.classes[i])
				}
				if want.UUID != "" && g.UUID != want.UUID {
					t.Errorf("GPU %d UUID = %s, want %s", i, g.UUID, want.UUID)
				}
				if !uuidRE.MatchString(g.UUID) || uuids[g.UUID] {
					t.Errorf("GPU %d UUID %q is malformed or repeated", i, g.UUID)
				}
				uuids[g.UUID] = true
				switch {
				case want.MemoryUsedUnknown && g.MemoryUsedMiB != nil:
					t.Errorf("GPU %d MemoryUsedMiB = %d, want unknown (nil)", i, *g.MemoryUsedMiB)
				case !want.MemoryUsedUnknown && (g.MemoryUsedMiB == nil || *g.MemoryUsedMiB != want.MemoryUsedMiB):
					t.Errorf("GPU %d MemoryUsedMiB = %v, want %d", i, g.MemoryUsedMiB, want.MemoryUsedMiB)
				}
				if g.UtilizationPct == nil || *g.UtilizationPct != 0 || g.TemperatureC == nil || *g.TemperatureC != float64(30+i) || g.ECCErrors == nil || *g.ECCErrors != 0 {
					t.Errorf("GPU %d utilization/temperature/ecc = %v/%v/%v, want 0/%d/0", i, g.UtilizationPct, g.TemperatureC, g.ECCErrors, 30+i)
				}
			}
		})
	}
}

var uuidRE = regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func TestNvidiaSMIAnswersLikeTheRealOne(t *testing.T) {
	gpus := simhw.H100s(2, "node07")
	gpus[0].MemoryUsedMiB = 61440
	gpus[1].MemoryUsedUnknown = true
	path, err := simhw.WriteNvidiaSMI(t.TempDir(), gpus)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     []string
		stdout   string
		stderr   string
		exitCode int
	}{
		{name: "fields in the order asked", args: []string{"--query-gpu=name,index,uuid", "--format=csv,noheader,nounits"},
			stdout: "NVIDIA H100 80GB HBM3, 0, " + gpus[0].UUID + "\nNVIDIA H100 80GB HBM3, 1, " + gpus[1].UUID + "\n"},
		{name: "header and units", args: []string{"--query-gpu=index,memory.total,utilization.gpu,temperature.gpu", "--format=csv"},
			stdout: "index, memory.total [MiB], utilization.gpu [%], temperature.gpu\n0, 81559 MiB, 0 %, 30\n1, 81559 MiB, 0 %, 31\n"},
		{name: "header without units in values", args: []string{"--query-gpu=index,memory.total", "--format=csv,nounits"},
			stdout: "index, memory.total [MiB]\n0, 81559\n1, 81559\n"},
		{name: "memory used and free", args: []string{"--query-gpu=index,memory.used,memory.free", "--format=csv"},
			stdout: "index, memory.used [MiB], memory.free [MiB]\n0, 61440 MiB, 20119 MiB\n1, [N/A], [N/A]\n"},
		{name: "list", args: []string{"-L"},
			stdout: "GPU 0: NVIDIA H100 80GB HBM3 (UUID: " + gpus[0].UUID + ")\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: " + gpus[1].UUID + ")\n"},
		{name: "unknown field", args: []string{"--query-gpu=index,fan.speedz", "--format=csv"},
			stderr: "Field \"fan.speedz\" is not a valid field to query.\n", exitCode: 2},
		{name: "query without format", args: []string{"--query-gpu=index"},
			stderr: "--query-gpu needs --format=csv[,noheader][,nounits]\n", exitCode: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := run(t, path, tt.args...)
			if stdout != tt.stdout || stderr != tt.stderr || code != tt.exitCode {
				t.Fatalf("%s %v:\nstdout %q\nstderr %q\nexit %d\nwant\nstdout %q\nstderr %q\nexit %d",
					path, tt.args, stdout, stderr, code, tt.stdout, tt.stderr, tt.exitCode)
			}
		})
	}

	// The --format=csv output (header, units) parses to the same GPUs.
	out, _, _ := run(t, path, "--query-gpu="+discovery.GPUQueryFields, "--format=csv")
	withUnits, err := discovery.ParseNvidiaSMI(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := discovery.ProbeGPUs(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(withUnits, plain) {
		t.Fatalf("csv with header and units parsed to %+v, noheader,nounits to %+v", withUnits, plain)
	}
}

func run(t *testing.T, path string, args ...string) (stdout, stderr string, exitCode int) {
	t.Helper()
	var out, errOut strings.Builder
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		exitCode = exit.ExitCode()
	default:
		t.Fatalf("running %s: %v", path, err)
	}
	return out.String(), errOut.String(), exitCode
}

func TestNvidiaSMIFailures(t *testing.T) {
	noGPUs, err := simhw.WriteNvidiaSMI(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	broken, err := simhw.WriteBrokenNvidiaSMI(t.TempDir(), "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", 9)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, wantErr string
	}{
		{"no devices", noGPUs, "GPU discovery failed: running " + noGPUs + ": exit status 6: No devices were found"},
		{"driver gone", broken, "GPU discovery failed: running " + broken + ": exit status 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gpus, err := discovery.ProbeGPUs(context.Background(), tt.path)
			if err == nil || err.Error() != tt.wantErr || gpus != nil {
				t.Fatalf("ProbeGPUs = %v, %v; want error %q", gpus, err, tt.wantErr)
			}
			if errors.Is(err, discovery.ErrNvidiaSMINotFound) {
				t.Fatalf("a failing nvidia-smi must not look like a missing one: %v", err)
			}
		})
	}
}

func TestWriteNvidiaSMIRejects(t *testing.T) {
	tests := []struct {
		name string
		gpus []simhw.SimGPU
		want string
	}{
		{"comma in name", []simhw.SimGPU{{Name: "NVIDIA H100, 80GB", MemoryMiB: 1}}, `simulated GPU 0: name "NVIDIA H100, 80GB"`},
		{"empty name", []simhw.SimGPU{simhw.H100s(1, "x")[0], {MemoryMiB: 1}}, "simulated GPU 1: name"},
		{"space in uuid", []simhw.SimGPU{{Name: "NVIDIA L4", UUID: "GPU-1 2"}}, `uuid "GPU-1 2"`},
		{"more used than there is", []simhw.SimGPU{{Name: "NVIDIA L4", MemoryMiB: 23034, MemoryUsedMiB: 23035}}, "simulated GPU 0: memory used 23035 MiB exceeds its memory of 23034 MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := simhw.WriteNvidiaSMI(dir, tt.gpus)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("simhw.WriteNvidiaSMI error = %v, want containing %q", err, tt.want)
			}
			if _, err := os.Stat(filepath.Join(dir, "nvidia-smi")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a rejected script was written anyway (%v)", err)
			}
		})
	}
}

func TestH100sDeterministic(t *testing.T) {
	a, b, c := simhw.H100s(4, "node01"), simhw.H100s(4, "node01"), simhw.H100s(4, "node02")
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed gave different GPUs")
	}
	seen := map[string]bool{}
	for i := range a {
		if a[i].UUID == c[i].UUID {
			t.Fatalf("seeds node01 and node02 share UUID %s", a[i].UUID)
		}
		seen[a[i].UUID], seen[c[i].UUID] = true, true
		if a[i].Name != simhw.H100Name || a[i].MemoryMiB != simhw.H100MemoryMiB {
			t.Fatalf("simhw.H100s()[%d] = %+v", i, a[i])
		}
	}
	if len(seen) != 8 {
		t.Fatalf("want 8 distinct UUIDs, got %d", len(seen))
	}
}

func TestInfiniBandReadBack(t *testing.T) {
	root := t.TempDir()
	err := simhw.WriteInfiniBand(root, []simhw.SimAdapter{
		{Name: "mlx5_0", Ports: []simhw.SimPort{{State: "ACTIVE", RateGbps: 200}}},
		{Name: "mlx5_1", Ports: []simhw.SimPort{{State: "ACTIVE", RateGbps: 100}, {State: "DOWN"}}},
		{Name: "mlx5_2", Ports: []simhw.SimPort{{State: "INIT", RateGbps: 200}}},
		{Name: "mlx5_3", Ports: []simhw.SimPort{{State: "ARMED", RateGbps: 400}, {}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := discovery.ProbeInfiniBand(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []discovery.Adapter{
		{Name: "mlx5_0", Ports: []discovery.Port{{Number: 1, State: "ACTIVE", PhysState: "LinkUp", RateGbps: 200, LinkLayer: "InfiniBand"}}},
		{Name: "mlx5_1", Ports: []discovery.Port{
			{Number: 1, State: "ACTIVE", PhysState: "LinkUp", RateGbps: 100, LinkLayer: "InfiniBand"},
			{Number: 2, State: "DOWN", PhysState: "Polling", RateGbps: 10, LinkLayer: "InfiniBand"},
		}},
		{Name: "mlx5_2", Ports: []discovery.Port{{Number: 1, State: "INIT", PhysState: "LinkUp", RateGbps: 200, LinkLayer: "InfiniBand"}}},
		{Name: "mlx5_3", Ports: []discovery.Port{
			{Number: 1, State: "ARMED", PhysState: "LinkUp", RateGbps: 400, LinkLayer: "InfiniBand"},
			{Number: 2, State: "ACTIVE", PhysState: "LinkUp", RateGbps: 200, LinkLayer: "InfiniBand"},
		}},
	}
	guidRE := regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{4}:[0-9a-f]{4}:[0-9a-f]{4}$`)
	for i := range got {
		if !guidRE.MatchString(got[i].NodeGUID) {
			t.Errorf("%s node_guid = %q", got[i].Name, got[i].NodeGUID)
		}
		got[i].NodeGUID = ""
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read back\n%+v\nwant\n%+v", got, want)
	}

	// The exact sysfs shapes.
	for file, want := range map[string]string{
		"mlx5_0/ports/1/state":      "4: ACTIVE\n",
		"mlx5_0/ports/1/phys_state": "5: LinkUp\n",
		"mlx5_0/ports/1/rate":       "200 Gb/sec (4X HDR)\n",
		"mlx5_0/ports/1/link_layer": "InfiniBand\n",
		"mlx5_1/ports/1/rate":       "100 Gb/sec (4X EDR)\n",
		"mlx5_1/ports/2/state":      "1: DOWN\n",
		"mlx5_1/ports/2/rate":       "10 Gb/sec (4X)\n",
		"mlx5_2/ports/1/state":      "2: INIT\n",
		"mlx5_3/ports/1/state":      "3: ARMED\n",
	} {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q (%v), want %q", file, b, err, want)
		}
	}
}

func TestInfiniBandFabricLifecycle(t *testing.T) {
	root := t.TempDir()
	if err := simhw.WriteInfiniBand(root, []simhw.SimAdapter{
		{Name: "mlx5_0", Ports: []simhw.SimPort{{State: "ACTIVE", RateGbps: 200}}},
		{Name: "mlx5_1", Ports: []simhw.SimPort{{State: "INIT", RateGbps: 100}}},
	}); err != nil {
		t.Fatal(err)
	}
	fabrics := []spec.Fabric{{Name: "ib-a", Adapters: []string{"mlx5_0", "mlx5_1"}}}
	verdict := func() discovery.FabricVerdict {
		t.Helper()
		found, err := discovery.ProbeInfiniBand(root)
		if err != nil {
			t.Fatal(err)
		}
		return discovery.EvaluateFabrics(fabrics, found, root)[0]
	}
	steps := []struct {
		name   string
		change func() error
		reason string
	}{
		{"no subnet manager", func() error { return nil }, "adapter mlx5_1 has no ACTIVE port (port 1: INIT)"},
		{"subnet manager up", func() error { return simhw.SetPortState(root, "mlx5_1", 1, "ACTIVE") }, "in service at 100 Gb/s"},
		{"cable pulled", func() error { return simhw.SetPortState(root, "mlx5_0", 1, "DOWN") }, "adapter mlx5_0 has no ACTIVE port (port 1: DOWN)"},
		{"card gone", func() error { return simhw.RemoveAdapter(root, "mlx5_0") }, "adapter mlx5_0 not found under " + root},
		{"card back", func() error {
			return simhw.WriteInfiniBand(root, []simhw.SimAdapter{{Name: "mlx5_0", Ports: []simhw.SimPort{{RateGbps: 200}}}})
		}, "in service at 100 Gb/s"},
	}
	for _, s := range steps {
		if err := s.change(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := verdict().Reason(); !strings.HasPrefix(got, s.reason) {
			t.Fatalf("%s: Reason() = %q, want %q", s.name, got, s.reason)
		}
	}
}

func TestInfiniBandRejects(t *testing.T) {
	root := t.TempDir()
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"unknown state", simhw.WriteInfiniBand(root, []simhw.SimAdapter{{Name: "mlx5_0", Ports: []simhw.SimPort{{State: "UP"}}}}), `state "UP"`},
		{"path in name", simhw.WriteInfiniBand(root, []simhw.SimAdapter{{Name: "../x"}}), `name "../x"`},
		{"negative rate", simhw.WriteInfiniBand(root, []simhw.SimAdapter{{Name: "mlx5_0", Ports: []simhw.SimPort{{RateGbps: -1}}}}), "negative rate"},
		{"set unknown state", simhw.SetPortState(root, "mlx5_0", 1, "SLEEP"), `port state "SLEEP"`},
		{"set on missing port", simhw.SetPortState(root, "mlx5_9", 1, "ACTIVE"), "setting state of mlx5_9 port 1"},
	}
	for _, tt := range tests {
		if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) {
			t.Errorf("%s: error %v, want containing %q", tt.name, tt.err, tt.want)
		}
	}
}

func TestWriteCPUInfo(t *testing.T) {
	tests := []struct {
		name  string
		flags []string
		avx2  bool
	}{
		{"kvm64", simhw.KVM64Flags, false},
		{"host", simhw.HostFlags, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cpuinfo")
			if err := simhw.WriteCPUInfo(path, "Common KVM processor", 4, tt.flags); err != nil {
				t.Fatal(err)
			}
			c, err := discovery.ProbeCPU(path)
			if err != nil {
				t.Fatal(err)
			}
			has, known := c.HasAVX2()
			if c.Cores != 4 || c.Model != "Common KVM processor" || has != tt.avx2 || !known {
				t.Fatalf("ProbeCPU = %d cores %q, HasAVX2() = (%v, %v); want 4, avx2 %v known", c.Cores, c.Model, has, known, tt.avx2)
			}
		})
	}
}
