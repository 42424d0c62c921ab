// Package driver turns a shard's specification into the command lines and
// environments that launch an inference engine. One driver per engine (sim,
// llamacpp, vllm, sglang), all behind the Driver interface, in the manner of
// Nomad's task drivers: the driver knows the engine's vocabulary; the
// supervisor (agent/supervisor) knows processes. Drivers do no I/O.
//
// Which flags were checked against a running engine and which were only read
// from documentation is written beside each builder. The operator guides
// record: vLLM 0.29.0 accepted --host --port --tensor-parallel-size
// --served-model-name --distributed-executor-backend; llama.cpp b10991
// accepted --model --host --port --metrics --alias --parallel --n-gpu-layers.
// Every llama.cpp flag is also run in make test (e2e/llamacpp_test.go).
// The Ray sidecar and every SGLang flag were never run against an engine.
package driver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/llmgw/spec"
)

// Engine names.
const (
	EngineSim      = "sim"
	EngineLlamaCpp = "llamacpp"
	EngineVLLM     = "vllm"
	EngineSGLang   = "sglang"
)

// vLLM launch modes.
const (
	// LaunchModeMP runs vLLM's own multiprocessing executor; multi-node uses
	// vLLM's --nnodes/--node-rank/--master-addr flags. It needs no Ray and is
	// the default.
	LaunchModeMP = "mp"
	// LaunchModeRay starts a Ray cluster (`ray start`) under vLLM and uses
	// its Ray executor. Unverified: vLLM 0.29 does not install Ray.
	LaunchModeRay = "ray"
)

// ShardSpec is everything a driver needs to launch one shard (one process
// tree on one node) of a replica. It is also the node's one record of the
// shard: the supervisor keeps it in the shard's state file, and an agent
// restarted while the engine runs reports the shard from it.
type ShardSpec struct {
	// Profile is the catalog profile the replica was placed with, as the
	// control plane sent it. A driver reads its fields as the spec's own:
	// Engine (one of sim, llamacpp, vllm, sglang), TP (GPUs per shard),
	// Nodes (the replica's shard count, one shard per node, its world size;
	// 0 is read as 1, see Shards), Args (appended last so they win where the
	// engine takes the last occurrence of a flag), Env (applied after the
	// driver's own so it can override any of it), LaunchMode (vLLM's "mp",
	// the default, or "ray") and StartupTimeout. A field added to
	// spec.Profile reaches every driver this way, with no copy.
	spec.Profile `json:"profile"`

	ShardID   string `json:"shard_id"`
	ReplicaID string `json:"replica_id"`
	// Model is the served model name clients ask for.
	Model string `json:"model"`
	// ModelGeneration is the hash of the whole model the replica was
	// placed for (spec.LegacyGeneration) and ReplicaGeneration that of what
	// it is built from (spec.ReplicaGeneration; empty when placed by a
	// control plane older than it and not restamped). Drivers ignore both;
	// the agent reports them back.
	ModelGeneration   string `json:"model_generation,omitempty"`
	ReplicaGeneration string `json:"replica_generation,omitempty"`
	// Source is the weights path on the node or a repository id the engine
	// downloads itself.
	Source string `json:"source"`
	// Binary is the engine executable from the node declaration; for sim it
	// is the llmgw binary itself.
	Binary string `json:"binary"`
	// Host is the address the engine binds (rank 0) or this node's address.
	Host string `json:"host"`
	// Port is the HTTP port of rank 0; ranks that serve nothing need none.
	Port int `json:"port"`
	// Rank of this shard within the replica, 0..Shards()-1; 0 is the leader.
	Rank int `json:"rank"`
	// DistInitAddr is host:port of rank 0's rendezvous: rank 0 binds it,
	// the others dial it. Required when the replica spans nodes and for
	// vLLM on Ray.
	DistInitAddr string `json:"dist_init_addr,omitempty"`
	// GPUIndices are the node-local GPU indices given to this shard.
	GPUIndices []int `json:"gpu_indices,omitempty"`
	// Fabric is the fabric the replica runs in ("" for a single-node
	// replica), and FabricAdapters its declared adapters (e.g. mlx5_0) on
	// this node.
	Fabric         string   `json:"fabric,omitempty"`
	FabricAdapters []string `json:"fabric_adapters,omitempty"`
	// ContextLength is the longest request a client may send, in tokens;
	// 0 leaves the engine's default.
	ContextLength int `json:"context_length,omitempty"`
	// WorkDir is the engine's working directory; empty means the agent's.
	WorkDir string `json:"work_dir,omitempty"`
}

