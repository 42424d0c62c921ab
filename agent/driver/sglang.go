package driver

import (
	"path/filepath"
	"strconv"
	"strings"
)

// SGLang drives SGLang's launch_server. None of its flags has been run
// against an engine: SGLang was not installed anywhere the earlier version
// was tested. --model-path --host --port --served-model-name
// --tensor-parallel-size --context-length --nnodes --node-rank
// --dist-init-addr are checked against the usage SGLang 0.5.8.post1
// printed (agent/enginecheck/testdata), and on each node against its own
// help by the engine check.
type SGLang struct{}

var _ Driver = SGLang{}

// Name implements Driver.
func (SGLang) Name() string { return EngineSGLang }

// HealthPath implements Driver: SGLang's server answers /health.
func (SGLang) HealthPath() string { return "/health" }

// ServesHTTP implements Driver: only node rank 0 runs the HTTP server.
func (SGLang) ServesHTTP(rank int) bool { return rank == 0 }

// CheckCommand implements Driver. A Python interpreter (or no binary:
// python3 from PATH) imports sglang and prints its version; any other
// executable (a wrapper script) is run with --version. Unverified, like
// every SGLang flag.
func (SGLang) CheckCommand(binary string) (Command, error) {
	env := checkEnv("PYTHONUNBUFFERED=1")
	if binary == "" {
		binary = "python3"
	}
	if strings.HasPrefix(filepath.Base(binary), "python") {
		return Command{Path: binary, Args: []string{"-c", "import sglang; print('sglang version', sglang.__version__)"}, Env: env}, nil
	}
	return Command{Path: binary, Args: []string{"--version"}, Env: env}, nil
}

// HelpCommands implements Driver: launch_server's --help, run as the
// launch is.
func (SGLang) HelpCommands(binary string) []Command {
	path, args := binary, []string{"--help"}
	if path == "" {
		path = "python3"
	}
	if strings.HasPrefix(filepath.Base(path), "python") {
		args = []string{"-m", "sglang.launch_server", "--help"}
	}
	return []Command{{Path: path, Args: args, Env: helpEnv("PYTHONUNBUFFERED=1")}}
}

// Commands implements Driver.
//
// Binary may be a Python interpreter (its name starts with "python"), which
// is run as `<python> -m sglang.launch_server`; any other executable is run
// directly with the server's arguments (a wrapper script, say). An empty
// Binary means `python3 -m sglang.launch_server` from PATH. Tensor
// parallelism spans the whole replica: --tensor-parallel-size (SGLang also reads it as --tp-size) is TP × nodes.
func (d SGLang) Commands(s ShardSpec) ([]Command, error) {
	c := checkCommon(EngineSGLang, s, d.ServesHTTP(s.Rank), false)
	checkGPUs(c, s)
	if err := c.err(); err != nil {
		return nil, err
	}
	path, args := s.Binary, []string(nil)
	if path == "" {
		path = "python3"
	}
	if strings.HasPrefix(filepath.Base(path), "python") {
		args = []string{"-m", "sglang.launch_server"}
	}
	n := s.Shards()
	args = append(args, "--model-path", s.Source)
	if d.ServesHTTP(s.Rank) {
		args = append(args, "--host", s.Host, "--port", strconv.Itoa(s.Port))
	}
	args = append(args,
		"--served-model-name", s.Model,
		"--tensor-parallel-size", strconv.Itoa(s.TP*n),
	)
	if _, set := argValue(s.Args, "--context-length"); !set && s.ContextLength > 0 {
		args = append(args, "--context-length", strconv.Itoa(s.ContextLength))
	}
	if n > 1 {
		args = append(args,
			"--nnodes", strconv.Itoa(n),
			"--node-rank", strconv.Itoa(s.Rank),
			"--dist-init-addr", s.DistInitAddr,
		)
	}
	return []Command{{Path: path, Args: withArgs(args, s), Env: gpuEnv(s, "PYTHONUNBUFFERED=1")}}, nil
}
