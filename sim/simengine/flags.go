// Package simengine is the simulated inference engine: an OpenAI-compatible
// HTTP server that streams deterministic words at configured rates, keeps a
// prefix cache so time to first token depends on what it has already seen,
// exports vLLM's metric names, and rendezvouses for real when it is one rank
// of a multi-node replica. An agent launches it as `llmgw sim-engine` like any
// other engine; tests and benchmarks may run it in-process through Handler.
package simengine

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"

	"github.com/llmgw/llmgw/internal/cliflags"
)

// Defaults applied to zero fields of a Config.
const (
	DefaultWorldSize         = 1
	DefaultPrefixCacheBlocks = 1024
	DefaultBlockSize         = 16
	DefaultMaxModelLen       = 8192
	DefaultEmbeddingDim      = 64
	DefaultMaxNumSeqs        = 256
	defaultPort              = 8000
	defaultHost              = "127.0.0.1"
)

// Config configures one simulated engine process (one rank of a replica).
// Zero values of the numeric fields take the documented defaults.
type Config struct {
	// Host and Port are where rank 0 serves HTTP; Port 0 picks a free port.
	Host string
	Port int
	// ServedModelName is the only model name the engine answers to.
	ServedModelName string
	// Model is the source of the weights; informational only.
	Model string
	// Rank and WorldSize place this process in a multi-node replica. Rank 0
	// serves HTTP once every worker (ranks 1..WorldSize-1) has joined.
	Rank      int
	WorldSize int
	// DistInitAddr (host:port) is where rank 0 listens for its workers.
	DistInitAddr string
	// PrefillTokensPerSec and DecodeTokensPerSec set the simulated speed;
	// 0 makes that phase instantaneous.
	PrefillTokensPerSec float64
	DecodeTokensPerSec  float64
	// EOSAfter ends an answer after this many tokens with finish_reason
	// "stop", as a model emitting its end-of-sequence token does, unless
	// the request asks for fewer or sets ignore_eos (vLLM's parameter);
	// 0 never does, so answers run to max_tokens.
	EOSAfter int
	// OvershootTokens makes the engine misbehave as an engine that does not
	// honour max_tokens: an answer cut by the request's max_tokens (or
	// max_completion_tokens) runs this many tokens past it, and its usage
	// says so. 0 (the default) honours the bound. For testing that the
	// gateway bounds what such an engine can cost.
	OvershootTokens int
	// PrefixCacheBlocks bounds the prefix cache (default 1024, negative
	// disables it); BlockSize is the number of tokens per block (default 16).
	PrefixCacheBlocks int
	BlockSize         int
	// MaxModelLen bounds prompt plus completion tokens (default 8192).
	MaxModelLen int
	// EmbeddingDim is the length of embedding vectors (default 64).
	EmbeddingDim int
	// MaxNumSeqs bounds requests generating at once; the rest wait
	// (default 256).
	MaxNumSeqs int
	// ShowVersion (--version) asks for the version line and nothing else:
	// the agent's engine check. No other flag is then required.
	ShowVersion bool
}

// A FlagError is a malformed or unknown flag, or a stray argument, on the
// sim-engine command line; ParseFlags has printed it with the usage.
type FlagError struct{ Err error }

func (e *FlagError) Error() string { return "parsing sim-engine flags: " + e.Err.Error() }
func (e *FlagError) Unwrap() error { return e.Err }

