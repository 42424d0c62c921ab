package scheduler

import (
	"testing"

	"github.com/llmgw/llmgw/spec"
)

func TestCheckers(t *testing.T) {
	a100 := gpuProfile("tp2", "a100-80g", 2)
	multi := gpuProfile("2x4", "h100-80g", 4)
	multi.Nodes = 2
	tests := []struct {
		name    string
		checker Checker
		node    Node
		profile spec.Profile
		ok      bool
		reason  string
	}{
		{"ready", ReadyChecker{}, node("n", "", 0), cpuProfile("cpu"), true, ""},
		{"not ready with reason", ReadyChecker{}, with(node("n", "", 0), func(n *Node) { n.Ready = false; n.NotReadyReason = "heartbeat lost" }), cpuProfile("cpu"), false, "not ready: heartbeat lost"},
		{"not ready without reason", ReadyChecker{}, with(node("n", "", 0), func(n *Node) { n.Ready = false }), cpuProfile("cpu"), false, "not ready"},

		{"engine present", EngineChecker{}, node("n", "", 0), cpuProfile("cpu"), true, ""},
		{"engine missing", EngineChecker{}, with(node("n", "", 0), func(n *Node) { n.Engines = map[string]bool{"llamacpp": true, "sim": true, "vllm": false} }), a100, false, "engine vllm not available (node has llamacpp, sim)"},
		{"no engines", EngineChecker{}, with(node("n", "", 0), func(n *Node) { n.Engines = nil }), a100, false, "engine vllm not available (node has no engines)"},

		{"engine check passed", EngineCheckChecker{}, with(node("n", "", 0), func(n *Node) { n.EngineFailures = map[string]string{"vllm": "vllm cannot start: boom"} }), cpuProfile("cpu"), true, ""},
		{"engine check failed", EngineCheckChecker{}, with(node("n", "", 0), func(n *Node) {
			n.EngineFailures = map[string]string{"llamacpp": "llama-server cannot start: libgomp.so.1: cannot open shared object file: No such file or directory"}
		}), cpuProfile("cpu"), false, "engine check failed: llama-server cannot start: libgomp.so.1: cannot open shared object file: No such file or directory"},
		{"engine check failed without words", EngineCheckChecker{}, with(node("n", "", 0), func(n *Node) { n.EngineFailures = map[string]string{"llamacpp": ""} }), cpuProfile("cpu"), false, "engine check failed: llamacpp cannot start"},
		{"no checks reported", EngineCheckChecker{}, node("n", "", 0), cpuProfile("cpu"), true, ""},

		{"class matches", GPUClassChecker{}, node("n", "a100-80g", 8), a100, true, ""},
		{"wrong class", GPUClassChecker{}, node("n", "h100-80g", 8), a100, false, "wrong GPU class: has h100-80g, needs a100-80g"},
		{"wrong classes", GPUClassChecker{}, with(node("n", "h100-80g", 1), func(n *Node) { n.GPUs = append(n.GPUs, GPU{Index: 1, Class: "l4"}) }), a100, false, "wrong GPU class: has h100-80g, l4, needs a100-80g"},
		{"class among several", GPUClassChecker{}, with(node("n", "h100-80g", 1), func(n *Node) { n.GPUs = append(n.GPUs, GPU{Index: 1, Class: "a100-80g"}) }), a100, true, ""},
		{"no GPUs", GPUClassChecker{}, node("n", "", 0), a100, false, "no GPUs, needs a100-80g"},
		{"no GPUs, any class", GPUClassChecker{}, node("n", "", 0), gpuProfile("tp2", "", 2), false, "no GPUs, needs 2"},
		{"cpu profile ignores class", GPUClassChecker{}, node("n", "", 0), cpuProfile("cpu"), true, ""},

		{"enough free", FreeGPUsChecker{}, node("n", "a100-80g", 4, 0, 2), a100, true, ""},
		{"one free", FreeGPUsChecker{}, node("n", "a100-80g", 4, 0, 1, 2), a100, false, "1 free GPU, needs 2"},
		{"none free", FreeGPUsChecker{}, node("n", "a100-80g", 2, 0, 1), a100, false, "0 free GPUs, needs 2"},
		{"free of other class only", FreeGPUsChecker{}, with(node("n", "a100-80g", 2, 0), func(n *Node) { n.GPUs = append(n.GPUs, GPU{Index: 2, Class: "l4"}, GPU{Index: 3, Class: "l4"}) }), a100, false, "1 free a100-80g GPU, needs 2"},
		{"any class, mixed", FreeGPUsChecker{}, with(node("n", "a100-80g", 1), func(n *Node) { n.GPUs = append(n.GPUs, GPU{Index: 1, Class: "l4"}) }), gpuProfile("tp2", "", 2), false, "at most 1 free GPU of one class, needs 2"},
		{"used index outside inventory", FreeGPUsChecker{}, node("n", "a100-80g", 2, 7), a100, true, ""},
		{"cpu profile needs none", FreeGPUsChecker{}, node("n", "", 0), cpuProfile("cpu"), true, ""},

		{"memory enough", MemoryChecker{}, node("n", "", 0), cpuProfile("cpu"), true, ""},
		{"memory short", MemoryChecker{}, with(node("n", "", 0), func(n *Node) { n.FreeMemoryBytes = 8<<30 - 1 }), cpuProfile("cpu"), false, "7.9 GB free memory, needs 8 GB"},
		{"memory exact", MemoryChecker{}, with(node("n", "", 0), func(n *Node) { n.FreeMemoryBytes = 8 << 30 }), cpuProfile("cpu"), true, ""},
		{"memory none", MemoryChecker{}, with(node("n", "", 0), func(n *Node) { n.FreeMemoryBytes = 0 }), cpuProfile("cpu"), false, "0 GB free memory, needs 8 GB"},

		{"disk enough", DiskChecker{}, node("n", "", 0), with2(cpuProfile("cpu"), func(p *spec.Profile) { p.MinDiskGB = 40 }), true, ""},
		{"disk short", DiskChecker{}, with(node("n", "", 0), func(n *Node) { n.DiskFreeBytes = 12 << 30 }), with2(cpuProfile("cpu"), func(p *spec.Profile) { p.MinDiskGB = 40 }), false, "12 GB free disk, needs 40 GB"},
		{"disk unset", DiskChecker{}, with(node("n", "", 0), func(n *Node) { n.DiskFreeBytes = 0 }), cpuProfile("cpu"), true, ""},

		{"labels match", LabelsChecker{}, with(node("n", "", 0), func(n *Node) { n.Labels = map[string]string{"zone": "eu", "tier": "gold"} }), with2(cpuProfile("cpu"), func(p *spec.Profile) { p.Labels = map[string]string{"zone": "eu"} }), true, ""},
		{"label missing", LabelsChecker{}, node("n", "", 0), with2(cpuProfile("cpu"), func(p *spec.Profile) { p.Labels = map[string]string{"zone": "eu"} }), false, "missing label zone=eu"},
		{"labels wrong and missing", LabelsChecker{}, with(node("n", "", 0), func(n *Node) { n.Labels = map[string]string{"zone": "us"} }), with2(cpuProfile("cpu"), func(p *spec.Profile) { p.Labels = map[string]string{"zone": "eu", "tier": "gold"} }), false, "missing label tier=gold; label zone=us, needs zone=eu"},

		{"fabric for multi-node", FabricChecker{}, inFabric(node("n", "h100-80g", 8), "ib-a"), multi, true, ""},
		{"no fabric for multi-node", FabricChecker{}, node("n", "h100-80g", 8), multi, false, "no fabric in service: multi-node profiles need one"},
		{"no fabric for single node", FabricChecker{}, node("n", "a100-80g", 8), a100, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, reason := tt.checker.Check(&tt.node, tt.profile)
			if ok != tt.ok || reason != tt.reason {
				t.Errorf("%s.Check = (%v, %q), want (%v, %q)", tt.checker.Name(), ok, reason, tt.ok, tt.reason)
			}
		})
	}
}

