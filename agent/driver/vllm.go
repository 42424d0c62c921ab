package driver

import (
	"net"
	"strconv"
)

// VLLM drives `vllm serve`.
//
// Verified against vLLM 0.29.0 (operator guides): --host --port
// --tensor-parallel-size --served-model-name --distributed-executor-backend.
// Read from vLLM's documentation and not yet run: --pipeline-parallel-size,
// --max-model-len, the multi-node mp flags (--nnodes --node-rank
// --master-addr --master-port --headless) and the whole Ray sequence (`ray
// start --head --port --num-gpus --block`, `ray start --address`,
// RAY_ADDRESS for `vllm serve`), since vLLM 0.29 does not install Ray.
type VLLM struct{}

var _ Driver = VLLM{}

// Name implements Driver.
func (VLLM) Name() string { return EngineVLLM }

// HealthPath implements Driver: vLLM's OpenAI server answers /health.
func (VLLM) HealthPath() string { return "/health" }

// ServesHTTP implements Driver: only rank 0 runs the API server; mp workers
// run --headless and Ray workers run only a raylet.
func (VLLM) ServesHTTP(rank int) bool { return rank == 0 }

// CheckCommand implements Driver: `vllm --version`, as the operator guides
// ran it in vLLM's virtualenv; it imports vLLM (and torch) and prints the
// version.
func (VLLM) CheckCommand(binary string) (Command, error) {
	if err := requireBinary(EngineVLLM, binary); err != nil {
		return Command{}, err
	}
	return Command{Path: binary, Args: []string{"--version"}, Env: checkEnv("PYTHONUNBUFFERED=1")}, nil
}

// HelpCommands implements Driver: `vllm serve --help=all`, then `vllm serve
// --help`. vLLM 0.10 and later print only a summary of groups for --help
// (no flag at all) and every flag for --help=all; earlier releases print
// every flag for --help and refuse --help=all ("ignored explicit
// argument").
func (VLLM) HelpCommands(binary string) []Command {
	env := helpEnv("PYTHONUNBUFFERED=1")
	return []Command{
		{Path: binary, Args: []string{"serve", "--help=all"}, Env: env},
		{Path: binary, Args: []string{"serve", "--help"}, Env: env},
	}
}

// Commands implements Driver.
//
// Launch mode mp (the default): one `vllm serve` per node. Multi-node runs
// pipeline parallel across nodes (--pipeline-parallel-size NODES) with
// rank 0's DistInitAddr as --master-addr/--master-port; workers add
// --headless.
//
// Launch mode ray: rank 0 runs `ray start --head --port PORT --block` as a
// sidecar (the supervisor waits for PORT to accept connections), then
// `vllm serve ... --distributed-executor-backend ray` with RAY_ADDRESS
// naming that head so vLLM joins it rather than starting its own. Workers
// run only `ray start --address HOST:PORT --block`. `ray` is looked up
// beside the vllm executable (the same virtualenv).
func (d VLLM) Commands(s ShardSpec) ([]Command, error) {
	c := checkCommon(EngineVLLM, s, d.ServesHTTP(s.Rank), true)
	checkGPUs(c, s)
	mode := s.LaunchMode
	if mode == "" {
		mode = LaunchModeMP
	}
	switch mode {
	case LaunchModeMP:
	case LaunchModeRay:
		if s.Shards() == 1 {
			// The head's port still comes from the rendezvous address.
			checkAddr(c, "dist_init_addr", s.DistInitAddr)
		}
	default:
		c.addf("launch_mode", "must be %q or %q, got %q", LaunchModeMP, LaunchModeRay, s.LaunchMode)
	}
	if err := c.err(); err != nil {
		return nil, err
	}
	n := s.Shards()
	env := gpuEnv(s, "PYTHONUNBUFFERED=1")
	serve := func(headless bool) []string {
		args := []string{"serve", s.Source}
		if !headless {
			args = append(args, "--host", s.Host, "--port", strconv.Itoa(s.Port))
		}
		args = append(args,
			"--served-model-name", s.Model,
			"--tensor-parallel-size", strconv.Itoa(s.TP),
		)
		if n > 1 {
			args = append(args, "--pipeline-parallel-size", strconv.Itoa(n))
		}
		args = append(args, "--distributed-executor-backend", mode)
		if _, set := argValue(s.Args, "--max-model-len"); !set && s.ContextLength > 0 {
			args = append(args, "--max-model-len", strconv.Itoa(s.ContextLength))
		}
		return args
	}

	if mode == LaunchModeMP {
		headless := s.Rank != 0
		args := serve(headless)
		if n > 1 {
			host, port, _ := net.SplitHostPort(s.DistInitAddr) // validated above
			args = append(args,
				"--nnodes", strconv.Itoa(n),
				"--node-rank", strconv.Itoa(s.Rank),
				"--master-addr", host,
				"--master-port", port,
			)
			if headless {
				args = append(args, "--headless")
			}
		}
		return []Command{{Path: s.Binary, Args: withArgs(args, s), Env: env}}, nil
	}

	_, port, _ := net.SplitHostPort(s.DistInitAddr) // validated above
	ray := siblingBinary(s.Binary, "ray")
	gpus := strconv.Itoa(len(s.GPUIndices))
	if s.Rank != 0 {
		return []Command{{
			Path: ray,
			Args: []string{"start", "--address", s.DistInitAddr, "--num-gpus", gpus, "--block"},
			Env:  env,
		}}, nil
	}
	serveEnv := gpuEnv(s, "PYTHONUNBUFFERED=1", "RAY_ADDRESS="+s.DistInitAddr)
	return []Command{
		{
			Path:     ray,
			Args:     []string{"start", "--head", "--port", port, "--num-gpus", gpus, "--block"},
			Env:      env,
			WaitAddr: s.DistInitAddr,
		},
		{Path: s.Binary, Args: withArgs(serve(false), s), Env: serveEnv},
	}, nil
}