// Command is one program of a shard.
type Command struct {
	// Path is the executable; a bare name is looked up in PATH.
	Path string `json:"path"`
	// Args are the arguments, without the program name.
	Args []string `json:"args"`
	// Env holds KEY=VALUE pairs added to the agent's environment; a later
	// pair overrides an earlier one with the same key.
	Env []string `json:"env,omitempty"`
	// WaitAddr, when set on a command that is not the last, is a TCP address
	// the supervisor waits to accept connections before starting the next
	// command (e.g. the Ray head's port before `vllm serve` attaches to it).
	WaitAddr string `json:"wait_addr,omitempty"`
}

// Driver builds the launch of one engine.
type Driver interface {
	// Name is the engine name (sim, llamacpp, vllm, sglang).
	Name() string
	// Commands validates spec and returns the programs of the shard, in
	// start order. Every command but the last is a sidecar kept running for
	// the shard's lifetime; the last is the engine itself.
	Commands(spec ShardSpec) ([]Command, error)
	// HealthPath is the HTTP path that answers 200 once the engine serves.
	HealthPath() string
	// ServesHTTP reports whether a shard of this rank serves HTTP. Workers
	// do not: the replica is reached through rank 0.
	ServesHTTP(rank int) bool
	// CheckCommand returns the program that shows the engine at binary can
	// start on this node, in the engine's environment but with no GPU: its
	// version flag or equivalent. It loads the engine's libraries (a
	// missing shared library fails it) and exits without serving.
	CheckCommand(binary string) (Command, error)
	// HelpCommands returns the programs that print the engine's help, the
	// widest first (vLLM's `serve --help=all` before `serve --help`, which
	// releases before --help=all take and later ones answer with a
	// summary): the engine check reads in it every flag the engine takes.
	// None for an engine whose flags are llmgw's own (sim).
	HelpCommands(binary string) []Command
}

// Engines returns the names of the engines a driver exists for.
func Engines() []string {
	return []string{EngineSim, EngineLlamaCpp, EngineVLLM, EngineSGLang}
}

// ForEngine returns the driver for the named engine.
func ForEngine(name string) (Driver, error) {
	switch name {
	case EngineSim:
		return Sim{}, nil
	case EngineLlamaCpp:
		return LlamaCpp{}, nil
	case EngineVLLM:
		return VLLM{}, nil
	case EngineSGLang:
		return SGLang{}, nil
	}
	return nil, fmt.Errorf("engine %q: unknown engine (known: %s)", name, strings.Join(Engines(), ", "))
}

// checkEnv is the environment of an engine check: the engine's own, with no
// GPU visible, so that a check never touches a card a shard is using.
func checkEnv(extra ...string) []string {
	return append([]string{"CUDA_VISIBLE_DEVICES="}, extra...)
}

// helpEnv is the environment of a help command: the check's, and a wide
// terminal so that Python's argparse wraps as little as it can.
func helpEnv(extra ...string) []string {
	return checkEnv(append([]string{"COLUMNS=10000"}, extra...)...)
}

// requireBinary refuses an empty executable path for engine.
func requireBinary(engine, binary string) error {
	if strings.TrimSpace(binary) == "" {
		return fmt.Errorf("checking %s: no executable declared for it (engines.%s)", engine, engine)
	}
	return nil
}

