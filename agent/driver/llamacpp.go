package driver

import (
	"fmt"
	"strconv"

	"github.com/llmgw/llmgw/spec"
)

// DefaultLlamaCppSlots is the number of parallel slots (--parallel) given to
// llama-server when the profile's args do not say. Validation divides an
// explicit --ctx-size by the same number (spec's llama.cpp context guard).
const DefaultLlamaCppSlots = spec.DefaultLlamaCppSlots

// LlamaCpp drives llama.cpp's llama-server. Every flag it emits (--model
// --host --port --alias --metrics --n-gpu-layers --parallel, and --ctx-size)
// is run for real by e2e/llamacpp_test.go against llama.cpp de3ff815ea7d
// (node-llama-cpp 3.22.1's bundle), which exits on an unknown argument.
type LlamaCpp struct{}

var _ Driver = LlamaCpp{}

// Name implements Driver.
func (LlamaCpp) Name() string { return EngineLlamaCpp }

// HealthPath implements Driver: llama-server answers /health with 200 once
// the model is loaded and 503 while loading.
func (LlamaCpp) HealthPath() string { return "/health" }

// ServesHTTP implements Driver. llama.cpp runs on one node, as rank 0.
func (LlamaCpp) ServesHTTP(rank int) bool { return rank == 0 }

// CheckCommand implements Driver: `llama-server --version`. It prints the
// build after loading the ggml backends: "version: 4567 (abcdef0)" in
// numbered releases, "version: 0.5.0-dev (build 1, commit de3ff81)" in the
// build the e2e tests run.
func (LlamaCpp) CheckCommand(binary string) (Command, error) {
	if err := requireBinary(EngineLlamaCpp, binary); err != nil {
		return Command{}, err
	}
	return Command{Path: binary, Args: []string{"--version"}, Env: checkEnv()}, nil
}

// HelpCommands implements Driver: `llama-server --help`, which lists every
// flag with its short and long names.
func (LlamaCpp) HelpCommands(binary string) []Command {
	return []Command{{Path: binary, Args: []string{"--help"}, Env: helpEnv()}}
}

// Commands implements Driver.
//
// llama.cpp divides --ctx-size among its --parallel slots, so the context
// given is context_length × slots: each slot can then hold one request of
// the catalog's full context length. A profile that sets --ctx-size (or -c)
// itself keeps its own value; one that sets --parallel (or -np) changes the
// slot count used in that product.
func (d LlamaCpp) Commands(s ShardSpec) ([]Command, error) {
	c := checkCommon(EngineLlamaCpp, s, d.ServesHTTP(s.Rank), true)
	if s.Shards() > 1 {
		c.addf("nodes", "llamacpp runs on one node only, got %d", s.Shards())
	}
	if s.TP > 0 && len(s.GPUIndices) != s.TP {
		c.addf("gpu_indices", "tp=%d but %d GPUs given (%v)", s.TP, len(s.GPUIndices), s.GPUIndices)
	}
	slots := DefaultLlamaCppSlots
	v, slotsSet := argValue(s.Args, "--parallel", "-np")
	if slotsSet {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			c.addf("args", "--parallel %q is not a positive number", v)
		} else {
			slots = n
		}
	}
	if err := c.err(); err != nil {
		return nil, err
	}
	layers := "0"
	if len(s.GPUIndices) > 0 {
		layers = "999" // every layer on the GPUs
	}
	args := []string{
		"--model", s.Source,
		"--host", s.Host,
		"--port", strconv.Itoa(s.Port),
		"--alias", s.Model,
		"--metrics",
		"--n-gpu-layers", layers,
	}
	if !slotsSet {
		args = append(args, "--parallel", strconv.Itoa(slots))
	}
	if _, set := argValue(s.Args, "--ctx-size", "-c"); !set && s.ContextLength > 0 {
		args = append(args, "--ctx-size", fmt.Sprint(s.ContextLength*slots))
	}
	// CUDA_VISIBLE_DEVICES is set even when empty: a CUDA build given no GPUs
	// must not take any.
	return []Command{{Path: s.Binary, Args: withArgs(args, s), Env: gpuEnv(s)}}, nil
}
