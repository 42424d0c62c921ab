package discovery

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

// sysPort is one port directory's files, written verbatim.
type sysPort struct {
	state, physState, rate, linkLayer string
}

// writeSysfs builds an InfiniBand sysfs tree under root:
// <root>/<adapter>/ports/<n>/{state,phys_state,rate,link_layer}.
func writeSysfs(t *testing.T, root string, adapters map[string]map[string]sysPort) {
	t.Helper()
	for name, ports := range adapters {
		dir := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Join(dir, "ports"), 0o755); err != nil {
			t.Fatal(err)
		}
		for n, p := range ports {
			pdir := filepath.Join(dir, "ports", n)
			if err := os.MkdirAll(pdir, 0o755); err != nil {
				t.Fatal(err)
			}
			for file, content := range map[string]string{"state": p.state, "phys_state": p.physState, "rate": p.rate, "link_layer": p.linkLayer} {
				if content == "" {
					continue
				}
				if err := os.WriteFile(filepath.Join(pdir, file), []byte(content+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

var (
	activeHDR = sysPort{"4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)", "InfiniBand"}
	activeEDR = sysPort{"4: ACTIVE", "5: LinkUp", "100 Gb/sec (4X EDR)", "InfiniBand"}
	initNoSM  = sysPort{"2: INIT", "5: LinkUp", "200 Gb/sec (4X HDR)", "InfiniBand"}
	downPort  = sysPort{"1: DOWN", "2: Polling", "10 Gb/sec (4X)", "InfiniBand"}
	disabled  = sysPort{"1: DOWN", "3: Disabled", "10 Gb/sec (4X)", "InfiniBand"}
	armedPort = sysPort{"3: ARMED", "5: LinkUp", "200 Gb/sec (4X HDR)", "InfiniBand"}
	roce      = sysPort{"4: ACTIVE", "5: LinkUp", "25 Gb/sec (1X EDR)", "Ethernet"}
)

func TestProbeInfiniBand(t *testing.T) {
	root := t.TempDir()
	writeSysfs(t, root, map[string]map[string]sysPort{
		"mlx5_0": {"1": activeHDR},
		"mlx5_1": {"1": initNoSM, "2": downPort, "10": armedPort},
		"mlx5_2": {"1": roce},
		"mlx5_3": {"1": disabled},
	})
	if err := os.WriteFile(filepath.Join(root, "mlx5_0", "node_guid"), []byte("0c42:a103:00b4:5c10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A port without link_layer (old kernels): InfiniBand.
	if err := os.Remove(filepath.Join(root, "mlx5_3", "ports", "1", "link_layer")); err != nil {
		t.Fatal(err)
	}
	// A stray file at the root is not an adapter.
	if err := os.WriteFile(filepath.Join(root, "README"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ProbeInfiniBand(root)
	if err != nil {
		t.Fatalf("ProbeInfiniBand: %v", err)
	}
	want := []Adapter{
		{Name: "mlx5_0", NodeGUID: "0c42:a103:00b4:5c10", Ports: []Port{{1, "ACTIVE", "LinkUp", 200, "InfiniBand"}}},
		{Name: "mlx5_1", Ports: []Port{
			{1, "INIT", "LinkUp", 200, "InfiniBand"},
			{2, "DOWN", "Polling", 10, "InfiniBand"},
			{10, "ARMED", "LinkUp", 200, "InfiniBand"},
		}},
		{Name: "mlx5_2", Ports: []Port{{1, "ACTIVE", "LinkUp", 25, "Ethernet"}}},
		{Name: "mlx5_3", Ports: []Port{{1, "DOWN", "Disabled", 10, "InfiniBand"}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ProbeInfiniBand =\n%+v\nwant\n%+v", got, want)
	}
}

func TestProbeInfiniBandSymlinkedAdapters(t *testing.T) {
	// Real sysfs: /sys/class/infiniband/mlx5_0 -> ../../devices/pci.../infiniband/mlx5_0
	base := t.TempDir()
	devices := filepath.Join(base, "devices")
	writeSysfs(t, devices, map[string]map[string]sysPort{"mlx5_0": {"1": activeHDR}})
	root := filepath.Join(base, "class", "infiniband")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(devices, "mlx5_0"), filepath.Join(root, "mlx5_0")); err != nil {
		t.Fatal(err)
	}
	got, err := ProbeInfiniBand(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != "mlx5_0" || len(got[0].Ports) != 1 || got[0].Ports[0].State != PortActive {
		t.Fatalf("got %+v", got)
	}
}

func TestProbeInfiniBandErrors(t *testing.T) {
	tests := []struct {
		name    string
		port    sysPort
		remove  string
		wantErr string // besides the path, which every error names
		badFile string
	}{
		{name: "missing state", port: activeHDR, remove: "state", badFile: "state", wantErr: "no such file"},
		{name: "missing rate", port: activeHDR, remove: "rate", badFile: "rate", wantErr: "no such file"},
		{name: "state without code", port: sysPort{"ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)", "InfiniBand"}, badFile: "state", wantErr: `"ACTIVE" is not shaped like`},
		{name: "unknown state", port: sysPort{"7: SLEEPY", "5: LinkUp", "200 Gb/sec (4X HDR)", "InfiniBand"}, badFile: "state", wantErr: `unknown port state "SLEEPY"`},
		{name: "bad rate", port: sysPort{"4: ACTIVE", "5: LinkUp", "fast", "InfiniBand"}, badFile: "rate", wantErr: `rate "fast"`},
		{name: "bad phys_state", port: sysPort{"4: ACTIVE", "LinkUp", "200 Gb/sec (4X HDR)", "InfiniBand"}, badFile: "phys_state", wantErr: "is not shaped like"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			writeSysfs(t, root, map[string]map[string]sysPort{"mlx5_0": {"1": tt.port}})
			if tt.remove != "" {
				if err := os.Remove(filepath.Join(root, "mlx5_0", "ports", "1", tt.remove)); err != nil {
					t.Fatal(err)
				}
			}
			_, err := ProbeInfiniBand(root)
			path := filepath.Join(root, "mlx5_0", "ports", "1", tt.badFile)
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ProbeInfiniBand() error = %v, want one naming %s and containing %q", err, path, tt.wantErr)
			}
		})
	}
}

func TestProbeInfiniBandNoRoot(t *testing.T) {
	got, err := ProbeInfiniBand(filepath.Join(t.TempDir(), "no-such-dir"))
	if err != nil || got != nil {
		t.Fatalf("ProbeInfiniBand(missing root) = %v, %v; want no adapters, no error", got, err)
	}
}

func TestProbeInfiniBandStateIsADirectory(t *testing.T) {
	// Unreadable even for root.
	root := t.TempDir()
	writeSysfs(t, root, map[string]map[string]sysPort{"mlx5_0": {"1": activeHDR}})
	state := filepath.Join(root, "mlx5_0", "ports", "1", "state")
	if err := os.Remove(state); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(state, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := ProbeInfiniBand(root)
	if err == nil || !strings.Contains(err.Error(), "reading "+state) {
		t.Fatalf("ProbeInfiniBand() error = %v, want one naming %s", err, state)
	}
}

func TestProbeInfiniBandUnreadable(t *testing.T) {
	if root := os.Getenv("LLMGW_TEST_IB_UNREADABLE_ROOT"); root != "" {
		// The child the root run below starts, as an unprivileged user.
		_, err := ProbeInfiniBand(root)
		state := filepath.Join(root, "mlx5_0", "ports", "1", "state")
		if err == nil || !strings.Contains(err.Error(), state) {
			t.Fatalf("ProbeInfiniBand() error = %v, want one naming %s", err, state)
		}
		return
	}
	root := t.TempDir()
	if os.Geteuid() == 0 {
		// Root reads files whatever their mode: probe as nobody instead, in a
		// copy of this test binary everyone may run.
		root = worldReadableDir(t)
	}
	writeSysfs(t, root, map[string]map[string]sysPort{"mlx5_0": {"1": activeHDR}})
	state := filepath.Join(root, "mlx5_0", "ports", "1", "state")
	if err := os.Chmod(state, 0); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		runAsNobody(t, "^TestProbeInfiniBandUnreadable$", "LLMGW_TEST_IB_UNREADABLE_ROOT="+root)
		return
	}
	_, err := ProbeInfiniBand(root)
	if err == nil || !strings.Contains(err.Error(), state) {
		t.Fatalf("ProbeInfiniBand() error = %v, want one naming %s", err, state)
	}
}

// worldReadableDir is a temporary directory every user may enter.
func worldReadableDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "llmgw-ib-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runAsNobody runs the test named by pattern in a copy of this test binary
// as uid/gid 65534, with env added, and fails t with its output when it
// fails.
func runAsNobody(t *testing.T, pattern string, env ...string) {
	t.Helper()
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(worldReadableDir(t), "discovery.test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run="+pattern, "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = filepath.Dir(bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
}