// specCheck collects the problems found in a spec so that one error names
// every wrong field at once.
type specCheck struct {
	spec     ShardSpec
	engine   string
	problems []string
}

func (c *specCheck) addf(field, format string, args ...any) {
	c.problems = append(c.problems, field+": "+fmt.Sprintf(format, args...))
}

func (c *specCheck) err() error {
	if len(c.problems) == 0 {
		return nil
	}
	return fmt.Errorf("invalid %s shard spec %q: %s", c.engine, c.spec.ShardID, strings.Join(c.problems, "; "))
}

// checkCommon validates what every engine needs. serves says whether this
// rank binds an HTTP port.
func checkCommon(engine string, s ShardSpec, serves, needBinary bool) *specCheck {
	c := &specCheck{spec: s, engine: engine}
	if strings.TrimSpace(s.ShardID) == "" {
		c.addf("shard_id", "is required")
	}
	if s.Engine != "" && s.Engine != engine {
		c.addf("engine", "is %q but the %s driver was asked to build it", s.Engine, engine)
	}
	if strings.TrimSpace(s.Model) == "" {
		c.addf("model", "served model name is required")
	}
	if strings.TrimSpace(s.Source) == "" {
		c.addf("source", "weights path or repository id is required")
	}
	if needBinary && strings.TrimSpace(s.Binary) == "" {
		c.addf("binary", "no %s executable declared for this node", engine)
	}
	checkProfile(c, s.Profile)
	if n := s.Shards(); s.Nodes >= 0 && (s.Rank < 0 || s.Rank >= n) {
		c.addf("rank", "must be in 0..%d for a replica of %d %s, got %d", n-1, n, plural(n, "node", "nodes"), s.Rank)
	}
	if serves {
		if strings.TrimSpace(s.Host) == "" {
			c.addf("host", "is required for rank %d, which serves HTTP", s.Rank)
		}
		if s.Port < 1 || s.Port > 65535 {
			c.addf("port", "must be in 1..65535 for rank %d, which serves HTTP, got %d", s.Rank, s.Port)
		}
	} else if s.Port < 0 || s.Port > 65535 {
		c.addf("port", "must be in 0..65535, got %d", s.Port)
	}
	if s.Shards() > 1 {
		checkAddr(c, "dist_init_addr", s.DistInitAddr)
	}
	seen := map[int]bool{}
	for i, g := range s.GPUIndices {
		if g < 0 {
			c.addf(fmt.Sprintf("gpu_indices[%d]", i), "must not be negative, got %d", g)
		} else if seen[g] {
			c.addf(fmt.Sprintf("gpu_indices[%d]", i), "GPU %d is listed twice", g)
		}
		seen[g] = true
	}
	if s.ContextLength < 0 {
		c.addf("context_length", "must not be negative, got %d", s.ContextLength)
	}
	return c
}

// checkProfile refuses a profile the catalog would refuse, by the catalog's
// own rules (spec.Profile.Validate) with its defaults filled: the control
// plane only sends valid ones, so this guards against a broken peer or a
// hand-edited state file.
func checkProfile(c *specCheck, p spec.Profile) {
	if p.Engine == "" {
		p.Engine = c.engine
	}
	p.Normalize()
	var ps spec.Problems
	if errors.As(p.Validate(), &ps) {
		for _, pr := range ps {
			c.addf(pr.Key, "%s", pr.Msg)
		}
	}
}

