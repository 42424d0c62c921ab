package scheduler

import "github.com/llmgw/llmgw/spec"

// node builds a ready node with count GPUs of class, the given indices in
// use, 256 GB of memory (128 free), 1000 GB of free disk, and vllm and
// llamacpp available.
func node(id, class string, count int, used ...int) Node {
	n := Node{
		ID:              id,
		Ready:           true,
		MemoryBytes:     256 << 30,
		FreeMemoryBytes: 128 << 30,
		DiskFreeBytes:   1000 << 30,
		Engines:         map[string]bool{"vllm": true, "llamacpp": true},
		UsedGPUs:        map[int]string{},
	}
	for i := range count {
		n.GPUs = append(n.GPUs, GPU{Index: i, Class: class, MemoryMiB: 81920})
	}
	for _, u := range used {
		n.UsedGPUs[u] = "other-shard"
	}
	return n
}

// with applies changes to a copy of n.
func with(n Node, change func(*Node)) Node {
	change(&n)
	return n
}

// inFabric puts n in fabric f at 200 Gb/s.
func inFabric(n Node, f string) Node {
	n.Fabric = f
	n.FabricRateGbps = 200
	return n
}

func gpuProfile(name, class string, tp int) spec.Profile {
	return spec.Profile{Name: name, Engine: "vllm", GPUClass: class, TP: tp, Priority: 100}
}

func cpuProfile(name string) spec.Profile {
	return spec.Profile{Name: name, Engine: "llamacpp", Priority: 100, MinMemoryGB: 8}
}
