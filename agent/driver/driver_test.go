package driver

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/spec"
)

func baseSpec(engine string) ShardSpec {
	return ShardSpec{
		ShardID:   "s1",
		ReplicaID: "r1",
		Model:     "qwen",
		Source:    "/models/qwen",
		Binary:    "/opt/venv/bin/" + engine,
		Host:      "10.0.0.1",
		Port:      8000,
		Profile:   spec.Profile{Engine: engine, StartupTimeout: spec.Duration(time.Minute)},
	}
}

// multiNode returns spec as rank of a two-node replica on a fabric.
func multiNode(s ShardSpec, rank int) ShardSpec {
	s.Rank = rank
	s.Nodes = 2
	s.Fabric = "ib-a"
	s.DistInitAddr = "10.0.0.1:29500"
	s.FabricAdapters = []string{"mlx5_0", "mlx5_1"}
	if rank != 0 {
		s.Host = "10.0.0.2"
		s.Port = 0
	}
	return s
}

func with(s ShardSpec, f func(*ShardSpec)) ShardSpec {
	f(&s)
	return s
}

func TestCommands(t *testing.T) {
	gpu2 := func(s *ShardSpec) { s.TP = 2; s.GPUIndices = []int{2, 3} }
	tests := []struct {
		name string
		spec ShardSpec
		want []Command
	}{
		{
			name: "sim single node",
			spec: with(baseSpec("sim"), func(s *ShardSpec) { s.Binary = "/usr/local/bin/llmgw"; s.Args = []string{"--tokens-per-second", "50"} }),
			want: []Command{{Path: "/usr/local/bin/llmgw", Args: []string{
				"sim-engine", "--host", "10.0.0.1", "--port", "8000", "--served-model-name", "qwen", "--model", "/models/qwen",
				"--rank", "0", "--world-size", "1", "--tokens-per-second", "50"}, Env: []string{}}},
		},
		{
			name: "sim worker dials rank 0 and binds no port",
			spec: with(multiNode(baseSpec("sim"), 1), func(s *ShardSpec) { s.Env = map[string]string{"B": "2", "A": "1"} }),
			want: []Command{{Path: "/opt/venv/bin/sim", Args: []string{
				"sim-engine", "--host", "10.0.0.2", "--served-model-name", "qwen", "--model", "/models/qwen",
				"--rank", "1", "--world-size", "2", "--dist-init-addr", "10.0.0.1:29500"}, Env: []string{"A=1", "B=2"}}},
		},
		{
			name: "llamacpp cpu with context length",
			spec: with(baseSpec("llamacpp"), func(s *ShardSpec) { s.ContextLength = 32768 }),
			want: []Command{{Path: "/opt/venv/bin/llamacpp", Args: []string{
				"--model", "/models/qwen", "--host", "10.0.0.1", "--port", "8000", "--alias", "qwen", "--metrics",
				"--n-gpu-layers", "0", "--parallel", "1", "--ctx-size", "32768"}, Env: []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES="}}},
		},
		{
			name: "llamacpp gpu with parallel slots from args multiplies context",
			spec: with(baseSpec("llamacpp"), func(s *ShardSpec) {
				s.TP = 1
				s.GPUIndices = []int{1}
				s.ContextLength = 32768
				s.Args = []string{"--parallel", "2"}
				s.Env = map[string]string{"CUDA_VISIBLE_DEVICES": "7"}
			}),
			want: []Command{{Path: "/opt/venv/bin/llamacpp", Args: []string{
				"--model", "/models/qwen", "--host", "10.0.0.1", "--port", "8000", "--alias", "qwen", "--metrics",
				"--n-gpu-layers", "999", "--ctx-size", "65536", "--parallel", "2"},
				Env: []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=1", "CUDA_VISIBLE_DEVICES=7"}}},
		},
		{
			name: "llamacpp ctx-size in args wins",
			spec: with(baseSpec("llamacpp"), func(s *ShardSpec) { s.ContextLength = 32768; s.Args = []string{"--ctx-size=65536"} }),
			want: []Command{{Path: "/opt/venv/bin/llamacpp", Args: []string{
				"--model", "/models/qwen", "--host", "10.0.0.1", "--port", "8000", "--alias", "qwen", "--metrics",
				"--n-gpu-layers", "0", "--parallel", "1", "--ctx-size=65536"}, Env: []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES="}}},
		},
		{
			name: "vllm mp single node",
			spec: with(baseSpec("vllm"), func(s *ShardSpec) { gpu2(s); s.ContextLength = 8192; s.Args = []string{"--enforce-eager"} }),
			want: []Command{{Path: "/opt/venv/bin/vllm", Args: []string{
				"serve", "/models/qwen", "--host", "10.0.0.1", "--port", "8000", "--served-model-name", "qwen",
				"--tensor-parallel-size", "2", "--distributed-executor-backend", "mp", "--max-model-len", "8192", "--enforce-eager"},
				Env: []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=2,3", "PYTHONUNBUFFERED=1"}}},
		},
		{
			name: "vllm mp multi-node rank 0",
			spec: with(multiNode(baseSpec("vllm"), 0), func(s *ShardSpec) { gpu2(s); s.Env = map[string]string{"NCCL_SOCKET_IFNAME": "ib0"} }),
			want: []Command{{Path: "/opt/venv/bin/vllm", Args: []string{
				"serve", "/models/qwen", "--host", "10.0.0.1", "--port", "8000", "--served-model-name", "qwen",
				"--tensor-parallel-size", "2", "--pipeline-parallel-size", "2", "--distributed-executor-backend", "mp",
				"--nnodes", "2", "--node-rank", "0", "--master-addr", "10.0.0.1", "--master-port", "29500"},
				Env: []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=2,3", "NCCL_IB_HCA=mlx5_0,mlx5_1", "PYTHONUNBUFFERED=1", "NCCL_SOCKET_IFNAME=ib0"}}},
		},
		{
			name: "vllm mp multi-node worker is headless",
			spec: with(multiNode(baseSpec("vllm"), 1), gpu2),
			want: []Command{{Path: "/opt/venv/bin/vllm", Args: []string{
				"serve", "/models/qwen", "--served-model-name", "qwen",
				"--tensor-parallel-size", "2", "--pipeline-parallel-size", "2", "--distributed-executor-backend", "mp",
				"--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--master-port", "29500", "--headless"},
				Env: []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=2,3", "NCCL_IB_HCA=mlx5_0,mlx5_1", "PYTHONUNBUFFERED=1"}}},
		},
		{
			name: "vllm ray multi-node rank 0 runs the head as a sidecar",
			spec: with(multiNode(baseSpec("vllm"), 0), func(s *ShardSpec) { gpu2(s); s.LaunchMode = "ray" }),
			want: []Command{
				{Path: "/opt/venv/bin/ray", Args: []string{"start", "--head", "--port", "29500", "--num-gpus", "2", "--block"},
					Env: []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=2,3", "NCCL_IB_HCA=mlx5_0,mlx5_1", "PYTHONUNBUFFERED=1"}, WaitAddr: "10.0.0.1:29500"},
				{Path: "/opt/venv/bin/vllm", Args: []string{
					"serve", "/models/qwen", "--host", "10.0.0.1", "--port", "8000", "--served-model-name", "qwen",
					"--tensor-parallel-size", "2", "--pipeline-parallel-size", "2", "--distributed-executor-backend", "ray"},
					Env: []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=2,3", "NCCL_IB_HCA=mlx5_0,mlx5_1", "PYTHONUNBUFFERED=1", "RAY_ADDRESS=10.0.0.1:29500"}},
			},
		},
		{
			name: "vllm ray worker runs only ray",
			spec: with(multiNode(baseSpec("vllm"), 1), func(s *ShardSpec) { gpu2(s); s.LaunchMode = "ray"; s.Binary = "vllm" }),
			want: []Command{{Path: "ray", Args: []string{"start", "--address", "10.0.0.1:29500", "--num-gpus", "2", "--block"},
				Env: []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=2,3", "NCCL_IB_HCA=mlx5_0,mlx5_1", "PYTHONUNBUFFERED=1"}}},
		},
		{
			name: "vllm ray single node",
			spec: with(baseSpec("vllm"), func(s *ShardSpec) { gpu2(s); s.LaunchMode = "ray"; s.DistInitAddr = "10.0.0.1:6380" }),
			want: []Command{
				{Path: "/opt/venv/bin/ray", Args: []string{"start", "--head", "--port", "6380", "--num-gpus", "2", "--block"},
					Env: []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=2,3", "PYTHONUNBUFFERED=1"}, WaitAddr: "10.0.0.1:6380"},
				{Path: "/opt/venv/bin/vllm", Args: []string{
					"serve", "/models/qwen", "--host", "10.0.0.1", "--port", "8000", "--served-model-name", "qwen",
					"--tensor-parallel-size", "2", "--distributed-executor-backend", "ray"},
					Env: []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=2,3", "PYTHONUNBUFFERED=1", "RAY_ADDRESS=10.0.0.1:6380"}},
			},
		},
		{
			name: "sglang single node through python",
			spec: with(baseSpec("sglang"), func(s *ShardSpec) { gpu2(s); s.Binary = "/opt/sglang/bin/python3"; s.ContextLength = 4096 }),
			want: []Command{{Path: "/opt/sglang/bin/python3", Args: []string{
				"-m", "sglang.launch_server", "--model-path", "/models/qwen", "--host", "10.0.0.1", "--port", "8000",
				"--served-model-name", "qwen", "--tensor-parallel-size", "2", "--context-length", "4096"},
				Env: []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=2,3", "PYTHONUNBUFFERED=1"}}},
		},
		{
			name: "sglang default launcher",
			spec: with(baseSpec("sglang"), func(s *ShardSpec) { gpu2(s); s.Binary = "" }),
			want: []Command{{Path: "python3", Args: []string{
				"-m", "sglang.launch_server", "--model-path", "/models/qwen", "--host", "10.0.0.1", "--port", "8000",
				"--served-model-name", "qwen", "--tensor-parallel-size", "2"},
				Env: []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=2,3", "PYTHONUNBUFFERED=1"}}},
		},
		{
			name: "sglang multi-node worker through a wrapper binary",
			spec: with(multiNode(baseSpec("sglang"), 1), func(s *ShardSpec) { gpu2(s); s.Binary = "/opt/bin/sglang-serve" }),
			want: []Command{{Path: "/opt/bin/sglang-serve", Args: []string{
				"--model-path", "/models/qwen", "--served-model-name", "qwen", "--tensor-parallel-size", "4",
				"--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.1:29500"},
				Env: []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=2,3", "NCCL_IB_HCA=mlx5_0,mlx5_1", "PYTHONUNBUFFERED=1"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := ForEngine(tt.spec.Engine)
			if err != nil {
				t.Fatal(err)
			}
			got, err := d.Commands(tt.spec)
			if err != nil {
				t.Fatalf("Commands() error: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Commands() =\n%#v\nwant\n%#v", got, tt.want)
			}
		})
	}
}

func TestCommandsValidation(t *testing.T) {
	tests := []struct {
		name    string
		spec    ShardSpec
		wantErr []string
	}{
		{name: "missing identity", spec: with(baseSpec("sim"), func(s *ShardSpec) { s.ShardID = ""; s.Model = ""; s.Source = "" }),
			wantErr: []string{"shard_id: is required", "model: served model name is required", "source: weights path"}},
		{name: "sim without binary", spec: with(baseSpec("sim"), func(s *ShardSpec) { s.Binary = "" }),
			wantErr: []string{"binary: no sim executable declared"}},
		{name: "rank 0 without port", spec: with(baseSpec("sim"), func(s *ShardSpec) { s.Port = 0 }),
			wantErr: []string{"port: must be in 1..65535 for rank 0"}},
		{name: "rank 0 without host", spec: with(baseSpec("sim"), func(s *ShardSpec) { s.Host = "" }),
			wantErr: []string{"host: is required for rank 0"}},
		{name: "rank out of range", spec: with(multiNode(baseSpec("sim"), 0), func(s *ShardSpec) { s.Rank = 2 }),
			wantErr: []string{"rank: must be in 0..1 for a replica of 2 nodes, got 2"}},
		{name: "negative nodes", spec: with(baseSpec("sim"), func(s *ShardSpec) { s.Nodes = -1 }),
			wantErr: []string{"nodes: must be at least 1, got -1"}},
		{name: "multi-node without rendezvous", spec: with(multiNode(baseSpec("sim"), 1), func(s *ShardSpec) { s.DistInitAddr = "" }),
			wantErr: []string{"dist_init_addr: is required"}},
		{name: "bad rendezvous", spec: with(multiNode(baseSpec("sim"), 1), func(s *ShardSpec) { s.DistInitAddr = "10.0.0.1" }),
			wantErr: []string{`dist_init_addr: "10.0.0.1" is not host:port`}},
		{name: "engine mismatch", spec: with(baseSpec("sim"), func(s *ShardSpec) { s.Engine = "vllm" }),
			wantErr: []string{`engine: is "vllm" but the sim driver`}},
		{name: "launch mode on sim", spec: with(baseSpec("sim"), func(s *ShardSpec) { s.LaunchMode = "ray" }),
			wantErr: []string{"launch_mode: only vllm takes a launch mode; engine sim does not"}},
		{name: "bad env name", spec: with(baseSpec("sim"), func(s *ShardSpec) { s.Env = map[string]string{"A=B": "x"} }),
			wantErr: []string{`env: "A=B" is not a valid environment variable name`}},
		{name: "duplicate gpu", spec: with(baseSpec("vllm"), func(s *ShardSpec) { s.TP = 2; s.GPUIndices = []int{1, 1} }),
			wantErr: []string{"gpu_indices[1]: GPU 1 is listed twice"}},
		{name: "llamacpp multi-node", spec: multiNode(baseSpec("llamacpp"), 0),
			wantErr: []string{"nodes: llamacpp runs on one node only, got 2"}},
		{name: "llamacpp bad parallel", spec: with(baseSpec("llamacpp"), func(s *ShardSpec) { s.Args = []string{"-np", "x"} }),
			wantErr: []string{`args: --parallel "x" is not a positive number`}},
		{name: "vllm without tp", spec: baseSpec("vllm"),
			wantErr: []string{"tp: must be at least 1 for vllm, got 0"}},
		{name: "vllm gpus short of tp", spec: with(baseSpec("vllm"), func(s *ShardSpec) { s.TP = 2; s.GPUIndices = []int{0} }),
			wantErr: []string{"gpu_indices: vllm needs tp=2 GPUs per shard, got 1"}},
		{name: "vllm unknown launch mode", spec: with(baseSpec("vllm"), func(s *ShardSpec) { s.TP = 1; s.GPUIndices = []int{0}; s.LaunchMode = "k8s" }),
			wantErr: []string{`launch_mode: must be "mp" or "ray", got "k8s"`}},
		{name: "vllm ray single node needs head port", spec: with(baseSpec("vllm"), func(s *ShardSpec) { s.TP = 1; s.GPUIndices = []int{0}; s.LaunchMode = "ray" }),
			wantErr: []string{"dist_init_addr: is required"}},
		{name: "sglang without gpus", spec: with(baseSpec("sglang"), func(s *ShardSpec) { s.TP = 1 }),
			wantErr: []string{"gpu_indices: sglang needs tp=1 GPUs per shard, got 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			engine := tt.spec.Engine
			if tt.name == "engine mismatch" {
				engine = "sim"
			}
			d, err := ForEngine(engine)
			if err != nil {
				t.Fatal(err)
			}
			cmds, err := d.Commands(tt.spec)
			if err == nil {
				t.Fatalf("Commands() = %v, want an error", cmds)
			}
			if !strings.Contains(err.Error(), `shard spec "`+tt.spec.ShardID+`"`) {
				t.Errorf("error %q does not name the shard", err)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestCheckCommand(t *testing.T) {
	tests := []struct {
		engine, binary string
		want           Command
		wantErr        string
	}{
		{engine: "llamacpp", binary: "/opt/llama.cpp/llama-server",
			want: Command{Path: "/opt/llama.cpp/llama-server", Args: []string{"--version"}, Env: []string{"CUDA_VISIBLE_DEVICES="}}},
		{engine: "vllm", binary: "/opt/venvs/vllm/bin/vllm",
			want: Command{Path: "/opt/venvs/vllm/bin/vllm", Args: []string{"--version"}, Env: []string{"CUDA_VISIBLE_DEVICES=", "PYTHONUNBUFFERED=1"}}},
		{engine: "sglang", binary: "/opt/venvs/sglang/bin/python3.12",
			want: Command{Path: "/opt/venvs/sglang/bin/python3.12", Args: []string{"-c", "import sglang; print('sglang version', sglang.__version__)"}, Env: []string{"CUDA_VISIBLE_DEVICES=", "PYTHONUNBUFFERED=1"}}},
		{engine: "sglang", binary: "",
			want: Command{Path: "python3", Args: []string{"-c", "import sglang; print('sglang version', sglang.__version__)"}, Env: []string{"CUDA_VISIBLE_DEVICES=", "PYTHONUNBUFFERED=1"}}},
		{engine: "sglang", binary: "/usr/local/bin/sglang-wrapper",
			want: Command{Path: "/usr/local/bin/sglang-wrapper", Args: []string{"--version"}, Env: []string{"CUDA_VISIBLE_DEVICES=", "PYTHONUNBUFFERED=1"}}},
		{engine: "sim", binary: "/usr/local/bin/llmgw",
			want: Command{Path: "/usr/local/bin/llmgw", Args: []string{"sim-engine", "--version"}}},
		{engine: "llamacpp", binary: "", wantErr: "checking llamacpp: no executable declared for it (engines.llamacpp)"},
		{engine: "vllm", binary: " ", wantErr: "engines.vllm"},
		{engine: "sim", binary: "", wantErr: "engines.sim"},
	}
	for _, tt := range tests {
		t.Run(tt.engine+" "+tt.binary, func(t *testing.T) {
			d, err := ForEngine(tt.engine)
			if err != nil {
				t.Fatal(err)
			}
			got, err := d.CheckCommand(tt.binary)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("CheckCommand(%q) error = %v, want one containing %q", tt.binary, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("CheckCommand(%q) =\n %#v\nwant\n %#v", tt.binary, got, tt.want)
			}
		})
	}
}

func TestForEngine(t *testing.T) {
	for _, name := range Engines() {
		d, err := ForEngine(name)
		if err != nil {
			t.Fatalf("ForEngine(%q): %v", name, err)
		}
		if d.Name() != name {
			t.Errorf("ForEngine(%q).Name() = %q", name, d.Name())
		}
		if d.HealthPath() != "/health" {
			t.Errorf("%s HealthPath() = %q, want /health", name, d.HealthPath())
		}
		if !d.ServesHTTP(0) || d.ServesHTTP(1) {
			t.Errorf("%s ServesHTTP: rank 0 = %v, rank 1 = %v; want only rank 0", name, d.ServesHTTP(0), d.ServesHTTP(1))
		}
	}
	_, err := ForEngine("tgi")
	if err == nil || !strings.Contains(err.Error(), `engine "tgi": unknown engine (known: sim, llamacpp, vllm, sglang)`) {
		t.Fatalf("ForEngine(tgi) error = %v", err)
	}
}

// TestDriverFlagsMatchSpec: spec.DriverFlags, which the engine check
// compares with each engine's help, lists exactly the flags each driver
// writes (every mode and rank, with a context length so that the flags
// written only then are there), and spec.LaunchFlags adds the profile's
// own args after them.
func TestDriverFlagsMatchSpec(t *testing.T) {
	gpu := func(n int) func(*ShardSpec) {
		return func(s *ShardSpec) {
			s.TP = n
			s.GPUIndices = nil
			for i := range n {
				s.GPUIndices = append(s.GPUIndices, i)
			}
			s.ContextLength = 4096
		}
	}
	ray := func(s *ShardSpec) { s.LaunchMode = LaunchModeRay; s.DistInitAddr = "10.0.0.1:6379" }
	specs := map[string]ShardSpec{
		"llamacpp cpu":      with(baseSpec("llamacpp"), func(s *ShardSpec) { s.ContextLength = 4096 }),
		"llamacpp gpu":      with(baseSpec("llamacpp"), gpu(1)),
		"vllm single":       with(baseSpec("vllm"), gpu(2)),
		"vllm mp rank 0":    with(multiNode(baseSpec("vllm"), 0), gpu(2)),
		"vllm mp rank 1":    with(multiNode(baseSpec("vllm"), 1), gpu(2)),
		"vllm ray single":   with(with(baseSpec("vllm"), gpu(2)), ray),
		"vllm ray rank 0":   with(with(multiNode(baseSpec("vllm"), 0), gpu(2)), ray),
		"sglang single":     with(baseSpec("sglang"), gpu(2)),
		"sglang two node 0": with(multiNode(baseSpec("sglang"), 0), gpu(2)),
		"sglang two node 1": with(multiNode(baseSpec("sglang"), 1), gpu(2)),
	}
	for name, s := range specs {
		t.Run(name, func(t *testing.T) {
			d, err := ForEngine(s.Engine)
			if err != nil {
				t.Fatal(err)
			}
			cmds, err := d.Commands(s)
			if err != nil {
				t.Fatal(err)
			}
			engine := cmds[len(cmds)-1] // the sidecars (ray) are not the engine
			if s.LaunchMode == LaunchModeRay && s.Rank != 0 {
				t.Skip("a Ray worker runs no engine")
			}
			var wrote []string
			for _, a := range engine.Args {
				if f, ok := spec.FlagName(a); ok && !slices.Contains(wrote, f) {
					wrote = append(wrote, f)
				}
			}
			want := spec.DriverFlags(s.Profile)
			// Workers leave out what only rank 0 needs (--host, --port);
			// every flag written must be listed, and rank 0 writes them all.
			for _, f := range wrote {
				if !slices.Contains(want, f) {
					t.Errorf("driver writes %s, which spec.DriverFlags does not list (%v)", f, want)
				}
			}
			if s.Rank == 0 {
				for _, f := range want {
					if f == "--headless" {
						continue // only workers write it
					}
					if !slices.Contains(wrote, f) {
						t.Errorf("spec.DriverFlags lists %s, which the driver does not write (%v)", f, wrote)
					}
				}
			}
			s.Args = []string{"--foo=1", "-x", "-1", "--port", "9"}
			var got []string
			for _, lf := range spec.LaunchFlags(s.Profile) {
				if lf.FromArgs {
					got = append(got, lf.Name)
				}
			}
			if !slices.Equal(got, []string{"--foo", "-x"}) {
				t.Errorf("flags from args = %v, want [--foo -x] (--port is the driver's, -1 a value)", got)
			}
		})
	}
}