// ParseFlags parses the sim-engine command line (without the program or
// subcommand name) into a Config. A flag the command line gets wrong is a
// *FlagError, printed to out with the usage (for -h it wraps
// flag.ErrHelp); a value out of range is an error naming the flag.
func ParseFlags(args []string, out io.Writer) (Config, error) {
	fs := cliflags.New("llmgw sim-engine", "llmgw sim-engine --served-model-name NAME [flags]", out)
	var c Config
	fs.StringVar(&c.Host, "host", defaultHost, "address to serve HTTP on")
	fs.IntVar(&c.Port, "port", defaultPort, "port to serve HTTP on (0 picks one)")
	fs.StringVar(&c.ServedModelName, "served-model-name", "", "model name clients use (required)")
	fs.StringVar(&c.Model, "model", "", "weights source (informational)")
	fs.IntVar(&c.Rank, "rank", 0, "rank of this process in the replica")
	fs.IntVar(&c.WorldSize, "world-size", DefaultWorldSize, "number of processes in the replica")
	fs.StringVar(&c.DistInitAddr, "dist-init-addr", "", "host:port rank 0 listens on for workers")
	fs.Float64Var(&c.PrefillTokensPerSec, "prefill-tps", 0, "prefill tokens per second (0 = instantaneous)")
	fs.Float64Var(&c.DecodeTokensPerSec, "decode-tps", 0, "decode tokens per second (0 = instantaneous)")
	fs.IntVar(&c.EOSAfter, "eos-after", 0, "end answers after this many tokens (finish_reason stop) unless the request sets ignore_eos; 0 = run to max_tokens")
	fs.IntVar(&c.OvershootTokens, "overshoot-tokens", 0, "generate this many tokens past the request's max_tokens (an engine that ignores it; for tests); 0 = honour it")
	fs.IntVar(&c.PrefixCacheBlocks, "prefix-cache-blocks", DefaultPrefixCacheBlocks, "prefix cache capacity in blocks (negative disables)")
	fs.IntVar(&c.BlockSize, "block-size", DefaultBlockSize, "tokens per prefix cache block")
	fs.IntVar(&c.MaxModelLen, "max-model-len", DefaultMaxModelLen, "maximum prompt plus completion tokens")
	fs.IntVar(&c.EmbeddingDim, "embedding-dim", DefaultEmbeddingDim, "embedding vector length")
	fs.IntVar(&c.MaxNumSeqs, "max-num-seqs", DefaultMaxNumSeqs, "requests generating at once")
	fs.BoolVar(&c.ShowVersion, "version", false, "print the version and exit")
	if err := cliflags.ParseNoArgs(fs, args); err != nil {
		return Config{}, &FlagError{Err: err}
	}
	if c.ShowVersion {
		return Config{ShowVersion: true}, nil
	}
	// Explicit zeros on the command line are errors, not "use the default".
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	for _, name := range []string{"world-size", "block-size", "max-model-len", "embedding-dim", "max-num-seqs"} {
		if explicit[name] && fs.Lookup(name).Value.String() == "0" {
			return Config{}, fmt.Errorf("--%s must be positive, got 0", name)
		}
	}
	c = c.withDefaults()
	if err := c.validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// withDefaults fills zero fields with their defaults.
func (c Config) withDefaults() Config {
	if c.WorldSize == 0 {
		c.WorldSize = DefaultWorldSize
	}
	if c.PrefixCacheBlocks == 0 {
		c.PrefixCacheBlocks = DefaultPrefixCacheBlocks
	}
	if c.BlockSize == 0 {
		c.BlockSize = DefaultBlockSize
	}
	if c.MaxModelLen == 0 {
		c.MaxModelLen = DefaultMaxModelLen
	}
	if c.EmbeddingDim == 0 {
		c.EmbeddingDim = DefaultEmbeddingDim
	}
	if c.MaxNumSeqs == 0 {
		c.MaxNumSeqs = DefaultMaxNumSeqs
	}
	return c
}

// validate checks a Config that already has its defaults; errors name the
// flag that sets the wrong value.
func (c Config) validate() error {
	if c.ServedModelName == "" {
		return errors.New("--served-model-name is required")
	}
	if c.Port < 0 || c.Port > 65535 {
		return fmt.Errorf("--port %d is out of range 0-65535", c.Port)
	}
	if c.WorldSize < 1 {
		return fmt.Errorf("--world-size must be at least 1, got %d", c.WorldSize)
	}
	if c.Rank < 0 || c.Rank >= c.WorldSize {
		return fmt.Errorf("--rank %d is out of range for --world-size %d (0-%d)", c.Rank, c.WorldSize, c.WorldSize-1)
	}
	if c.WorldSize > 1 {
		if c.DistInitAddr == "" {
			return fmt.Errorf("--dist-init-addr is required when --world-size is %d", c.WorldSize)
		}
		host, port, err := net.SplitHostPort(c.DistInitAddr)
		if err != nil {
			return fmt.Errorf("--dist-init-addr %q: %w", c.DistInitAddr, err)
		}
		if c.Rank > 0 && host == "" {
			return fmt.Errorf("--dist-init-addr %q: workers need rank 0's host", c.DistInitAddr)
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return fmt.Errorf("--dist-init-addr %q: port %q is not a number 0-65535", c.DistInitAddr, port)
		}
	}
	switch {
	case c.PrefillTokensPerSec < 0:
		return fmt.Errorf("--prefill-tps must not be negative, got %g", c.PrefillTokensPerSec)
	case c.EOSAfter < 0:
		return fmt.Errorf("--eos-after must not be negative, got %d", c.EOSAfter)
	case c.OvershootTokens < 0:
		return fmt.Errorf("--overshoot-tokens must not be negative, got %d", c.OvershootTokens)
	case c.DecodeTokensPerSec < 0:
		return fmt.Errorf("--decode-tps must not be negative, got %g", c.DecodeTokensPerSec)
	case c.BlockSize < 1:
		return fmt.Errorf("--block-size must be positive, got %d", c.BlockSize)
	case c.MaxModelLen < 1:
		return fmt.Errorf("--max-model-len must be positive, got %d", c.MaxModelLen)
	case c.EmbeddingDim < 1:
		return fmt.Errorf("--embedding-dim must be positive, got %d", c.EmbeddingDim)
	case c.MaxNumSeqs < 1:
		return fmt.Errorf("--max-num-seqs must be positive, got %d", c.MaxNumSeqs)
	}
	return nil
}
