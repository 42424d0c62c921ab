// A model definition says what a model is: its name and aliases, where its
// weights come from, how it scales, and the profiles it can be placed with.
// The same definition is read from server.yaml (declarative), from a file
// given to `llmgw ctl model add`, and from the management API.
//
// A definition's life is: parse (strict: an unknown key is an error) →
// Normalize (fill defaults) → Validate (report every problem with its key).
package spec

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// Defaults Normalize fills in.
const (
	DefaultRoutingProfile = "chat"
	DefaultNodes          = 1
	DefaultWeight         = 1
	DefaultStartupTimeout = Duration(10 * time.Minute)
)

// RoutingProfiles are the values routing_profile may take, each a policy
// for choosing a replica: chat (the default) and prefix keep requests that
// share a prompt prefix on the replica that holds it, balanced against
// load; least-loaded ignores prefixes; round-robin takes replicas in turn.
var RoutingProfiles = []string{"chat", "prefix", "least-loaded", "round-robin"}

// KVCacheFull is the fraction of its KV cache in use past which an engine
// has no room for another request's context: vLLM preempts running
// requests and evicts cached prefixes as free blocks run out. Prefix
// affinity passes over such a replica, and `ctl bench` counts a level
// that keeps one so as past capacity.
const KVCacheFull = 0.95

// Model is one model in the catalog. Each field's part in a rollout (does
// changing it restart running replicas?) is in modelRoles below.
type Model struct {
	// Name is what clients ask for: lowercase letters, digits, `.`, `_` and
	// `-`, starting with a letter or digit, at most 128 characters.
	// Default: required.
	Name string `koanf:"name" yaml:"name" json:"name"`
	// Aliases are other names clients may use; requests are forwarded under
	// `name`.
	Aliases []string `koanf:"aliases" yaml:"aliases,omitempty" json:"aliases,omitempty"`
	// Source says where the weights are: an absolute path on the node, given
	// to the engine as is; an http(s) URL of one file, an http(s) URL ending
	// in `/` (a mirror's whole version), `hf:org/repo[@rev]/file`,
	// `hf:org/repo[@rev]` (a whole revision), `s3://bucket/key` or
	// `s3://bucket/prefix/`, which the agent fetches once per node into its
	// cache and gives the engine as a local path; a repository id
	// (`org/name`) or another scheme (`sim://`), given to the engine as is.
	Source string `koanf:"source" yaml:"source,omitempty" json:"source,omitempty"`
	// RoutingProfile is how a replica is chosen: `chat` or `prefix` (prefix
	// affinity balanced with load), `least-loaded`, `round-robin`
	// (routing.md).
	RoutingProfile string `koanf:"routing_profile" yaml:"routing_profile,omitempty" json:"routing_profile,omitempty"`
	// ContextLength is the most tokens of one request, prompt plus output,
	// passed to the engine; 0 is unstated.
	ContextLength int `koanf:"context_length" yaml:"context_length,omitempty" json:"context_length,omitempty"`
	// MaxOutput is the most tokens of one answer (per choice): a request
	// asking for more gets 400, one asking for nothing is forwarded with
	// `max_tokens` set to it; 0 is unstated.
	MaxOutput int `koanf:"max_output" yaml:"max_output,omitempty" json:"max_output,omitempty"`
	// Pricing is the price per 1,000 prompt and completion tokens
	// (tenancy.md); none means `auth.default_price`. Changing it restarts no
	// replica.
	Pricing *Pricing `koanf:"pricing" yaml:"pricing,omitempty" json:"pricing,omitempty"`
	// Scaling bounds the number of replicas.
	Scaling Scaling `koanf:"scaling" yaml:"scaling" json:"scaling"`
	// Profiles are the ways the model can be placed, tried by priority; at
	// least one.
	// Default: required.
	Profiles []Profile `koanf:"profiles" yaml:"profiles" json:"profiles"`
	// Rollout says what happens to running replicas when an edit changes
	// how they are built: `auto` replaces them one at a time, each
	// replacement ready before the replica it replaces stops; `manual`
	// leaves them serving, marked stale, until `llmgw ctl rollout`.
	// Changing it from `manual` to `auto` has the replicas held stale
	// replaced; to `manual`, holds those a rollout has yet to replace and
	// stops a replica not ready yet (the rollout's replacement, or one a
	// higher `scaling.min` adds) as surplus once the others are enough
	// without it. Default: auto.
	Rollout string `koanf:"rollout" yaml:"rollout,omitempty" json:"rollout,omitempty"`
}

