// A node's declaration is what the operator says the
// node is (its fabrics and their adapters, engine paths, labels, model
// directories, where discovery looks). The agent reads it from its local file;
// the control plane may hold its own copy and send it to the agent, and that
// copy wins. Discovery is what the node actually found; comparing the two gives
// the fabric verdicts.
package spec

import (
	"fmt"
	"sort"
	"strings"
)

// Default discovery locations.
const (
	DefaultNvidiaSMI = "nvidia-smi"
	DefaultIBRoot    = "/sys/class/infiniband"
	DefaultCPUInfo   = "/proc/cpuinfo"
)

// Engines llmgw knows how to launch.
var KnownEngines = []string{"sim", "llamacpp", "vllm", "sglang"}

// Declaration is a node's declared configuration.
type Declaration struct {
	// Fabrics are the InfiniBand fabrics this node is a member of
	// (fabrics.md), each with the adapters that carry it.
	Fabrics []Fabric `koanf:"fabrics" yaml:"fabrics,omitempty" json:"fabrics,omitempty"`
	// Engines maps an engine name (`sim`, `llamacpp`, `vllm`, `sglang`) to the
	// path of its executable on this node; `sim` needs no path: it is the
	// llmgw binary itself.
	Engines map[string]string `koanf:"engines" yaml:"engines,omitempty" json:"engines,omitempty"`
	// Labels are free-form key/value pairs profiles can require.
	Labels map[string]string `koanf:"labels" yaml:"labels,omitempty" json:"labels,omitempty"`
	// ModelDirs are directories whose models the node reports as present.
	ModelDirs []string `koanf:"model_dirs" yaml:"model_dirs,omitempty" json:"model_dirs,omitempty"`
	// Discovery says where the hardware probes look.
	Discovery Discovery `koanf:"discovery" yaml:"discovery,omitempty" json:"discovery"`
}

// Fabric is one InfiniBand fabric as declared: a name and the adapters
// (e.g. mlx5_0) through which this node reaches it.
type Fabric struct {
	// Name is the fabric's name, the same string on every member node.
	// Default: required.
	Name string `koanf:"name" yaml:"name" json:"name"`
	// Adapters are the adapters (`mlx5_0`) through which this node reaches the
	// fabric; each under one fabric only.
	// Default: required.
	Adapters []string `koanf:"adapters" yaml:"adapters" json:"adapters"`
}

// Discovery holds the paths the probes read.
type Discovery struct {
	// NvidiaSMI is the `nvidia-smi` to run.
	// Default: `nvidia-smi` from `PATH`.
	// Type: path.
	NvidiaSMI string `koanf:"nvidia_smi" yaml:"nvidia_smi,omitempty" json:"nvidia_smi,omitempty"`
	// IBRoot is where InfiniBand adapters are read.
	// Default: `/sys/class/infiniband`.
	// Type: path.
	IBRoot string `koanf:"ib_root" yaml:"ib_root,omitempty" json:"ib_root,omitempty"`
	// CPUInfo is the `cpuinfo` file the CPU probe reads (model, cores, flags,
	// AVX2).
	// Default: `/proc/cpuinfo`.
	// Type: path.
	CPUInfo string `koanf:"cpuinfo" yaml:"cpuinfo,omitempty" json:"cpuinfo,omitempty"`
}

// NvidiaSMIPath returns the configured nvidia-smi path or the default.
func (d Discovery) NvidiaSMIPath() string {
	if d.NvidiaSMI == "" {
		return DefaultNvidiaSMI
	}
	return d.NvidiaSMI
}

// IBRootPath returns the configured InfiniBand sysfs root or the default.
func (d Discovery) IBRootPath() string {
	if d.IBRoot == "" {
		return DefaultIBRoot
	}
	return d.IBRoot
}

// CPUInfoPath returns the configured cpuinfo file or the default.
func (d Discovery) CPUInfoPath() string {
	if d.CPUInfo == "" {
		return DefaultCPUInfo
	}
	return d.CPUInfo
}

// Validate checks the declaration on its own, without discovery. Errors name
// the offending key (e.g. "fabrics[1].adapters: mlx5_0 is already under
// fabric ib-a"); errors.As gives the Problems, one per key.
func (d Declaration) Validate() error {
	var ps Problems
	fabricNames := map[string]int{}
	adapterOwner := map[string]string{}
	for i, f := range d.Fabrics {
		key := fmt.Sprintf("fabrics[%d]", i)
		if strings.TrimSpace(f.Name) == "" {
			ps.add(key+".name", "is required")
		} else if j, dup := fabricNames[f.Name]; dup {
			ps.add(key+".name", fmt.Sprintf("fabric %q is already declared at fabrics[%d]", f.Name, j))
		} else {
			fabricNames[f.Name] = i
		}
		if len(f.Adapters) == 0 {
			ps.add(key+".adapters", "a fabric needs at least one adapter")
		}
		for _, a := range f.Adapters {
			if strings.TrimSpace(a) == "" {
				ps.add(key+".adapters", "empty adapter name")
				continue
			}
			if owner, dup := adapterOwner[a]; dup {
				if owner == f.Name {
					ps.add(key+".adapters", fmt.Sprintf("%s is listed twice", a))
				} else {
					ps.add(key+".adapters", fmt.Sprintf("%s is already under fabric %q; an adapter belongs to one fabric", a, owner))
				}
				continue
			}
			adapterOwner[a] = f.Name
		}
	}
	engines := make([]string, 0, len(d.Engines))
	for e := range d.Engines {
		engines = append(engines, e)
	}
	sort.Strings(engines)
	for _, e := range engines {
		if !IsKnownEngine(e) {
			ps.add("engines."+e, fmt.Sprintf("unknown engine (known: %s)", strings.Join(KnownEngines, ", ")))
		}
		if e != "sim" && strings.TrimSpace(d.Engines[e]) == "" {
			ps.add("engines."+e, "path is empty")
		}
	}
	for i, dir := range d.ModelDirs {
		if strings.TrimSpace(dir) == "" {
			ps.add(fmt.Sprintf("model_dirs[%d]", i), "empty path")
		}
	}
	if len(ps) > 0 {
		return declarationError{ps}
	}
	return nil
}

// declarationError is the error of Validate: its problems on one line.
type declarationError struct{ problems Problems }

func (e declarationError) Error() string {
	return "invalid node declaration: " + strings.ReplaceAll(e.problems.Error(), "\n", "; ")
}

// Unwrap gives errors.As access to the Problems.
func (e declarationError) Unwrap() error { return e.problems }

// IsKnownEngine reports whether name is an engine llmgw can launch.
func IsKnownEngine(name string) bool {
	for _, e := range KnownEngines {
		if e == name {
			return true
		}
	}
	return false
}

// FabricOf returns the fabric that adapter is declared under, or "".
func (d Declaration) FabricOf(adapter string) string {
	for _, f := range d.Fabrics {
		for _, a := range f.Adapters {
			if a == adapter {
				return f.Name
			}
		}
	}
	return ""
}