// checkAddr requires addr to be host:port with a usable port.
func checkAddr(c *specCheck, field, addr string) {
	if addr == "" {
		c.addf(field, "is required (host:port of rank 0's rendezvous)")
		return
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		c.addf(field, "%q is not host:port: %v", addr, err)
		return
	}
	if host == "" {
		c.addf(field, "%q has no host", addr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		c.addf(field, "%q: port must be in 1..65535", addr)
	}
}

// checkGPUs requires a GPU engine's shard to hold exactly TP GPUs.
func checkGPUs(c *specCheck, s ShardSpec) {
	if s.TP < 1 {
		c.addf("tp", "must be at least 1 for %s, got %d", c.engine, s.TP)
		return
	}
	if len(s.GPUIndices) != s.TP {
		c.addf("gpu_indices", "%s needs tp=%d GPUs per shard, got %d (%v)", c.engine, s.TP, len(s.GPUIndices), s.GPUIndices)
	}
}

// gpuEnv builds the environment of a GPU engine: CUDA_DEVICE_ORDER=PCI_BUS_ID
// (so that CUDA numbers GPUs as NVML and nvidia-smi do, by PCI bus, and the
// indices the scheduler placed by are the GPUs the engine uses; CUDA's
// default orders the fastest first), the shard's GPUs, the fabric's adapters for NCCL when the replica spans nodes, extra (driver
// specific) pairs, then the operator's Env, sorted by key, last so that it
// overrides. NCCL_SOCKET_IFNAME is deliberately not set: which interface
// carries bootstrap traffic is the operator's to say through Env.
func gpuEnv(s ShardSpec, extra ...string) []string {
	env := []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=" + joinInts(s.GPUIndices)}
	if s.Shards() > 1 && len(s.FabricAdapters) > 0 {
		env = append(env, "NCCL_IB_HCA="+strings.Join(s.FabricAdapters, ","))
	}
	env = append(env, extra...)
	return append(env, operatorEnv(s)...)
}

// operatorEnv returns the profile's Env as KEY=VALUE pairs sorted by key.
func operatorEnv(s ShardSpec) []string {
	out := make([]string, 0, len(s.Env))
	for _, k := range sortedKeys(s.Env) {
		out = append(out, k+"="+s.Env[k])
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func joinInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, ",")
}

// argValue reports whether args set any of the named flags, as "--flag v"
// or "--flag=v", and the last value given.
func argValue(args []string, names ...string) (string, bool) {
	return spec.ArgValue(args, names...)
}

// siblingBinary returns name in the same directory as binary (e.g. `ray`
// beside `vllm` in a virtualenv's bin), or name itself, found through PATH,
// when binary has no directory.
func siblingBinary(binary, name string) string {
	dir := filepath.Dir(binary)
	if dir == "." && !strings.Contains(binary, string(filepath.Separator)) {
		return name
	}
	return filepath.Join(dir, name)
}

// withArgs appends the profile's arguments last.
func withArgs(args []string, s ShardSpec) []string {
	return append(args, slices.Clone(s.Args)...)
}

// UnmarshalJSON reads a shard record, including one written by an agent of
// an earlier build, where the profile's fields stood flat beside the
// shard's own (engine, tp, world_size, args, env, launch_mode and
// startup_timeout in nanoseconds) and no "profile" object existed. Reading
// those keeps an engine started before an upgrade adoptable instead of
// orphaned with its GPUs; the profile's name and weight were not in such a
// record, so the control plane rolls that replica as it would any replica
// of an unknown generation.
func (s *ShardSpec) UnmarshalJSON(b []byte) error {
	type record ShardSpec // without this method
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	*s = ShardSpec(r)
	if s.Engine != "" {
		return nil
	}
	var flat struct {
		Engine         string            `json:"engine"`
		TP             int               `json:"tp"`
		WorldSize      int               `json:"world_size"`
		Nodes          int               `json:"nodes"`
		Args           []string          `json:"args"`
		Env            map[string]string `json:"env"`
		LaunchMode     string            `json:"launch_mode"`
		StartupTimeout time.Duration     `json:"startup_timeout"`
	}
	if err := json.Unmarshal(b, &flat); err != nil || flat.Engine == "" {
		return nil //nolint:nilerr // not an earlier record: the profile stays as read
	}
	s.Engine, s.TP, s.Args, s.Env, s.LaunchMode = flat.Engine, flat.TP, flat.Args, flat.Env, flat.LaunchMode
	s.Nodes = max(flat.WorldSize, flat.Nodes)
	s.StartupTimeout = spec.Duration(flat.StartupTimeout)
	return nil
}
