package scheduler

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/spec"
)

// llamaFlags are the flags the llamacpp driver writes, sorted.
var llamaFlags = []string{"--alias", "--ctx-size", "--host", "--metrics", "--model", "--n-gpu-layers", "--parallel", "--port"}

func TestPlace(t *testing.T) {
	tp1 := gpuProfile("tp1", "a100-80g", 1)
	tp2 := gpuProfile("tp2", "a100-80g", 2)
	multi := gpuProfile("2x8", "h100-80g", 8)
	multi.Nodes = 2
	withLabels := with2(tp2, func(p *spec.Profile) { p.Labels = map[string]string{"zone": "eu"} })
	lowCPU := with2(cpuProfile("cpu"), func(p *spec.Profile) { p.Priority = 10 })
	sameFirst := gpuProfile("first", "a100-80g", 1)
	sameSecond := gpuProfile("second", "a100-80g", 1)

	tests := []struct {
		name     string
		nodes    []Node
		profiles []spec.Profile
		source   string
		// want: placed profile ("" when not placed), fabric, shards as
		// node:gpus, and the last profile's summary.
		profile string
		fabric  string
		shards  []ShardPlacement
		summary string
		// reasons are node verdict reasons of the last profile, by node.
		reasons map[string]string
	}{
		{
			name:     "single GPU goes to the fuller node",
			nodes:    []Node{node("node02", "a100-80g", 4), node("node01", "a100-80g", 2, 0)},
			profiles: []spec.Profile{tp1},
			profile:  "tp1",
			shards:   []ShardPlacement{{Rank: 0, NodeID: "node01", GPUIndices: []int{1}}},
			summary:  "placed on node01 (gpu 1)",
		},
		{
			name:     "tp2 takes the lowest free GPUs of a fragmented node",
			nodes:    []Node{node("node01", "a100-80g", 4, 0, 2), node("node02", "a100-80g", 8)},
			profiles: []spec.Profile{tp2},
			profile:  "tp2",
			shards:   []ShardPlacement{{Rank: 0, NodeID: "node01", GPUIndices: []int{1, 3}}},
			summary:  "placed on node01 (gpus 1,3; NVLink topology unknown: lowest free GPUs taken)",
		},
		{
			name: "a node whose engine cannot start is passed over, with the check's reason",
			nodes: []Node{
				with(node("cpu01", "", 0), func(n *Node) {
					n.FreeMemoryBytes = 200 << 30
					n.EngineFailures = map[string]string{"llamacpp": "llama-server cannot start: libgomp.so.1: cannot open shared object file"}
				}),
				node("cpu02", "", 0),
			},
			profiles: []spec.Profile{cpuProfile("cpu")},
			profile:  "cpu",
			shards:   []ShardPlacement{{Rank: 0, NodeID: "cpu02"}},
			summary:  "placed on cpu02 (cpu only)",
			reasons:  map[string]string{"cpu01": "engine check failed: llama-server cannot start: libgomp.so.1: cannot open shared object file"},
		},
		{
			name: "a node whose engine does not take a flag of the profile is passed over, naming flag, engine, version and help",
			nodes: []Node{
				with(node("cpu01", "", 0), func(n *Node) {
					n.FreeMemoryBytes = 200 << 30
					n.EngineHelp = map[string]EngineHelp{"llamacpp": {Flags: llamaFlags, Version: "version: 100 (old)", Command: "llama-server --help"}}
				}),
				with(node("cpu02", "", 0), func(n *Node) {
					n.EngineHelp = map[string]EngineHelp{"llamacpp": {Flags: slices.Sorted(slices.Values(append([]string{"--jinja"}, llamaFlags...))), Version: "version: 200 (new)", Command: "llama-server --help"}}
				}),
			},
			profiles: []spec.Profile{with2(cpuProfile("cpu"), func(p *spec.Profile) { p.Args = []string{"--jinja"} })},
			profile:  "cpu",
			shards:   []ShardPlacement{{Rank: 0, NodeID: "cpu02"}},
			summary:  "placed on cpu02 (cpu only)",
			reasons:  map[string]string{"cpu01": "llama-server (version: 100 (old)) does not take --jinja: `llama-server --help` does not list it"},
		},
		{
			name:     "wrong class and too few free GPUs",
			nodes:    []Node{node("node01", "h100-80g", 8), node("node02", "a100-80g", 2, 1)},
			profiles: []spec.Profile{tp2},
			summary:  "no node can hold profile tp2: node01: wrong GPU class: has h100-80g, needs a100-80g; node02: 1 free GPU, needs 2",
			reasons: map[string]string{
				"node01": "wrong GPU class: has h100-80g, needs a100-80g",
				"node02": "1 free GPU, needs 2",
			},
		},
		{
			name: "cpu profile needs no GPUs but checks engine and memory",
			nodes: []Node{
				with(node("node01", "", 0), func(n *Node) { n.Engines = map[string]bool{"vllm": true} }),
				with(node("node02", "", 0), func(n *Node) { n.FreeMemoryBytes = 4 << 30 }),
				node("node03", "", 0),
			},
			profiles: []spec.Profile{cpuProfile("cpu")},
			profile:  "cpu",
			shards:   []ShardPlacement{{Rank: 0, NodeID: "node03"}},
			summary:  "placed on node03 (cpu only)",
			reasons: map[string]string{
				"node01": "engine llamacpp not available (node has vllm)",
				"node02": "4 GB free memory, needs 8 GB",
				"node03": "",
			},
		},
		{
			name: "labels",
			nodes: []Node{
				node("node01", "a100-80g", 8, 0, 1, 2, 3, 4, 5),
				with(node("node02", "a100-80g", 8), func(n *Node) { n.Labels = map[string]string{"zone": "eu"} }),
				with(node("node03", "a100-80g", 8), func(n *Node) { n.Labels = map[string]string{"zone": "us"} }),
			},
			profiles: []spec.Profile{withLabels},
			profile:  "tp2",
			shards:   []ShardPlacement{{Rank: 0, NodeID: "node02", GPUIndices: []int{0, 1}}},
			summary:  "placed on node02 (gpus 0,1; NVLink topology unknown: lowest free GPUs taken)",
			reasons: map[string]string{
				"node01": "missing label zone=eu",
				"node03": "label zone=us, needs zone=eu",
			},
		},
		{
			name:     "priority order falls back to the second profile",
			nodes:    []Node{node("node01", "h100-80g", 8)},
			profiles: []spec.Profile{lowCPU, tp2},
			profile:  "cpu",
			shards:   []ShardPlacement{{Rank: 0, NodeID: "node01"}},
			summary:  "placed on node01 (cpu only)",
		},
		{
			name:     "equal priorities keep declaration order",
			nodes:    []Node{node("node01", "a100-80g", 8)},
			profiles: []spec.Profile{sameFirst, sameSecond},
			profile:  "first",
			shards:   []ShardPlacement{{Rank: 0, NodeID: "node01", GPUIndices: []int{0}}},
			summary:  "placed on node01 (gpu 0)",
		},
		{
			name: "multi-node inside one fabric",
			nodes: []Node{
				inFabric(node("node01", "h100-80g", 8), "ib-a"),
				inFabric(node("node02", "h100-80g", 8), "ib-a"),
				inFabric(node("node03", "h100-80g", 8), "ib-b"),
				node("node04", "h100-80g", 8),
			},
			profiles: []spec.Profile{multi},
			profile:  "2x8",
			fabric:   "ib-a",
			shards: []ShardPlacement{
				{Rank: 0, NodeID: "node01", GPUIndices: []int{0, 1, 2, 3, 4, 5, 6, 7}},
				{Rank: 1, NodeID: "node02", GPUIndices: []int{0, 1, 2, 3, 4, 5, 6, 7}},
			},
			summary: "placed on node01 (gpus 0,1,2,3,4,5,6,7; NVLink topology unknown: lowest free GPUs taken), node02 (gpus 0,1,2,3,4,5,6,7; NVLink topology unknown: lowest free GPUs taken) in fabric ib-a",
			reasons: map[string]string{"node04": "no fabric in service: multi-node profiles need one"},
		},
		{
			name: "multi-node prefers the faster fabric on a tie",
			nodes: []Node{
				inFabric(node("node01", "h100-80g", 8), "ib-a"),
				inFabric(node("node02", "h100-80g", 8), "ib-a"),
				with(inFabric(node("node03", "h100-80g", 8), "ib-b"), func(n *Node) { n.FabricRateGbps = 400 }),
				with(inFabric(node("node04", "h100-80g", 8), "ib-b"), func(n *Node) { n.FabricRateGbps = 400 }),
			},
			profiles: []spec.Profile{multi},
			profile:  "2x8",
			fabric:   "ib-b",
			shards: []ShardPlacement{
				{Rank: 0, NodeID: "node03", GPUIndices: []int{0, 1, 2, 3, 4, 5, 6, 7}},
				{Rank: 1, NodeID: "node04", GPUIndices: []int{0, 1, 2, 3, 4, 5, 6, 7}},
			},
			summary: "placed on node03 (gpus 0,1,2,3,4,5,6,7; NVLink topology unknown: lowest free GPUs taken), node04 (gpus 0,1,2,3,4,5,6,7; NVLink topology unknown: lowest free GPUs taken) in fabric ib-b",
		},
		{
			name: "multi-node refused when the two feasible nodes are in different fabrics",
			nodes: []Node{
				inFabric(node("node01", "h100-80g", 8), "ib-a"),
				inFabric(node("node02", "h100-80g", 8), "ib-b"),
				inFabric(node("node03", "h100-80g", 8, 0, 1, 2, 3), "ib-a"),
				node("node04", "h100-80g", 8),
			},
			profiles: []spec.Profile{multi},
			summary:  "needs 2 nodes in one fabric; fabric ib-a has 1 feasible node of 2 (node01), fabric ib-b has 1 feasible node of 1 (node02); rejected node03: 4 free GPUs, needs 8; node04: no fabric in service: multi-node profiles need one",
		},
		{
			name:     "multi-node refused for nodes with no fabric",
			nodes:    []Node{node("node01", "h100-80g", 8), node("node02", "h100-80g", 8)},
			profiles: []spec.Profile{multi},
			summary:  "needs 2 nodes in one fabric; no node has a fabric in service; rejected node01, node02: no fabric in service: multi-node profiles need one",
		},
		{
			name:     "bin-packing prefers the partly used node",
			nodes:    []Node{node("node01", "a100-80g", 8), node("node02", "a100-80g", 8, 0, 1, 2, 3)},
			profiles: []spec.Profile{tp2},
			profile:  "tp2",
			shards:   []ShardPlacement{{Rank: 0, NodeID: "node02", GPUIndices: []int{4, 5}}},
			summary:  "placed on node02 (gpus 4,5; NVLink topology unknown: lowest free GPUs taken)",
		},
		{
			name: "weights present preferred",
			nodes: []Node{
				node("node01", "a100-80g", 8),
				with(node("node02", "a100-80g", 8), func(n *Node) { n.ModelsPresent = []string{"other", "hf://org/m"} }),
			},
			profiles: []spec.Profile{tp2},
			source:   "hf://org/m",
			profile:  "tp2",
			shards:   []ShardPlacement{{Rank: 0, NodeID: "node02", GPUIndices: []int{0, 1}}},
			summary:  "placed on node02 (gpus 0,1; NVLink topology unknown: lowest free GPUs taken)",
			reasons:  map[string]string{"node01": "", "node02": "holds the weights"},
		},
		{
			name: "min_disk_gb only where the weights are absent",
			nodes: []Node{
				with(node("node01", "a100-80g", 8), func(n *Node) { n.DiskFreeBytes = 10 << 30 }),
				with(node("node02", "a100-80g", 8), func(n *Node) { n.DiskFreeBytes = 10 << 30; n.ModelsPresent = []string{"hf://org/m"} }),
			},
			profiles: []spec.Profile{with2(tp2, func(p *spec.Profile) { p.MinDiskGB = 100 })},
			source:   "hf://org/m",
			profile:  "tp2",
			shards:   []ShardPlacement{{Rank: 0, NodeID: "node02", GPUIndices: []int{0, 1}}},
			summary:  "placed on node02 (gpus 0,1; NVLink topology unknown: lowest free GPUs taken)",
			reasons:  map[string]string{"node01": "10 GB free disk, needs 100 GB", "node02": "holds the weights"},
		},
		{
			name: "spread prefers a node without a replica of the model",
			nodes: []Node{
				with(node("node01", "a100-80g", 8), func(n *Node) { n.Replicas = map[string]int{"m": 1} }),
				node("node02", "a100-80g", 8),
			},
			profiles: []spec.Profile{tp2},
			profile:  "tp2",
			shards:   []ShardPlacement{{Rank: 0, NodeID: "node02", GPUIndices: []int{0, 1}}},
			summary:  "placed on node02 (gpus 0,1; NVLink topology unknown: lowest free GPUs taken)",
		},
		{
			name: "a second replica on one node is allowed",
			nodes: []Node{
				with(node("node01", "a100-80g", 8), func(n *Node) { n.Replicas = map[string]int{"m": 1} }),
			},
			profiles: []spec.Profile{tp2},
			profile:  "tp2",
			shards:   []ShardPlacement{{Rank: 0, NodeID: "node01", GPUIndices: []int{0, 1}}},
			summary:  "placed on node01 (gpus 0,1; NVLink topology unknown: lowest free GPUs taken)",
		},
		{
			name:     "ties go to the lower node id",
			nodes:    []Node{node("node02", "a100-80g", 8), node("node01", "a100-80g", 8)},
			profiles: []spec.Profile{tp2},
			profile:  "tp2",
			shards:   []ShardPlacement{{Rank: 0, NodeID: "node01", GPUIndices: []int{0, 1}}},
			summary:  "placed on node01 (gpus 0,1; NVLink topology unknown: lowest free GPUs taken)",
		},
		{
			name: "not ready nodes are grouped by reason",
			nodes: []Node{
				with(node("node01", "a100-80g", 8), func(n *Node) { n.Ready = false; n.NotReadyReason = "heartbeat lost" }),
				with(node("node02", "a100-80g", 8), func(n *Node) { n.Ready = false; n.NotReadyReason = "heartbeat lost" }),
				with(node("node03", "a100-80g", 8), func(n *Node) { n.Ready = false }),
			},
			profiles: []spec.Profile{tp2},
			summary:  "no node can hold profile tp2: node01, node02: not ready: heartbeat lost; node03: not ready",
		},
		{
			name:     "empty fleet",
			profiles: []spec.Profile{tp2},
			summary:  "no node can hold profile tp2: the fleet has no nodes",
		},
		{
			name:     "invalid profile",
			nodes:    []Node{node("node01", "a100-80g", 8)},
			profiles: []spec.Profile{{Name: "bad", Engine: "vllm", GPUClass: "a100-80g"}},
			summary:  `profile bad is invalid: tp: must be at least 1 when gpu_class is set (gpu_class "a100-80g")`,
			reasons:  map[string]string{"node01": "not evaluated: profile is invalid"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Demand{Model: "m", Source: tt.source, Profiles: tt.profiles}
			plan := Place(Snapshot{Nodes: tt.nodes}, d)
			if plan.Placed != (tt.profile != "") || plan.Profile.Name != tt.profile || plan.Fabric != tt.fabric {
				t.Errorf("Place = placed %v, profile %q, fabric %q; want profile %q, fabric %q", plan.Placed, plan.Profile.Name, plan.Fabric, tt.profile, tt.fabric)
			}
			if i := slices.IndexFunc(tt.profiles, func(p spec.Profile) bool { return p.Name == tt.profile }); i >= 0 && !reflect.DeepEqual(plan.Profile, tt.profiles[i]) {
				t.Errorf("Place handed back profile %+v, want the demand's %+v", plan.Profile, tt.profiles[i])
			}
			// The notes are the summary's to check.
			shards := slices.Clone(plan.Shards)
			for i := range shards {
				shards[i].TopologyNote = ""
			}
			if !reflect.DeepEqual(shards, tt.shards) {
				t.Errorf("shards = %+v, want %+v", plan.Shards, tt.shards)
			}
			profiles := plan.Explanation.Profiles
			if len(profiles) == 0 {
				t.Fatal("explanation has no profiles")
			}
			last := profiles[len(profiles)-1]
			if last.Summary != tt.summary {
				t.Errorf("summary =\n  %q\nwant\n  %q", last.Summary, tt.summary)
			}
			if last.Placed != plan.Placed {
				t.Errorf("last profile placed = %v, plan placed = %v", last.Placed, plan.Placed)
			}
			if len(last.Nodes) != len(tt.nodes) {
				t.Fatalf("%d verdicts for %d nodes", len(last.Nodes), len(tt.nodes))
			}
			for i, v := range last.Nodes {
				if i > 0 && last.Nodes[i-1].NodeID >= v.NodeID {
					t.Errorf("verdicts not sorted by id: %s before %s", last.Nodes[i-1].NodeID, v.NodeID)
				}
				if !v.Feasible && v.Reason == "" || v.Feasible && v.Reason != "" && v.Reason != "holds the weights" {
					t.Errorf("%s: feasible %v with reason %q", v.NodeID, v.Feasible, v.Reason)
				}
				if want, ok := tt.reasons[v.NodeID]; ok && v.Reason != want {
					t.Errorf("%s: reason %q, want %q", v.NodeID, v.Reason, want)
				}
			}
			if got := Explain(Snapshot{Nodes: tt.nodes}, d); !reflect.DeepEqual(got, plan.Explanation) {
				t.Errorf("Explain differs from Place's explanation:\n%v\n%v", got, plan.Explanation)
			}
			if plan.Placed {
				if err := Verify(Snapshot{Nodes: tt.nodes}, d, plan); err != nil {
					t.Errorf("Verify of a fresh plan: %v", err)
				}
			}
		})
	}
}