// modelRoles classifies each field of Model: a field added to Model needs
// its role here (spec/generation.go says what each means).
var modelRoles = map[string]fieldRole{
	"Name":           roleBuild,   // the engine serves the model under it (--served-model-name, --alias)
	"Aliases":        roleServing, // resolved by the gateway; requests are forwarded under Name
	"Source":         roleBuild,   // the weights the engine loads
	"RoutingProfile": roleServing, // the router's policy
	"ContextLength":  roleBuild,   // passed to the engine (--max-model-len, --ctx-size)
	"MaxOutput":      roleServing, // enforced by the gateway on each request
	"Pricing":        roleServing, // charged by the gateway
	"Scaling":        roleServing, // the reconciler's replica count
	"Profiles":       roleOwnProfile,
	"Rollout":        roleServing, // the reconciler's rollout policy
}

// Rollout policies.
const (
	RolloutAuto   = "auto"
	RolloutManual = "manual"
)

// ManualRollout reports whether m's stale replicas wait for an operator.
func (m Model) ManualRollout() bool { return m.Rollout == RolloutManual }

// Pricing is a price per 1,000 tokens, in a unit the operator chooses
// (the same unit budgets are in).
type Pricing struct {
	// PromptPer1K is the price of 1,000 prompt tokens: a finite number of at
	// least 0.
	PromptPer1K float64 `koanf:"prompt_per_1k" yaml:"prompt_per_1k" json:"prompt_per_1k"`
	// CompletionPer1K is the price of 1,000 completion tokens: a finite number
	// of at least 0.
	CompletionPer1K float64 `koanf:"completion_per_1k" yaml:"completion_per_1k" json:"completion_per_1k"`
}

// Cost is what the given token counts cost at this price.
func (p Pricing) Cost(promptTokens, completionTokens int64) float64 {
	return (float64(promptTokens)*p.PromptPer1K + float64(completionTokens)*p.CompletionPer1K) / 1000
}

// Free reports whether nothing is charged at this price.
func (p Pricing) Free() bool { return p.PromptPer1K == 0 && p.CompletionPer1K == 0 }

// Validate checks a price on its own (auth.default_price is one) and returns
// every problem as Problems keyed prompt_per_1k and completion_per_1k, or
// nil.
func (p Pricing) Validate() error {
	var ps Problems
	p.validate(&ps, "")
	return ps.orNil()
}

// validate adds p's problems to ps under key (pricing). A price is a
// finite number of at least 0: NaN and infinity cannot be stored, encoded
// or charged.
func (p Pricing) validate(ps *Problems, key string) {
	if key != "" {
		key += "."
	}
	for _, f := range []struct {
		name  string
		value float64
	}{{"prompt_per_1k", p.PromptPer1K}, {"completion_per_1k", p.CompletionPer1K}} {
		switch {
		case math.IsNaN(f.value) || math.IsInf(f.value, 0):
			ps.add(key+f.name, fmt.Sprintf("must be a finite number, got %v", f.value))
		case f.value < 0:
			ps.add(key+f.name, "must not be negative")
		}
	}
}

// MaxReplicas bounds scaling.min and scaling.max. A fleet of hundreds of
// eight-GPU nodes holds a few thousand replicas; a larger number is a typo,
// and the management API carries the bounds as 32-bit integers.
const MaxReplicas = 10000

