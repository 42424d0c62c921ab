package ctl

import (
	"github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/api/specv1"
	"google.golang.org/protobuf/proto"
)

const gib = 1 << 30

func h100s(n int) []*agentv1.GPU {
	gpus := make([]*agentv1.GPU, n)
	for i := range gpus {
		var peers []int32
		for j := range n {
			if j != i {
				peers = append(peers, int32(j))
			}
		}
		gpus[i] = &agentv1.GPU{Index: int32(i), Name: "NVIDIA H100 80GB HBM3", Class: "h100-80g", MemoryMib: 81559, NvlinkPeers: peers}
	}
	return gpus
}

// cannedManage is a small cluster: a free GPU node, a busy GPU node whose
// fabric is down, a lost CPU node; two models; a ready and a failed replica.
func cannedManage() *fakeManage {
	ms := func(agoMs int64) int64 { return testNow.UnixMilli() - agoMs }
	return &fakeManage{
		status: &managev1.Status{
			Version: "0.4.0", NodesTotal: 3, NodesReady: 2, NodesLost: 1,
			Models: 2, ReplicasReady: 1, ReplicasTotal: 2, GpusTotal: 16, GpusUsed: 2,
		},
		nodes: []*managev1.Node{
			{
				Id: "llmgw-node01", State: "ready", LastSeenUnixMs: ms(2_400), AgentVersion: "0.9.0",
				Gpus:                 h100s(8),
				Fabrics:              []*agentv1.FabricVerdict{{Name: "ib-a", Adapters: []string{"mlx5_0"}, InService: true, RateGbps: 400}},
				MemoryTotalBytes:     503*gib + 123_456_789,
				WeightsDiskFreeBytes: proto.Uint64(120 * gib), WeightsDiskTotalBytes: proto.Uint64(400 * gib),
			},
			{
				Id: "llmgw-node02", State: "ready", LastSeenUnixMs: ms(75_000),
				Gpus: h100s(8), UsedGpus: []int32{0, 1}, Replicas: 1,
				Fabrics: []*agentv1.FabricVerdict{
					{Name: "ib-a", Adapters: []string{"mlx5_0", "mlx5_1"}, Problems: []string{"mlx5_1 port 1 is DOWN"}},
					{Name: "roce", Adapters: []string{"mlx5_2"}, InService: true, RateGbps: 100},
				},
				MemoryTotalBytes: 1007 * gib,
			},
			{
				Id: "cpu01", State: "lost", Reason: "no heartbeat since 3h", LastSeenUnixMs: ms(3*3600_000 + 5_000),
				MemoryTotalBytes: 62*gib + 900*(1<<20),
			},
		},
		models: []*managev1.Model{
			{
				Name: "qwen2.5-coder-3b-instruct", Aliases: []string{"coder"}, Origin: "api", Generation: "5f2c",
				Source: "/var/lib/llmgw-models/qwen2.5-coder-3b-instruct-q4_k_m.gguf", RoutingProfile: "chat",
				ContextLength: 32768, MaxOutput: 4096, Scaling: &managev1.Scaling{Min: 1, Max: 1},
				Profiles: []*specv1.Profile{{Name: "cpu", Engine: "llamacpp", Nodes: 1, Weight: 1, Priority: 100, StartupTimeout: "5m", MinMemoryGb: 8, Args: []string{"--ctx-size", "65536"}}},
				Status:   &managev1.ModelStatus{ReplicasDesired: 1, ReplicasReady: 1, ReplicasTotal: 1, State: "serving"},
			},
			{
				Name: "llama-3.1-70b", Origin: "config",
				Status: &managev1.ModelStatus{ReplicasDesired: 1, ReplicasTotal: 1, State: "failed", Message: "replica r-70b-1 failed: shard 1 exited"},
			},
		},
		replicas: []*managev1.Replica{
			{
				Id: "r-coder-1", Model: "qwen2.5-coder-3b-instruct", Profile: "cpu", State: "ready", ShardsExpected: 1,
				EngineLoad: &managev1.EngineLoad{Running: 2, Waiting: 1, KvCacheUsage: 0.35},
				Shards:     []*managev1.Shard{{Id: "r-coder-1-0", Node: "llmgw-node01", State: "ready", Endpoint: "10.0.0.11:30001"}},
			},
			{
				Id: "r-70b-1", Model: "llama-3.1-70b", Profile: "tp8x2", State: "failed", Fabric: "ib-a", ShardsExpected: 2,
				Error: "shard 1 on llmgw-node02 failed: engine exited with status 1 before it was ready",
				Shards: []*managev1.Shard{
					{Id: "r-70b-1-1", Rank: 1, Node: "llmgw-node02", Gpus: []int32{0, 1}, State: "failed",
						Error:      "engine exited with status 1 before it was ready",
						LastOutput: []string{"INFO loading weights", "ERROR NCCL error: unhandled system error", "RuntimeError: NCCL communicator was aborted"}},
					{Id: "r-70b-1-0", Rank: 0, Node: "llmgw-node01", Gpus: []int32{0, 1}, State: "starting"},
				},
			},
		},
		fabrics: []*managev1.Fabric{
			{Name: "ib-a", Description: "rack A, NDR 400G\nspine 1", Nodes: []string{"llmgw-node01", "llmgw-node02"}},
			{Name: "ib-b"},
		},
		explanation: &managev1.Explanation{
			Model: "llama-3.1-70b", Placed: false,
			Profiles: []*managev1.ProfileExplanation{{
				Profile: "tp8x2", Summary: "no fabric has two nodes with 8 free h100-80g",
				Nodes: []*managev1.NodeVerdict{
					{Node: "llmgw-node01", Feasible: true, Score: 0.5},
					{Node: "cpu01", Reason: "node is lost"},
				},
			}},
			Text: "llama-3.1-70b does not place.\nprofile tp8x2: no fabric has two nodes with 8 free h100-80g\n  llmgw-node01  ok (score 0.50)\n  cpu01         node is lost\n",
		},
	}
}