func with2(p spec.Profile, change func(*spec.Profile)) spec.Profile {
	change(&p)
	return p
}

func TestPickGPUs(t *testing.T) {
	mixed := node("n", "l4", 2, 0)
	mixed.GPUs = append(mixed.GPUs, GPU{Index: 2, Class: "a100-80g"}, GPU{Index: 3, Class: "a100-80g"}, GPU{Index: 4, Class: "a100-80g"})
	tests := []struct {
		name    string
		node    Node
		profile spec.Profile
		want    []int
		ok      bool
	}{
		{"lowest free", node("n", "a100-80g", 8, 0, 2), gpuProfile("tp2", "a100-80g", 2), []int{1, 3}, true},
		{"requested class only", mixed, gpuProfile("tp2", "a100-80g", 2), []int{2, 3}, true},
		{"any class keeps one class", mixed, gpuProfile("tp2", "", 2), []int{2, 3}, true},
		{"any class, lowest first", mixed, gpuProfile("tp1", "", 1), []int{1}, true},
		{"not enough", node("n", "a100-80g", 2, 1), gpuProfile("tp2", "a100-80g", 2), nil, false},
		{"cpu", node("n", "", 0), cpuProfile("cpu"), nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := pickGPUs(&tt.node, tt.profile)
			if ok != tt.ok || !equalInts(got, tt.want) {
				t.Errorf("pickGPUs = (%v, %v), want (%v, %v)", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRankers(t *testing.T) {
	d := Demand{Model: "m", Source: "hf://m"}
	tp2 := gpuProfile("tp2", "a100-80g", 2)
	tests := []struct {
		name    string
		ranker  Ranker
		node    Node
		profile spec.Profile
		gpus    []int
		want    float64
	}{
		{"bin-pack fills node", BinPackRanker{}, node("n", "a100-80g", 4, 0, 1), tp2, []int{2, 3}, 1},
		{"bin-pack empty node", BinPackRanker{}, node("n", "a100-80g", 4), tp2, []int{0, 1}, 0.5},
		{"bin-pack cpu by memory", BinPackRanker{}, node("n", "", 0), cpuProfile("cpu"), nil, 1 - 120.0/256},
		{"weights present", WeightsPresentRanker{}, with(node("n", "", 0), func(n *Node) { n.ModelsPresent = []string{"hf://m"} }), tp2, nil, 1},
		{"weights absent", WeightsPresentRanker{}, node("n", "", 0), tp2, nil, 0},
		{"spread none yet", SpreadRanker{}, node("n", "", 0), tp2, nil, 1},
		{"spread one already", SpreadRanker{}, with(node("n", "", 0), func(n *Node) { n.Replicas = map[string]int{"m": 1, "other": 5} }), tp2, nil, 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.ranker.Score(&tt.node, tt.profile, d, tt.gpus); got != tt.want {
				t.Errorf("%s.Score = %v, want %v", tt.ranker.Name(), got, tt.want)
			}
		})
	}
}