// Scaling bounds a model's replica count. Min 0 with Max above it means load
// on demand; replicas idle for IdleTimeout are stopped.
type Scaling struct {
	// Min is the number of replicas kept running; at most 10000.
	Min int `koanf:"min" yaml:"min" json:"min"`
	// Max is the upper bound, raised to `min` when lower; at most 10000.
	// Above `min` the model follows its load between the two (routing.md).
	// Default: `scaling.min`.
	Max int `koanf:"max" yaml:"max" json:"max"`
	// IdleTimeout is, with `min: 0`, how long the model may go unasked, with
	// no request in flight or waiting, before its replicas stop (routing.md).
	// Default: `0` (15m).
	IdleTimeout Duration `koanf:"idle_timeout" yaml:"idle_timeout,omitempty" json:"idle_timeout,omitempty"`
}

// OnDemand reports whether the model is loaded on demand: no replica kept
// running (min 0), some allowed (max above 0).
func (s Scaling) OnDemand() bool { return s.Min == 0 && s.Max > 0 }

// Profile is one way to run a model: an engine, the hardware it needs, and
// how many nodes one replica spans. Each field's part in a rollout is in
// profileRoles below.
type Profile struct {
	// Name is unique within the model; the same character rules as model
	// names.
	// Default: required.
	Name string `koanf:"name" yaml:"name" json:"name"`
	// Engine is `sim`, `llamacpp`, `vllm` or `sglang`.
	// Default: required.
	Engine string `koanf:"engine" yaml:"engine" json:"engine"`
	// GPUClass is the GPU class every shard needs, as nodes report it
	// (`h100-80g`). Empty with `tp` 0 means the profile runs on CPU; empty
	// with `tp` above 0 takes GPUs of any one class on each node. Checked
	// when a replica is placed: changing it restarts nothing.
	GPUClass string `koanf:"gpu_class" yaml:"gpu_class,omitempty" json:"gpu_class,omitempty"`
	// TP is the tensor-parallel width: GPUs per shard, on one node; at least 1
	// when `gpu_class` is set.
	TP int `koanf:"tp" yaml:"tp,omitempty" json:"tp,omitempty"`
	// Nodes is how many nodes one replica spans, one shard per node (above 1
	// for vllm, sglang and sim only).
	Nodes int `koanf:"nodes" yaml:"nodes,omitempty" json:"nodes,omitempty"`
	// Weight is the replica's share of traffic among the model's ready
	// replicas, and the requests in flight one replica carries at full load
	// when the model scales between `scaling.min` and `scaling.max`
	// (routing.md; `llmgw ctl bench --save` measures it); changing it
	// restarts nothing.
	Weight int `koanf:"weight" yaml:"weight,omitempty" json:"weight,omitempty"`
	// Priority orders profiles for placement, highest first, ties in file
	// order; changing it restarts nothing.
	Priority int `koanf:"priority" yaml:"priority,omitempty" json:"priority,omitempty"`
	// StartupTimeout is how long a shard may take to answer its health
	// check; changing it restarts nothing and applies to replicas placed
	// from then on.
	StartupTimeout Duration `koanf:"startup_timeout" yaml:"startup_timeout,omitempty" json:"startup_timeout,omitempty"`
	// MinMemoryGB is the available memory (GiB) each node must have when a
	// replica is placed; changing it restarts nothing.
	MinMemoryGB int `koanf:"min_memory_gb" yaml:"min_memory_gb,omitempty" json:"min_memory_gb,omitempty"`
	// MinDiskGB is the free disk (GiB) each node must have where the agent
	// keeps its state, when a replica is placed; changing it restarts
	// nothing.
	MinDiskGB int `koanf:"min_disk_gb" yaml:"min_disk_gb,omitempty" json:"min_disk_gb,omitempty"`
	// Labels are labels each node must carry with equal values, when a
	// replica is placed; changing them restarts nothing.
	Labels map[string]string `koanf:"labels" yaml:"labels,omitempty" json:"labels,omitempty"`
	// Args are extra engine arguments, appended after the ones llmgw builds.
	Args []string `koanf:"args" yaml:"args,omitempty" json:"args,omitempty"`
	// Env is extra engine environment, applied after the variables llmgw sets
	// (so it can override `NCCL_IB_HCA`, or add `NCCL_SOCKET_IFNAME`).
	Env map[string]string `koanf:"env" yaml:"env,omitempty" json:"env,omitempty"`
	// LaunchMode is how vllm (only) runs: `mp` (vLLM's own processes) or
	// `ray` (a Ray cluster under vLLM; unverified).
	// Default: `mp` for vllm.
	LaunchMode string `koanf:"launch_mode" yaml:"launch_mode,omitempty" json:"launch_mode,omitempty"`
}