func TestPlaceFallbackExplainsEveryProfileTried(t *testing.T) {
	d := Demand{Model: "m", Profiles: []spec.Profile{
		with2(cpuProfile("cpu"), func(p *spec.Profile) { p.Priority = 10 }),
		gpuProfile("tp2", "a100-80g", 2),
		with2(cpuProfile("never"), func(p *spec.Profile) { p.Priority = 1 }),
	}}
	plan := Place(Snapshot{Nodes: []Node{node("node01", "h100-80g", 8)}}, d)
	var got []string
	for _, p := range plan.Explanation.Profiles {
		got = append(got, p.Profile)
	}
	if want := []string{"tp2", "cpu"}; !reflect.DeepEqual(got, want) {
		t.Errorf("profiles tried = %v, want %v", got, want)
	}
	if plan.Explanation.Profiles[0].Placed || !plan.Explanation.Profiles[1].Placed {
		t.Errorf("placed flags wrong: %+v", plan.Explanation.Profiles)
	}
}

func TestPlaceDoesNotModifySnapshot(t *testing.T) {
	nodes := []Node{node("node02", "a100-80g", 8, 3), node("node01", "a100-80g", 8)}
	before := []Node{node("node02", "a100-80g", 8, 3), node("node01", "a100-80g", 8)}
	Place(Snapshot{Nodes: nodes}, Demand{Model: "m", Profiles: []spec.Profile{gpuProfile("tp2", "a100-80g", 2)}})
	if !reflect.DeepEqual(nodes, before) {
		t.Errorf("Place modified the snapshot")
	}
}

