package driver

import "strconv"

// Sim drives the simulated engine, `llmgw sim-engine`. Its flags are llmgw's
// own. Rank 0 binds --dist-init-addr and serves HTTP only once every worker
// has joined; workers dial it and serve nothing.
type Sim struct{}

var _ Driver = Sim{}

// Name implements Driver.
func (Sim) Name() string { return EngineSim }

// HealthPath implements Driver.
func (Sim) HealthPath() string { return "/health" }

// ServesHTTP implements Driver: only rank 0 serves.
func (Sim) ServesHTTP(rank int) bool { return rank == 0 }

// CheckCommand implements Driver: `llmgw sim-engine --version`, where
// binary is the llmgw executable.
func (Sim) CheckCommand(binary string) (Command, error) {
	if err := requireBinary(EngineSim, binary); err != nil {
		return Command{}, err
	}
	return Command{Path: binary, Args: []string{"sim-engine", "--version"}}, nil
}

// Commands implements Driver. Binary is the llmgw executable. The sim engine
// has no GPUs to hide, so no CUDA or NCCL variables are set; the operator's
// Env still applies.
func (d Sim) Commands(s ShardSpec) ([]Command, error) {
	c := checkCommon(EngineSim, s, d.ServesHTTP(s.Rank), true)
	if err := c.err(); err != nil {
		return nil, err
	}
	args := []string{"sim-engine"}
	if s.Host != "" {
		args = append(args, "--host", s.Host)
	}
	if s.Port != 0 {
		args = append(args, "--port", strconv.Itoa(s.Port))
	}
	args = append(args,
		"--served-model-name", s.Model,
		"--model", s.Source,
		"--rank", strconv.Itoa(s.Rank),
		"--world-size", strconv.Itoa(s.Shards()),
	)
	if s.DistInitAddr != "" {
		args = append(args, "--dist-init-addr", s.DistInitAddr)
	}
	return []Command{{Path: s.Binary, Args: withArgs(args, s), Env: operatorEnv(s)}}, nil
}

// HelpCommands implements Driver: none. The sim engine's flags are llmgw's
// own, built into the same binary.
func (Sim) HelpCommands(string) []Command { return nil }