// profileRoles classifies each field of Profile: a field added to Profile
// needs its role here (spec/generation.go says what each means).
var profileRoles = map[string]fieldRole{
	"Name":           roleBuild,     // the replica's identity: a renamed profile is another one
	"Engine":         roleBuild,     // the program started
	"GPUClass":       rolePlacement, // which GPUs new replicas take
	"TP":             roleBuild,     // GPUs per shard, --tensor-parallel-size
	"Nodes":          roleBuild,     // shards per replica, the engine's world size
	"Weight":         roleServing,   // the router's share, followed by running replicas
	"Priority":       rolePlacement, // the order profiles are tried in
	"StartupTimeout": roleStart,     // how long agents and control plane wait for a start
	"MinMemoryGB":    rolePlacement,
	"MinDiskGB":      rolePlacement,
	"Labels":         rolePlacement,
	"Args":           roleBuild, // the engine's extra arguments
	"Env":            roleBuild, // the engine's extra environment
	"LaunchMode":     roleBuild, // vLLM's executor backend
}

// Shards returns how many shards one replica of the profile has.
func (p Profile) Shards() int { return max(p.Nodes, 1) }

// EngineSupportsMultiNode reports whether engine can run one replica across
// several nodes.
func EngineSupportsMultiNode(engine string) bool {
	switch engine {
	case "vllm", "sglang", "sim":
		return true
	}
	return false
}

// Normalize fills the defaults: routing_profile chat, nodes 1, weight 1,
// startup_timeout 10m, and scaling.max raised to scaling.min.
func (m *Model) Normalize() {
	if m.RoutingProfile == "" {
		m.RoutingProfile = DefaultRoutingProfile
	}
	m.Scaling.Max = max(m.Scaling.Min, m.Scaling.Max)
	for i := range m.Profiles {
		m.Profiles[i].Normalize()
	}
}

// Normalize fills a profile's defaults: nodes 1, weight 1, startup_timeout
// 10m.
func (p *Profile) Normalize() {
	if p.Nodes == 0 {
		p.Nodes = DefaultNodes
	}
	if p.Weight == 0 {
		p.Weight = DefaultWeight
	}
	if p.StartupTimeout == 0 {
		p.StartupTimeout = DefaultStartupTimeout
	}
}

func checkName(ps *Problems, key, kind, name string) bool {
	switch {
	case name == "":
		ps.add(key, "is required")
	case len(name) > MaxNameLen:
		ps.add(key, fmt.Sprintf("%s is longer than %d characters", kind, MaxNameLen))
	case !NameRE.MatchString(name):
		ps.add(key, fmt.Sprintf("%s %q may contain only %s", kind, name, NameRule))
	default:
		return true
	}
	return false
}

