package simhw

import (
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// SimAdapter is one simulated RDMA adapter (e.g. mlx5_0).
type SimAdapter struct {
	Name  string
	Ports []SimPort
}

// SimPort is one port of a simulated adapter, numbered from 1 in order.
type SimPort struct {
	// State is ACTIVE, INIT, ARMED or DOWN; empty means ACTIVE. INIT is a
	// cable that is up with no subnet manager, the classic failure.
	State string
	// RateGbps is the link rate, e.g. 200 (HDR) or 100 (EDR); 0 means 200,
	// or 10 for a DOWN port.
	RateGbps int
}

// portStates maps a state to the contents of state and phys_state.
var portStates = map[string][2]string{
	"DOWN":   {"1: DOWN", "2: Polling"},
	"INIT":   {"2: INIT", "5: LinkUp"},
	"ARMED":  {"3: ARMED", "5: LinkUp"},
	"ACTIVE": {"4: ACTIVE", "5: LinkUp"},
}

// rateNames are the kernel's "(width speed)" suffixes for common rates.
var rateNames = map[int]string{
	10: "4X", 20: "4X DDR", 25: "1X EDR", 40: "4X QDR", 50: "1X HDR", 56: "4X FDR",
	100: "4X EDR", 200: "4X HDR", 400: "4X NDR", 800: "4X XDR",
}

// WriteInfiniBand writes adapters under root in the shape of
// /sys/class/infiniband: <root>/<adapter>/node_guid and
// <root>/<adapter>/ports/<n>/{state,phys_state,rate,link_layer}, e.g.
// "4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)", "InfiniBand". Writing again
// overwrites the given adapters' files; other adapters are left alone.
func WriteInfiniBand(root string, adapters []SimAdapter) error {
	for _, a := range adapters {
		if a.Name == "" || strings.ContainsAny(a.Name, `/\`) || a.Name == "." || a.Name == ".." {
			return fmt.Errorf("simulated adapter name %q: want a plain name like mlx5_0", a.Name)
		}
		dir := filepath.Join(root, a.Name)
		if err := os.MkdirAll(filepath.Join(dir, "ports"), 0o755); err != nil {
			return fmt.Errorf("writing simulated adapter %s: %w", a.Name, err)
		}
		if err := writeFileAtomic(filepath.Join(dir, "node_guid"), []byte(nodeGUID(dir)+"\n"), 0o644); err != nil {
			return err
		}
		for i, p := range a.Ports {
			if err := writePort(root, a.Name, i+1, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// SetPortState changes one port's state (ACTIVE, INIT, ARMED or DOWN) in a
// tree written by WriteInfiniBand, keeping its rate: the way a test brings a
// subnet manager up or pulls a cable.
func SetPortState(root, adapter string, port int, state string) error {
	dir := filepath.Join(root, adapter, "ports", strconv.Itoa(port))
	st, ok := portStates[state]
	if !ok {
		return fmt.Errorf("port state %q: want ACTIVE, INIT, ARMED or DOWN", state)
	}
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("setting state of %s port %d: %w", adapter, port, err)
	}
	if err := writeFileAtomic(filepath.Join(dir, "state"), []byte(st[0]+"\n"), 0o644); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, "phys_state"), []byte(st[1]+"\n"), 0o644)
}

// RemoveAdapter deletes an adapter from a simulated tree, as if its card
// were gone.
func RemoveAdapter(root, adapter string) error {
	if adapter == "" || strings.ContainsAny(adapter, `/\`) {
		return fmt.Errorf("simulated adapter name %q: want a plain name like mlx5_0", adapter)
	}
	if err := os.RemoveAll(filepath.Join(root, adapter)); err != nil {
		return fmt.Errorf("removing simulated adapter %s: %w", adapter, err)
	}
	return nil
}

func writePort(root, adapter string, n int, p SimPort) error {
	state := p.State
	if state == "" {
		state = "ACTIVE"
	}
	st, ok := portStates[state]
	if !ok {
		return fmt.Errorf("simulated adapter %s port %d: state %q: want ACTIVE, INIT, ARMED or DOWN", adapter, n, p.State)
	}
	rate := p.RateGbps
	switch {
	case rate < 0:
		return fmt.Errorf("simulated adapter %s port %d: negative rate %d", adapter, n, rate)
	case rate == 0 && state == "DOWN":
		rate = 10
	case rate == 0:
		rate = 200
	}
	width, ok := rateNames[rate]
	if !ok {
		width = "4X"
	}
	dir := filepath.Join(root, adapter, "ports", strconv.Itoa(n))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("writing simulated adapter %s port %d: %w", adapter, n, err)
	}
	for file, content := range map[string]string{
		"state":      st[0],
		"phys_state": st[1],
		"rate":       fmt.Sprintf("%d Gb/sec (%s)", rate, width),
		"link_layer": "InfiniBand",
	} {
		if err := writeFileAtomic(filepath.Join(dir, file), []byte(content+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// nodeGUID derives a stable node_guid ("0c42:a103:00b4:5c10" shape) from the
// adapter's directory, so two simulated nodes do not share one.
func nodeGUID(dir string) string {
	h := fnv.New64a()
	h.Write([]byte(dir))
	v := h.Sum64()
	return fmt.Sprintf("%04x:%04x:%04x:%04x", v>>48, (v>>32)&0xffff, (v>>16)&0xffff, v&0xffff)
}
