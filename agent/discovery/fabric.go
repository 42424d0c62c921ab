package discovery

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/llmgw/llmgw/spec"
)

// FabricVerdict compares one declared fabric with what discovery found on
// this node. A fabric is in service only when every declared adapter exists
// and has at least one ACTIVE port.
type FabricVerdict struct {
	Name     string
	Adapters []string
	// InService is true when the node may advertise this fabric.
	InService bool
	// RateGbps is the slowest ACTIVE link among the declared adapters; 0 when
	// the fabric is out of service.
	RateGbps float64
	// Problems say why the fabric is out of service, one per adapter, e.g.
	// "adapter mlx5_0 has no ACTIVE port (port 1: INIT)".
	Problems []string
	// Checks hold, per declared adapter, what was found, for logs and
	// `llmgw ctl` output.
	Checks []AdapterCheck
}

// AdapterCheck is what discovery found for one declared adapter.
type AdapterCheck struct {
	Adapter string
	// Present is true when the adapter exists under the sysfs root.
	Present bool
	// Active is true when it has at least one ACTIVE port.
	Active bool
	// Found describes the adapter as found, e.g.
	// "port 1: INIT, phys LinkUp, 200 Gb/s, InfiniBand" or
	// "no such adapter under /sys/class/infiniband".
	Found string
}

// Reason says in one line why the fabric is or is not in service:
// "in service at 200 Gb/s", or the problems joined with "; ".
func (v FabricVerdict) Reason() string {
	if v.InService {
		return "in service at " + strconv.FormatFloat(v.RateGbps, 'f', -1, 64) + " Gb/s"
	}
	if len(v.Problems) == 0 {
		return "out of service"
	}
	return strings.Join(v.Problems, "; ")
}

// EvaluateFabrics gives a verdict for every declared fabric, in declaration
// order, from the adapters found under root (root only appears in messages).
// A missing adapter, or one without an ACTIVE port, takes its fabric out of
// service on this node.
func EvaluateFabrics(decl []spec.Fabric, found []Adapter, root string) []FabricVerdict {
	if len(decl) == 0 {
		return nil
	}
	byName := make(map[string]Adapter, len(found))
	for _, a := range found {
		byName[a.Name] = a
	}
	verdicts := make([]FabricVerdict, 0, len(decl))
	for _, f := range decl {
		v := FabricVerdict{Name: f.Name, Adapters: append([]string(nil), f.Adapters...)}
		if len(f.Adapters) == 0 {
			v.Problems = append(v.Problems, "no adapters declared")
		}
		slowest := 0.0
		seen := map[string]bool{}
		for _, name := range f.Adapters {
			if seen[name] {
				continue
			}
			seen[name] = true
			check, problem, rate := checkAdapter(name, byName, root)
			v.Checks = append(v.Checks, check)
			if problem != "" {
				v.Problems = append(v.Problems, problem)
				continue
			}
			if slowest == 0 || rate < slowest {
				slowest = rate
			}
		}
		if len(v.Problems) == 0 {
			v.InService = true
			v.RateGbps = slowest
		}
		verdicts = append(verdicts, v)
	}
	return verdicts
}

// checkAdapter returns what was found for one declared adapter, the problem
// that takes its fabric out of service ("" when none) and the slowest rate of
// its ACTIVE ports.
func checkAdapter(name string, found map[string]Adapter, root string) (AdapterCheck, string, float64) {
	check := AdapterCheck{Adapter: name}
	a, ok := found[name]
	if !ok {
		check.Found = "no such adapter under " + root
		return check, fmt.Sprintf("adapter %s not found under %s", name, root), 0
	}
	check.Present = true
	if len(a.Ports) == 0 {
		check.Found = "no ports under " + filepath.Join(root, name, "ports")
		return check, fmt.Sprintf("adapter %s has no ACTIVE port (no ports under %s)", name, filepath.Join(root, name, "ports")), 0
	}
	var described, states, noSM []string
	slowest := 0.0
	for _, p := range a.Ports {
		described = append(described, fmt.Sprintf("port %d: %s, phys %s, %s Gb/s, %s",
			p.Number, p.State, p.PhysState, strconv.FormatFloat(p.RateGbps, 'f', -1, 64), p.LinkLayer))
		states = append(states, fmt.Sprintf("port %d: %s", p.Number, p.State))
		if p.State == PortActive {
			check.Active = true
			if slowest == 0 || p.RateGbps < slowest {
				slowest = p.RateGbps
			}
		} else if p.State == PortInit && p.PhysState == "LinkUp" {
			noSM = append(noSM, strconv.Itoa(p.Number))
		}
	}
	check.Found = strings.Join(described, "; ")
	if check.Active {
		return check, "", slowest
	}
	problem := fmt.Sprintf("adapter %s has no ACTIVE port (%s)", name, strings.Join(states, ", "))
	if len(noSM) > 0 {
		problem += fmt.Sprintf("; port %s has a physical link but no subnet manager has activated it", strings.Join(noSM, ", "))
	}
	return check, problem, 0
}