// Validate checks a normalized definition and returns every problem found as
// Problems, or nil.
func (m Model) Validate() error {
	var ps Problems
	checkName(&ps, "name", "name", m.Name)
	seen := map[string]int{}
	for i, a := range m.Aliases {
		key := fmt.Sprintf("aliases[%d]", i)
		if !checkName(&ps, key, "alias", a) {
			continue
		}
		if a == m.Name {
			ps.add(key, fmt.Sprintf("alias %q is the model's own name", a))
		} else if j, dup := seen[a]; dup {
			ps.add(key, fmt.Sprintf("alias %q is already listed at aliases[%d]", a, j))
		} else {
			seen[a] = i
		}
	}
	if _, err := ParseSource(m.Source); err != nil {
		ps.add("source", err.Error())
	}
	if m.RoutingProfile == "" {
		ps.add("routing_profile", "is required")
	} else if !slices.Contains(RoutingProfiles, m.RoutingProfile) {
		ps.add("routing_profile", fmt.Sprintf("%q is not a routing profile: use one of %s", m.RoutingProfile, strings.Join(RoutingProfiles, ", ")))
	}
	switch m.Rollout {
	case "", RolloutAuto, RolloutManual:
	default:
		ps.add("rollout", fmt.Sprintf("must be %q or %q, got %q", RolloutAuto, RolloutManual, m.Rollout))
	}
	checkInt32(&ps, "context_length", m.ContextLength)
	checkInt32(&ps, "max_output", m.MaxOutput)
	if m.ContextLength < 0 {
		ps.add("context_length", "must not be negative")
	}
	if m.MaxOutput < 0 {
		ps.add("max_output", "must not be negative")
	}
	if m.ContextLength > 0 && m.MaxOutput > m.ContextLength {
		ps.add("max_output", fmt.Sprintf("%d is more than context_length %d", m.MaxOutput, m.ContextLength))
	}
	if m.Pricing != nil {
		m.Pricing.validate(&ps, "pricing")
	}
	switch {
	case m.Scaling.Min < 0:
		ps.add("scaling.min", "must not be negative")
	case m.Scaling.Min > MaxReplicas:
		ps.add("scaling.min", fmt.Sprintf("%d is more than %d, the most replicas a model may ask for", m.Scaling.Min, MaxReplicas))
	}
	switch {
	case m.Scaling.Max < m.Scaling.Min:
		ps.add("scaling.max", fmt.Sprintf("%d is less than scaling.min %d", m.Scaling.Max, m.Scaling.Min))
	case m.Scaling.Max > MaxReplicas && m.Scaling.Max != m.Scaling.Min: // else scaling.min's problem
		ps.add("scaling.max", fmt.Sprintf("%d is more than %d, the most replicas a model may ask for", m.Scaling.Max, MaxReplicas))
	}
	if m.Scaling.IdleTimeout < 0 {
		ps.add("scaling.idle_timeout", "must not be negative")
	}
	if len(m.Profiles) == 0 {
		ps.add("profiles", "a model needs at least one profile")
	}
	profileNames := map[string]int{}
	for i, p := range m.Profiles {
		key := fmt.Sprintf("profiles[%d]", i)
		if checkName(&ps, key+".name", "profile name", p.Name) {
			if j, dup := profileNames[p.Name]; dup {
				ps.add(key+".name", fmt.Sprintf("profile %q is already defined at profiles[%d]", p.Name, j))
			} else {
				profileNames[p.Name] = i
			}
		}
		p.validate(&ps, key)
		checkLlamaCppContext(&ps, key, p, m.ContextLength)
	}
	return ps.orNil()
}

// Validate checks a normalized profile on its own — everything but its name,
// which Model.Validate checks beside its siblings — and returns every
// problem as Problems keyed within the profile (tp, launch_mode), or nil.
// The scheduler and the engine drivers call it, so a profile that reaches
// them broken is refused by the same rules the catalog applies.
func (p Profile) Validate() error {
	var ps Problems
	p.validate(&ps, "")
	return ps.orNil()
}

