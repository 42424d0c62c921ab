package discovery

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Port states as the kernel names them in .../ports/<n>/state.
const (
	PortDown   = "DOWN"
	PortInit   = "INIT"
	PortArmed  = "ARMED"
	PortActive = "ACTIVE"
)

// Adapter is one RDMA adapter under the InfiniBand sysfs root (e.g. mlx5_0).
type Adapter struct {
	Name string
	// NodeGUID is the content of node_guid, "" when absent.
	NodeGUID string
	Ports    []Port
}

// Port is one port of an adapter.
type Port struct {
	Number int
	// State is the logical state: ACTIVE, INIT, DOWN or ARMED. INIT with a
	// physical LinkUp means the cable is fine but no subnet manager has
	// brought the port up.
	State string
	// PhysState is the physical state, e.g. LinkUp, Polling, Disabled.
	PhysState string
	// RateGbps is the link rate, e.g. 200 for "200 Gb/sec (4X HDR)".
	RateGbps float64
	// LinkLayer is "InfiniBand" or "Ethernet" (RoCE).
	LinkLayer string
}

// ProbeInfiniBand reads the adapters under root (normally
// /sys/class/infiniband). A root that does not exist means a node without
// InfiniBand: no adapters and no error. A file that cannot be read or parsed is
// an error naming its path. Adapters are sorted by name, ports by number.
func ProbeInfiniBand(root string) ([]Adapter, error) {
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading InfiniBand adapters: %w", err)
	}
	var adapters []Adapter
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		// In sysfs every adapter is a symlink to its device directory.
		info, err := os.Stat(dir)
		if err != nil {
			return nil, fmt.Errorf("reading InfiniBand adapter: %w", err)
		}
		if !info.IsDir() {
			continue
		}
		a, err := readAdapter(dir, e.Name())
		if err != nil {
			return nil, err
		}
		adapters = append(adapters, a)
	}
	return adapters, nil
}

func readAdapter(dir, name string) (Adapter, error) {
	a := Adapter{Name: name}
	guid, err := os.ReadFile(filepath.Join(dir, "node_guid"))
	switch {
	case err == nil:
		a.NodeGUID = strings.TrimSpace(string(guid))
	case !errors.Is(err, fs.ErrNotExist):
		return a, fmt.Errorf("reading InfiniBand adapter %s: %w", name, err)
	}
	portsDir := filepath.Join(dir, "ports")
	entries, err := os.ReadDir(portsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return a, nil
	}
	if err != nil {
		return a, fmt.Errorf("reading ports of InfiniBand adapter %s: %w", name, err)
	}
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue // not a port directory
		}
		p, err := readPort(filepath.Join(portsDir, e.Name()), n)
		if err != nil {
			return a, err
		}
		a.Ports = append(a.Ports, p)
	}
	sort.Slice(a.Ports, func(i, j int) bool { return a.Ports[i].Number < a.Ports[j].Number })
	return a, nil
}

func readPort(dir string, number int) (Port, error) {
	p := Port{Number: number}
	var err error
	if p.State, err = readCodedState(filepath.Join(dir, "state")); err != nil {
		return p, err
	}
	switch p.State {
	case PortDown, PortInit, PortArmed, PortActive:
	default:
		return p, fmt.Errorf("reading %s: unknown port state %q", filepath.Join(dir, "state"), p.State)
	}
	if p.PhysState, err = readCodedState(filepath.Join(dir, "phys_state")); err != nil {
		return p, err
	}
	ratePath := filepath.Join(dir, "rate")
	rate, err := readTrimmed(ratePath)
	if err != nil {
		return p, err
	}
	if p.RateGbps, err = parseRate(rate); err != nil {
		return p, fmt.Errorf("reading %s: %w", ratePath, err)
	}
	layer, err := readTrimmed(filepath.Join(dir, "link_layer"))
	switch {
	case err == nil:
		p.LinkLayer = layer
	case errors.Is(err, fs.ErrNotExist):
		p.LinkLayer = "InfiniBand" // kernels before link_layer existed were IB only
	default:
		return p, err
	}
	return p, nil
}

func readTrimmed(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// readCodedState reads a file shaped "4: ACTIVE" and returns "ACTIVE".
func readCodedState(path string) (string, error) {
	s, err := readTrimmed(path)
	if err != nil {
		return "", err
	}
	code, name, ok := strings.Cut(s, ":")
	if _, err := strconv.Atoi(strings.TrimSpace(code)); !ok || err != nil || strings.TrimSpace(name) == "" {
		return "", fmt.Errorf("reading %s: %q is not shaped like \"4: ACTIVE\"", path, s)
	}
	return strings.TrimSpace(name), nil
}

// parseRate parses "200 Gb/sec (4X HDR)" into 200.
func parseRate(s string) (float64, error) {
	num, unit, _ := strings.Cut(s, " ")
	r, err := strconv.ParseFloat(num, 64)
	if err != nil || r < 0 || math.IsNaN(r) || math.IsInf(r, 0) || !strings.HasPrefix(unit, "Gb/sec") {
		return 0, fmt.Errorf("rate %q is not shaped like \"200 Gb/sec (4X HDR)\"", s)
	}
	return r, nil
}