func TestExplanationString(t *testing.T) {
	d := Demand{Model: "m", Profiles: []spec.Profile{gpuProfile("tp2", "a100-80g", 2)}}
	s := Snapshot{Nodes: []Node{node("node01", "a100-80g", 2, 0), node("node02", "a100-80g", 4, 0, 1)}}
	got := Explain(s, d).String()
	want := `model m: placed with profile tp2

profile tp2: placed on node02 (gpus 2,3; NVLink topology unknown: lowest free GPUs taken)
  NODE    FEASIBLE  SCORE  REASON
  node01  no        -      1 free GPU, needs 2
  node02  yes       0.667
`
	if got != want {
		t.Errorf("String() =\n%s\nwant\n%s", got, want)
	}

	none := Explain(s, Demand{Model: "m"}).String()
	if none != "model m: not placed: it has no profiles\n" {
		t.Errorf("String() with no profiles = %q", none)
	}
	refused := Explain(Snapshot{}, d).String()
	if !strings.HasPrefix(refused, "model m: not placed (1 profile tried)\n\nprofile tp2: no node can hold profile tp2: the fleet has no nodes\n") {
		t.Errorf("String() of a refusal = %q", refused)
	}
}

func TestVerify(t *testing.T) {
	d := Demand{Model: "m", Profiles: []spec.Profile{gpuProfile("tp2", "a100-80g", 2)}}
	fleet := func(used ...int) Snapshot {
		return Snapshot{Nodes: []Node{node("node01", "a100-80g", 4, used...)}}
	}
	plan := Place(fleet(), d)
	tests := []struct {
		name string
		s    Snapshot
		plan Plan
		want string
	}{
		{"still fits", fleet(3), plan, ""},
		{"gpu taken since", fleet(1), plan, "verifying plan for model m: shard 0 on node node01: gpu 1 is held by shard other-shard"},
		{"node gone", Snapshot{}, plan, "verifying plan for model m: shard 0 on node node01: node is not in the fleet"},
		{"node not ready", Snapshot{Nodes: []Node{with(node("node01", "a100-80g", 4), func(n *Node) { n.Ready = false })}}, plan, "verifying plan for model m: shard 0 on node node01: not ready"},
		{"unknown profile", fleet(), Plan{Placed: true, Profile: gpuProfile("tp8", "a100-80g", 8)}, `verifying plan for model m: model has no profile "tp8"`},
		{"profile changed since", fleet(), with3(plan, func(p *Plan) { p.Profile.TP = 1 }), "verifying plan for model m: profile tp2 is not the model's profile of that name"},
		{"not placed", fleet(), Plan{}, "verifying plan for model m: nothing was placed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Verify(tt.s, d, tt.plan)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("Verify = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestAssumePlacesReplicasUntilFull(t *testing.T) {
	d := Demand{Model: "m", Profiles: []spec.Profile{gpuProfile("tp2", "a100-80g", 2)}}
	s := Snapshot{Nodes: []Node{node("node01", "a100-80g", 4, 0), node("node02", "a100-80g", 2)}}
	orig := s
	var got []string
	for range 5 {
		plan := Place(s, d)
		if !plan.Placed {
			break
		}
		got = append(got, plan.Explanation.Profiles[0].Summary)
		s = Assume(s, d, plan)
	}
	want := []string{"placed on node02 (gpus 0,1; NVLink topology unknown: lowest free GPUs taken)", "placed on node01 (gpus 1,2; NVLink topology unknown: lowest free GPUs taken)"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("successive placements = %v, want %v", got, want)
	}
	if r := s.Nodes[1].Replicas["m"]; r != 1 {
		t.Errorf("node02 replicas of m = %d, want 1", r)
	}
	if s.Nodes[0].UsedGPUs[1] != "m/tp2/0" {
		t.Errorf("node01 gpu 1 held by %q, want m/tp2/0", s.Nodes[0].UsedGPUs[1])
	}
	if !reflect.DeepEqual(orig.Nodes, []Node{node("node01", "a100-80g", 4, 0), node("node02", "a100-80g", 2)}) {
		t.Errorf("Assume modified its input")
	}
}

func ExampleExplanation_String() {
	d := Demand{Model: "llama-70b", Profiles: []spec.Profile{
		{Name: "2x8", Engine: "vllm", GPUClass: "h100-80g", TP: 8, Nodes: 2, Priority: 100},
		{Name: "tp4", Engine: "vllm", GPUClass: "a100-80g", TP: 4, Priority: 50},
	}}
	s := Snapshot{Nodes: []Node{
		inFabric(node("node01", "h100-80g", 8), "ib-a"),
		inFabric(node("node02", "h100-80g", 8), "ib-b"),
		node("node03", "a100-80g", 8, 0, 1, 2, 3, 4),
		with(node("node04", "a100-80g", 8), func(n *Node) { n.Labels = nil; n.Engines = map[string]bool{"llamacpp": true} }),
	}}
	fmt.Print(Explain(s, d))
	// Output:
	// model llama-70b: not placed (2 profiles tried)
	//
	// profile 2x8: needs 2 nodes in one fabric; fabric ib-a has 1 feasible node of 1 (node01), fabric ib-b has 1 feasible node of 1 (node02); rejected node03: wrong GPU class: has a100-80g, needs h100-80g; node04: engine vllm not available (node has llamacpp)
	//   NODE    FEASIBLE  SCORE  REASON
	//   node01  yes       0.667
	//   node02  yes       0.667
	//   node03  no        -      wrong GPU class: has a100-80g, needs h100-80g
	//   node04  no        -      engine vllm not available (node has llamacpp)
	//
	// profile tp4: no node can hold profile tp4: node01, node02: wrong GPU class: has h100-80g, needs a100-80g; node03: 3 free GPUs, needs 4; node04: engine vllm not available (node has llamacpp)
	//   NODE    FEASIBLE  SCORE  REASON
	//   node01  no        -      wrong GPU class: has h100-80g, needs a100-80g
	//   node02  no        -      wrong GPU class: has h100-80g, needs a100-80g
	//   node03  no        -      3 free GPUs, needs 4
	//   node04  no        -      engine vllm not available (node has llamacpp)
}

// with3 applies change to a copy of p.
func with3(p Plan, change func(*Plan)) Plan {
	change(&p)
	return p
}