// validate adds p's problems to ps under key (profiles[i]); an empty key
// puts them at the top level.
func (p Profile) validate(ps *Problems, key string) {
	if key != "" {
		key += "."
	}
	for _, f := range []struct {
		name  string
		value int
	}{{"tp", p.TP}, {"nodes", p.Nodes}, {"weight", p.Weight}, {"priority", p.Priority}, {"min_memory_gb", p.MinMemoryGB}, {"min_disk_gb", p.MinDiskGB}} {
		checkInt32(ps, key+f.name, f.value)
	}
	switch {
	case p.Engine == "":
		ps.add(key+"engine", "is required (one of "+strings.Join(KnownEngines, ", ")+")")
	case !IsKnownEngine(p.Engine):
		ps.add(key+"engine", fmt.Sprintf("unknown engine %q (known: %s)", p.Engine, strings.Join(KnownEngines, ", ")))
	}
	if p.TP < 0 {
		ps.add(key+"tp", "must not be negative")
	} else if p.GPUClass != "" && p.TP < 1 {
		ps.add(key+"tp", fmt.Sprintf("must be at least 1 when gpu_class is set (gpu_class %q)", p.GPUClass))
	}
	if p.Nodes < 1 {
		ps.add(key+"nodes", fmt.Sprintf("must be at least 1, got %d", p.Nodes))
	} else if p.Nodes > 1 && p.Engine != "" && !EngineSupportsMultiNode(p.Engine) {
		ps.add(key+"nodes", fmt.Sprintf("engine %s cannot span nodes; nodes must be 1, got %d", p.Engine, p.Nodes))
	}
	if p.Weight < 0 {
		ps.add(key+"weight", "must not be negative")
	}
	if p.StartupTimeout <= 0 {
		ps.add(key+"startup_timeout", "must be positive")
	}
	if p.MinMemoryGB < 0 {
		ps.add(key+"min_memory_gb", "must not be negative")
	}
	if p.MinDiskGB < 0 {
		ps.add(key+"min_disk_gb", "must not be negative")
	}
	for _, k := range slices.Sorted(maps.Keys(p.Labels)) {
		if strings.TrimSpace(k) == "" {
			ps.add(key+"labels", "empty label name")
		}
	}
	for _, k := range slices.Sorted(maps.Keys(p.Env)) {
		if k == "" || strings.ContainsAny(k, "= \t\n\x00") {
			ps.add(key+"env", fmt.Sprintf("%q is not a valid environment variable name", k))
		}
	}
	switch {
	case p.LaunchMode == "":
	case p.Engine != "vllm":
		ps.add(key+"launch_mode", fmt.Sprintf("only vllm takes a launch mode; engine %s does not", p.Engine))
	case p.LaunchMode != "mp" && p.LaunchMode != "ray":
		ps.add(key+"launch_mode", fmt.Sprintf("unknown launch mode %q (mp or ray)", p.LaunchMode))
	}
}

// Clone returns a deep copy of m: no slice or map is shared.
func (m Model) Clone() Model {
	c := m
	c.Aliases = slices.Clone(m.Aliases)
	if m.Pricing != nil {
		p := *m.Pricing
		c.Pricing = &p
	}
	if m.Profiles != nil {
		c.Profiles = make([]Profile, len(m.Profiles))
		for i, p := range m.Profiles {
			p.Labels = maps.Clone(p.Labels)
			p.Args = slices.Clone(p.Args)
			p.Env = maps.Clone(p.Env)
			c.Profiles[i] = p
		}
	}
	return c
}

// Equal reports whether m and o define the same model, field by field; an
// empty list or map equals a missing one. A rollout uses it to decide
// whether a definition changed (the replicas themselves restart only when
// Generation changes, which pricing does not touch).
func (m Model) Equal(o Model) bool {
	if m.Name != o.Name || m.Source != o.Source || m.RoutingProfile != o.RoutingProfile || m.Rollout != o.Rollout ||
		m.ContextLength != o.ContextLength || m.MaxOutput != o.MaxOutput || m.Scaling != o.Scaling ||
		!slices.Equal(m.Aliases, o.Aliases) || !equalPricing(m.Pricing, o.Pricing) {
		return false
	}
	return slices.EqualFunc(m.Profiles, o.Profiles, Profile.Equal)
}

func equalPricing(a, b *Pricing) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// Equal reports whether p and o are the same profile.
func (p Profile) Equal(o Profile) bool {
	return p.Name == o.Name && p.Engine == o.Engine && p.GPUClass == o.GPUClass &&
		p.TP == o.TP && p.Nodes == o.Nodes && p.Weight == o.Weight && p.Priority == o.Priority &&
		p.StartupTimeout == o.StartupTimeout && p.MinMemoryGB == o.MinMemoryGB && p.MinDiskGB == o.MinDiskGB &&
		maps.Equal(p.Labels, o.Labels) && slices.Equal(p.Args, o.Args) &&
		maps.Equal(p.Env, o.Env) && p.LaunchMode == o.LaunchMode
}

// checkInt32 refuses a number the protocol cannot carry: the management API
// and the agent protocol hold these fields as 32-bit integers, so a larger
// value would arrive silently changed.
func checkInt32(ps *Problems, key string, v int) {
	if v > math.MaxInt32 || v < math.MinInt32 {
		ps.add(key, fmt.Sprintf("%d is out of range: at most %d", v, math.MaxInt32))
	}
}
