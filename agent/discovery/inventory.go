package discovery

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/llmgw/llmgw/spec"
)

// DefaultGPUTimeout bounds one nvidia-smi run. A wedged driver can make it
// hang for minutes.
const DefaultGPUTimeout = 30 * time.Second

// Options say where Discover looks besides the declaration's own paths.
type Options struct {
	// MeminfoPath defaults to DefaultMeminfoPath.
	MeminfoPath string
	// CPUInfoPath overrides the declaration's discovery.cpuinfo (which
	// defaults to DefaultCPUInfoPath).
	CPUInfoPath string
	// DiskPath is the filesystem to measure. Empty means the first of the
	// declaration's model_dirs; with none either, the disk is not probed and
	// Inventory.Disk.Path stays "".
	DiskPath string
	// GPUTimeout bounds the nvidia-smi run; 0 means DefaultGPUTimeout.
	GPUTimeout time.Duration
	// Logger receives one line per problem; nil discards them.
	Logger *slog.Logger
}

// Inventory is everything discovery found on the node. A probe that failed
// leaves its error text in the matching *Error field and its value empty.
type Inventory struct {
	GPUs []GPU
	// GPUError is ProbeGPUs' error ("GPU discovery failed: ..."); "" when the
	// GPUs were listed.
	GPUError string
	// TopologyNote says what of the GPUs' NVLink topology is unknown, and
	// why ("" when it was read for every GPU, or there is no GPU).
	TopologyNote string
	// NvidiaSMIMissing is true when nvidia-smi does not exist at the
	// configured path: a CPU node, as far as discovery can tell, rather than a
	// broken driver.
	NvidiaSMIMissing bool
	// Fabrics has one verdict per declared fabric, in declaration order.
	Fabrics []FabricVerdict
	// FabricError is set when the InfiniBand sysfs could not be read; every
	// declared fabric is then out of service.
	FabricError string
	Memory      Memory
	MemoryError string
	CPU         CPU
	CPUError    string
	Disk        Disk
	DiskError   string
	Models      []ModelFile
	// ModelProblems lists model directories that were missing or unreadable.
	ModelProblems []string
}

// Discover runs every probe against the paths in decl and opts. It never
// fails as a whole: each probe's error lands in the Inventory, and each
// problem is logged once. A fabric taken out of service is logged at warn
// with the fabric, the adapter and what was found, since that line is often
// the operator's only clue.
func Discover(ctx context.Context, decl spec.Declaration, opts Options) Inventory {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var inv Inventory

	discoverGPUs(ctx, &inv, decl.Discovery, opts, log)
	discoverFabrics(&inv, decl, log)

	meminfo := opts.MeminfoPath
	if meminfo == "" {
		meminfo = DefaultMeminfoPath
	}
	if m, err := ProbeMemory(meminfo); err != nil {
		inv.MemoryError = err.Error()
		log.Warn("memory discovery failed", "error", err)
	} else {
		inv.Memory = m
	}

	cpuinfo := opts.CPUInfoPath
	if cpuinfo == "" {
		cpuinfo = decl.Discovery.CPUInfoPath()
	}
	if c, err := ProbeCPU(cpuinfo); err != nil {
		inv.CPUError = err.Error()
		log.Warn("cpu discovery failed", "error", err)
	} else {
		inv.CPU = c
		if has, known := c.HasAVX2(); known && !has {
			// Proxmox's default CPU type (kvm64) hides AVX2 from the guest.
			log.Warn("cpu has no avx2, cpu inference will be slow", "cpu", c.Model, "cpuinfo", cpuinfo)
		}
	}

	diskPath := opts.DiskPath
	if diskPath == "" && len(decl.ModelDirs) > 0 {
		diskPath = decl.ModelDirs[0]
	}
	if diskPath != "" {
		if d, err := ProbeDisk(diskPath); err != nil {
			inv.DiskError = err.Error()
			log.Warn("disk discovery failed", "error", err)
		} else {
			inv.Disk = d
		}
	}

	models, err := ScanModels(decl.ModelDirs)
	inv.Models = models
	for _, problem := range splitJoined(err) {
		inv.ModelProblems = append(inv.ModelProblems, problem.Error())
		log.Warn("model dir problem", "error", problem)
	}
	return inv
}

func discoverGPUs(ctx context.Context, inv *Inventory, d spec.Discovery, opts Options, log *slog.Logger) {
	timeout := opts.GPUTimeout
	if timeout <= 0 {
		timeout = DefaultGPUTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	path := d.NvidiaSMIPath()
	gpus, err := ProbeGPUs(ctx, path)
	if err == nil {
		inv.GPUs = gpus
		log.Debug("gpus found", "count", len(gpus), "nvidia_smi", path)
		if inv.TopologyNote = ProbeTopology(inv.GPUs); inv.TopologyNote != "" {
			log.Info("nvlink topology unknown", "why", inv.TopologyNote)
		}
		return
	}
	inv.GPUError = err.Error()
	inv.NvidiaSMIMissing = errors.Is(err, ErrNvidiaSMINotFound)
	if inv.NvidiaSMIMissing && d.NvidiaSMI == "" {
		// No driver and no configured path: most likely a CPU node.
		log.Info("no nvidia-smi on PATH, reporting no GPUs", "nvidia_smi", path)
		return
	}
	// A configured path that is missing, or a driver that fails: a GPU node
	// that would otherwise register as a CPU node.
	log.Warn("gpu discovery failed", "nvidia_smi", path, "error", err)
}

func discoverFabrics(inv *Inventory, decl spec.Declaration, log *slog.Logger) {
	root := decl.Discovery.IBRootPath()
	adapters, err := ProbeInfiniBand(root)
	if err != nil {
		inv.FabricError = err.Error()
		for _, f := range decl.Fabrics {
			inv.Fabrics = append(inv.Fabrics, FabricVerdict{
				Name:     f.Name,
				Adapters: append([]string(nil), f.Adapters...),
				Problems: []string{"InfiniBand discovery failed: " + err.Error()},
			})
			log.Warn("fabric out of service", "fabric", f.Name, "adapters", f.Adapters, "ib_root", root, "error", err)
		}
		return
	}
	inv.Fabrics = EvaluateFabrics(decl.Fabrics, adapters, root)
	for _, v := range inv.Fabrics {
		if v.InService {
			log.Info("fabric in service", "fabric", v.Name, "adapters", v.Adapters, "rate_gbps", v.RateGbps)
			continue
		}
		if len(v.Checks) == 0 {
			log.Warn("fabric out of service", "fabric", v.Name, "ib_root", root, "reason", v.Reason())
			continue
		}
		for _, c := range v.Checks {
			if c.Active {
				continue
			}
			log.Warn("fabric out of service", "fabric", v.Name, "adapter", c.Adapter,
				"found", c.Found, "reason", problemFor(v, c.Adapter), "ib_root", root)
		}
	}
}

// problemFor returns the verdict's problem about adapter.
func problemFor(v FabricVerdict, adapter string) string {
	prefix := "adapter " + adapter + " "
	for _, p := range v.Problems {
		if strings.HasPrefix(p, prefix) {
			return p
		}
	}
	return v.Reason()
}

// splitJoined returns the errors joined in err by errors.Join, or err alone.
func splitJoined(err error) []error {
	if err == nil {
		return nil
	}
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		return joined.Unwrap()
	}
	return []error{err}
}
