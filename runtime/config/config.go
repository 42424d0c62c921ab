// Package config reads the control plane's server.yaml.
//
// Load applies, in order: the defaults (Default), the file, environment
// variables (LLMGW_ prefix: LLMGW_AGENTS__GRACE=45s sets agents.grace), and
// then checks the result. Unknown keys, wrong types and invalid values are
// errors naming the file and the key.
package config

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/llmgw/llmgw/internal/konfig"
	"github.com/llmgw/llmgw/spec"
)

// EnvPrefix starts every environment variable that overrides server.yaml.
const EnvPrefix = "LLMGW_"

// Server is the control plane's configuration.
type Server struct {
	// Listen is the client API: OpenAI-compatible HTTP (no TLS; terminate it
	// in a proxy), as host:port.
	// Type: address.
	Listen string `koanf:"listen" yaml:"listen" json:"listen"`
	// AgentListen is where agents dial in: gRPC with mutual TLS.
	// Type: address.
	AgentListen string `koanf:"agent_listen" yaml:"agent_listen" json:"agent_listen"`
	// ManageListen is the management API for `llmgw ctl` and Terraform: gRPC
	// over TLS with an admin token.
	// Type: address.
	ManageListen string `koanf:"manage_listen" yaml:"manage_listen" json:"manage_listen"`
	// MetricsListen serves Prometheus `/metrics`.
	// Type: address.
	MetricsListen string `koanf:"metrics_listen" yaml:"metrics_listen" json:"metrics_listen"`
	// PprofListen serves Go pprof under `/debug/pprof/`, on a loopback address
	// only (a heap profile holds API keys); `""` turns it off.
	// Type: address.
	PprofListen string `koanf:"pprof_listen" yaml:"pprof_listen" json:"pprof_listen"`
	// AgentTLS is the agent listener's CA (which signs node certificates)
	// and its server certificate. Required.
	AgentTLS TLS `koanf:"agent_tls" yaml:"agent_tls" json:"agent_tls"`
	// ManageTLS is the management listener's certificate; it defaults to
	// AgentTLS's certificate and key.
	ManageTLS CertKey `koanf:"manage_tls" yaml:"manage_tls" json:"manage_tls"`
	// Auth configures client authentication and the store.
	Auth Auth `koanf:"auth" yaml:"auth" json:"auth"`
	// Agents configures agent sessions.
	Agents Agents `koanf:"agents" yaml:"agents" json:"agents"`
	// Limits bounds client requests and connections.
	Limits Limits `koanf:"limits" yaml:"limits" json:"limits"`
	// Timeouts bounds client connections and proxied requests.
	Timeouts Timeouts `koanf:"timeouts" yaml:"timeouts" json:"timeouts"`
	// Autoscale tunes scaling between scaling.min and scaling.max.
	Autoscale Autoscale `koanf:"autoscale" yaml:"autoscale" json:"autoscale"`
	// HA configures the leader lease shared with other control planes on
	// the same store.
	HA HA `koanf:"ha" yaml:"ha" json:"ha"`
	// SharedLimits configures how control planes on one PostgreSQL store
	// share rate limits and budgets.
	SharedLimits SharedLimits `koanf:"shared_limits" yaml:"shared_limits" json:"shared_limits"`
	// Models are model definitions declared in this file: in the catalog on
	// every start, not editable through the management API.
	Models []spec.Model `koanf:"models" yaml:"models,omitempty" json:"models,omitempty"`
}

// TLS names a CA bundle and a certificate with its key, as PEM files.
type TLS struct {
	// CA is the CA bundle that signed the node certificates; agents must
	// present one.
	// Default: required.
	// Type: path.
	CA string `koanf:"ca" yaml:"ca" json:"ca"`
	// Cert is the control plane's certificate (PEM).
	// Default: required.
	// Type: path.
	Cert string `koanf:"cert" yaml:"cert" json:"cert"`
	// Key is its key (PEM).
	// Default: required.
	// Type: path.
	Key string `koanf:"key" yaml:"key" json:"key"`
}

// CertKey names a certificate and its key, as PEM files.
type CertKey struct {
	// Cert is the management API's certificate (PEM).
	// Default: `agent_tls.cert`.
	// Type: path.
	Cert string `koanf:"cert" yaml:"cert" json:"cert"`
	// Key is its key (PEM).
	// Default: `agent_tls.key`.
	// Type: path.
	Key string `koanf:"key" yaml:"key" json:"key"`
}

// Auth configures authentication and the store.
type Auth struct {
	// Enabled requires an API key on the client API; false accepts every
	// request as the `default` project (a warning is logged at start).
	Enabled bool `koanf:"enabled" yaml:"enabled" json:"enabled"`
	// Store is the store: a SQLite file path (or `file:` URI), a `postgres://`
	// or `postgresql://` URL, or `@` followed by the path of a file holding
	// one of those (to keep a password out of this file).
	Store string `koanf:"store" yaml:"store" json:"store"`
	// DefaultRPM is the requests per minute of every key and project without a
	// limit of its own; 0 is no limit.
	DefaultRPM int64 `koanf:"default_rpm" yaml:"default_rpm" json:"default_rpm"`
	// DefaultTPM is the tokens per minute (prompt + completion) of every key
	// and project without a limit of its own; 0 is no limit.
	DefaultTPM int64 `koanf:"default_tpm" yaml:"default_tpm" json:"default_tpm"`
	// DefaultMaxTokens is the completion admission reserves for, and the
	// gateway forwards as `max_tokens`, for a request without `max_tokens` on
	// a model without `max_output` (never more than the model's
	// `context_length`).
	DefaultMaxTokens int `koanf:"default_max_tokens" yaml:"default_max_tokens" json:"default_max_tokens"`
	// DefaultPrice is the price of models without `pricing` of their own; none
	// means free, and budgets never bind.
	DefaultPrice *spec.Pricing `koanf:"default_price" yaml:"default_price,omitempty" json:"default_price,omitempty"`
	// KeyCacheTTL is how long key, project and budget lookups are trusted (at
	// most `1m`): a revoked key stops working within it.
	KeyCacheTTL time.Duration `koanf:"key_cache_ttl" yaml:"key_cache_ttl" json:"key_cache_ttl"`
	// LoginTTL is how long an admin token from `llmgw ctl login` works,
	// between `1m` and `720h`; tokens from `llmgw keys admin-token` do not
	// expire.
	LoginTTL time.Duration `koanf:"login_ttl" yaml:"login_ttl" json:"login_ttl"`
}

// Bounds of auth.login_ttl: a login outlives a coffee break, and no login
// is forever (long-lived automation uses `llmgw keys admin-token`).
const (
	MinLoginTTL = time.Minute
	MaxLoginTTL = 30 * 24 * time.Hour
)

// Agents configures agent sessions.
type Agents struct {
	// HeartbeatInterval is sent to each agent when it connects: how often it
	// reports. A session silent for more than three intervals is replaced by
	// the node's next one. A node whose session ends is suspect (takes no new
	// replicas); one unheard for three intervals has its replicas replaced
	// elsewhere, serving until the replacement is ready (routing.md).
	HeartbeatInterval time.Duration `koanf:"heartbeat_interval" yaml:"heartbeat_interval" json:"heartbeat_interval"`
	// Grace is how long a node may be silent before it is lost: its replicas
	// fail and leave the routing table. Longer than `heartbeat_interval`.
	Grace time.Duration `koanf:"grace" yaml:"grace" json:"grace"`
	// Settle is the longest a restarted control plane waits for the replicas
	// that were live when it last ran to be reported again by their agents
	// before it places replicas anew, so running engines are adopted rather
	// than duplicated; it stops waiting once all are back.
	Settle time.Duration `koanf:"settle" yaml:"settle" json:"settle"`
	// RequireDeclared refuses nodes for which the control plane holds no
	// declaration (from Terraform's `llmgw_node`).
	RequireDeclared bool `koanf:"require_declared" yaml:"require_declared" json:"require_declared"`
}

// Limits bounds client requests and connections.
type Limits struct {
	// MaxBodyBytes is the largest request body (10 MiB by default); a larger
	// one gets 413 `request_too_large`. A thread (`x-llmgw-thread`) keeps
	// at most twice its model's context (`context_length` × 4 bytes × 2),
	// this size when the context is not known, and never more than this
	// size: past it, its oldest turns are dropped from what is stored.
	MaxBodyBytes int64 `koanf:"max_body_bytes" yaml:"max_body_bytes" json:"max_body_bytes"`
	// MaxUnauthenticatedConns bounds the client connections open at once on
	// which no request has authenticated yet; a connection accepted beyond
	// them is closed unanswered.
	MaxUnauthenticatedConns int `koanf:"max_unauthenticated_conns" yaml:"max_unauthenticated_conns" json:"max_unauthenticated_conns"`
	// MaxNotesPerAgent bounds the memory notes one agent of a project
	// keeps; a new note beyond it is refused.
	MaxNotesPerAgent int `koanf:"max_notes_per_agent" yaml:"max_notes_per_agent" json:"max_notes_per_agent"`
	// MaxNotesPerProject bounds them over all of a project's agents.
	MaxNotesPerProject int `koanf:"max_notes_per_project" yaml:"max_notes_per_project" json:"max_notes_per_project"`
}

// Timeouts bounds client connections and proxied requests.
type Timeouts struct {
	// ClientHeader is how long a client may take to send a request's headers;
	// then the connection is closed.
	ClientHeader time.Duration `koanf:"client_header" yaml:"client_header" json:"client_header"`
	// ClientBody is how long a client may take to send a request's body, from
	// the end of its headers; then 408 `request_timeout` and the connection is
	// closed.
	ClientBody time.Duration `koanf:"client_body" yaml:"client_body" json:"client_body"`
	// ClientIdle is how long a keep-alive connection may wait for its next
	// request.
	ClientIdle time.Duration `koanf:"client_idle" yaml:"client_idle" json:"client_idle"`
	// ResponseHeader is how long an engine may take to send response headers
	// (for a non-streamed answer, the whole generation).
	ResponseHeader time.Duration `koanf:"response_header" yaml:"response_header" json:"response_header"`
	// Generation is the most one proxied request may take, streamed or not;
	// also the longest a replica scaled down waits for its requests in
	// flight before it is stopped
	// ([routing.md](routing.md#scaling-between-min-and-max)).
	Generation time.Duration `koanf:"generation" yaml:"generation" json:"generation"`
	// StreamIdle ends a stream whose engine sends nothing for this long, with
	// an error event.
	StreamIdle time.Duration `koanf:"stream_idle" yaml:"stream_idle" json:"stream_idle"`
	// ColdStartWait is how long a request for a model loaded on demand that
	// has no ready replica waits for one before it gets 503 `model_loading`
	// with `Retry-After`; `0` answers at once (routing.md).
	ColdStartWait time.Duration `koanf:"cold_start_wait" yaml:"cold_start_wait" json:"cold_start_wait"`
}

// Autoscale says when a model with scaling.max above scaling.min gains or
// loses a replica, and when an idle replica of a model loaded on demand may
// be stopped to make room for another model. A model's load is the requests
// in flight and waiting for it over the sum of its ready replicas' weights
// (a weight is what one replica carries at its latency target; ctl bench
// measures it).
type Autoscale struct {
	// UpLoad is the load at or above which, held for `up_after`, a replica is
	// added.
	UpLoad float64 `koanf:"up_load" yaml:"up_load" json:"up_load"`
	// UpAfter is how long the load must stay at or above `up_load` before a
	// replica is added.
	UpAfter time.Duration `koanf:"up_after" yaml:"up_after" json:"up_after"`
	// DownLoad is the load at or below which, held for `down_after`, a replica
	// is removed; above 0 and below `up_load`.
	DownLoad float64 `koanf:"down_load" yaml:"down_load" json:"down_load"`
	// DownAfter is how long the load must stay at or below `down_load` before
	// a replica is removed.
	DownAfter time.Duration `koanf:"down_after" yaml:"down_after" json:"down_after"`
	// EvictAfter is how long a replica of a model loaded on demand must have
	// run, and its model gone unasked, before it may be stopped to make room
	// for another model.
	EvictAfter time.Duration `koanf:"evict_after" yaml:"evict_after" json:"evict_after"`
}

// Default returns the configuration before any file is read. Every default
// is here.
func Default() Server {
	return Server{
		Listen:        ":8080",
		AgentListen:   ":7443",
		ManageListen:  ":9090",
		MetricsListen: ":9091",
		PprofListen:   "127.0.0.1:6060",
		Auth:          Auth{Enabled: true, Store: "llmgw.db", DefaultMaxTokens: 4096, KeyCacheTTL: 5 * time.Second, LoginTTL: 12 * time.Hour},
		// A node unheard for three heartbeats, 6 s, has its replicas
		// replaced (the old ones keep serving); lost after 20 s, ten missed
		// heartbeats (docs/routing.md).
		Agents: Agents{HeartbeatInterval: 2 * time.Second, Grace: 20 * time.Second, Settle: 10 * time.Second},
		Limits: Limits{MaxBodyBytes: 10 << 20, MaxUnauthenticatedConns: 1024, MaxNotesPerAgent: 1000, MaxNotesPerProject: 10000},
		Timeouts: Timeouts{ClientHeader: 10 * time.Second, ClientBody: 60 * time.Second, ClientIdle: 2 * time.Minute,
			ResponseHeader: 60 * time.Second, Generation: 10 * time.Minute, StreamIdle: 5 * time.Minute, ColdStartWait: 5 * time.Second},
		Autoscale:    Autoscale{UpLoad: 0.8, UpAfter: 30 * time.Second, DownLoad: 0.3, DownAfter: 5 * time.Minute, EvictAfter: 2 * time.Minute},
		HA:           DefaultHA(),
		SharedLimits: DefaultSharedLimits(),
	}
}

// Load reads server.yaml at path (or only defaults and environment when path
// is ""), normalizes the declared models and validates everything. Errors
// name the file (or environment variable) and the key.
//
// Every problem is reported at once: those of single keys (syntax within a
// value, unknown keys, wrong types) and, checked on every other key, those
// of values together (a non-loopback pprof_listen, ports reused, model
// rules).
func Load(path string) (Server, error) {
	s := Default()
	kerr := konfig.Load(path, EnvPrefix, &s)
	if kerr != nil && !konfig.Partial(kerr) {
		return Server{}, kerr
	}
	s.Normalize()
	if err := s.Validate(); err != nil {
		source := path
		if source == "" {
			source = "configuration"
		}
		var ps spec.Problems
		if !errors.As(err, &ps) {
			return Server{}, errors.Join(kerr, fmt.Errorf("%s: %w", source, err))
		}
		if ps = unreported(ps, kerr); len(ps) > 0 {
			return Server{}, errors.Join(kerr, ps.Prefixed(source))
		}
	}
	if kerr != nil {
		return Server{}, kerr
	}
	return s, nil
}

// Normalize fills what depends on other keys: manage_tls from agent_tls, and
// each declared model's defaults.
func (s *Server) Normalize() {
	if s.ManageTLS.Cert == "" && s.ManageTLS.Key == "" {
		s.ManageTLS = CertKey{Cert: s.AgentTLS.Cert, Key: s.AgentTLS.Key}
	}
	for i := range s.Models {
		s.Models[i].Normalize()
	}
}

// Validate checks a normalized configuration and returns every problem as
// spec.Problems (keys like agents.grace or models[2].profiles[0].engine),
// or nil.
func (s Server) Validate() error {
	var ps spec.Problems
	add := func(key, format string, args ...any) {
		ps = append(ps, spec.Problem{Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	listeners := []struct{ key, addr string }{
		{"listen", s.Listen},
		{"agent_listen", s.AgentListen},
		{"manage_listen", s.ManageListen},
		{"metrics_listen", s.MetricsListen},
		{"pprof_listen", s.PprofListen},
	}
	used := map[string]string{}
	for _, l := range listeners {
		if l.addr == "" {
			if l.key != "pprof_listen" {
				add(l.key, "is required (host:port)")
			}
			continue
		}
		host, port, err := splitListen(l.addr)
		if err != nil {
			add(l.key, "%v", err)
			continue
		}
		if l.key == "pprof_listen" && !isLoopback(host) {
			add(l.key, "%q is not a loopback address: pprof can dump the process heap, so it only listens on 127.0.0.1, ::1 or localhost (or set \"\" to turn it off)", l.addr)
		}
		if port != 0 {
			if other, dup := used[l.addr]; dup {
				add(l.key, "%q is already used by %s", l.addr, other)
			}
			used[l.addr] = l.key
		}
	}

	for _, f := range []struct{ key, val string }{
		{"agent_tls.ca", s.AgentTLS.CA},
		{"agent_tls.cert", s.AgentTLS.Cert},
		{"agent_tls.key", s.AgentTLS.Key},
	} {
		if f.val == "" {
			add(f.key, "is required: agents connect over mutual TLS")
		}
	}
	if (s.ManageTLS.Cert == "") != (s.ManageTLS.Key == "") {
		add("manage_tls", "set both cert and key, or neither to use agent_tls's")
	}

	switch s.Auth.Store {
	case "":
		add("auth.store", "is required (a SQLite path, a postgres:// URL, or @file)")
	case "@":
		add("auth.store", "\"@\" must be followed by the path of a file holding the address")
	}

	if s.Auth.DefaultRPM < 0 {
		add("auth.default_rpm", "must not be negative (0 means no limit)")
	}
	if s.Auth.DefaultTPM < 0 {
		add("auth.default_tpm", "must not be negative (0 means no limit)")
	}
	if s.Auth.DefaultMaxTokens <= 0 {
		add("auth.default_max_tokens", "must be positive")
	}
	if p := s.Auth.DefaultPrice; p != nil {
		var pps spec.Problems
		if errors.As(p.Validate(), &pps) {
			ps = append(ps, pps.Within("auth.default_price")...)
		}
	}
	if s.Auth.KeyCacheTTL <= 0 || s.Auth.KeyCacheTTL > time.Minute {
		add("auth.key_cache_ttl", "%s: must be positive and at most 1m, so a revoked key stops working soon", s.Auth.KeyCacheTTL)
	}
	if s.Auth.LoginTTL < MinLoginTTL || s.Auth.LoginTTL > MaxLoginTTL {
		add("auth.login_ttl", "%s: must be between %s and %s (720h); for a token that does not expire, run llmgw keys admin-token on the control-plane host", s.Auth.LoginTTL, MinLoginTTL, MaxLoginTTL)
	}
	if s.Agents.HeartbeatInterval <= 0 {
		add("agents.heartbeat_interval", "must be positive")
	}
	if s.Agents.Settle < 0 {
		add("agents.settle", "must not be negative")
	}
	if s.Agents.Grace <= 0 {
		add("agents.grace", "must be positive")
	} else if s.Agents.HeartbeatInterval > 0 && s.Agents.Grace <= s.Agents.HeartbeatInterval {
		add("agents.grace", "%s must be longer than agents.heartbeat_interval %s, or every node is lost between two heartbeats", s.Agents.Grace, s.Agents.HeartbeatInterval)
	}
	s.HA.validate(add)
	s.SharedLimits.validate(add)
	if s.Limits.MaxBodyBytes <= 0 {
		add("limits.max_body_bytes", "must be positive")
	}
	if s.Limits.MaxUnauthenticatedConns <= 0 {
		add("limits.max_unauthenticated_conns", "must be positive")
	}
	if s.Limits.MaxNotesPerAgent <= 0 {
		add("limits.max_notes_per_agent", "must be positive")
	}
	if s.Limits.MaxNotesPerProject <= 0 {
		add("limits.max_notes_per_project", "must be positive")
	}
	for _, d := range []struct {
		key string
		val time.Duration
	}{
		{"timeouts.client_header", s.Timeouts.ClientHeader},
		{"timeouts.client_body", s.Timeouts.ClientBody},
		{"timeouts.client_idle", s.Timeouts.ClientIdle},
	} {
		if d.val <= 0 {
			add(d.key, "must be positive")
		}
	}
	if s.Timeouts.ResponseHeader <= 0 {
		add("timeouts.response_header", "must be positive")
	}
	if s.Timeouts.Generation <= 0 {
		add("timeouts.generation", "must be positive")
	}
	if s.Timeouts.StreamIdle <= 0 {
		add("timeouts.stream_idle", "must be positive")
	}
	if s.Timeouts.ColdStartWait < 0 {
		add("timeouts.cold_start_wait", "must not be negative (0 answers at once)")
	}
	a := s.Autoscale
	if a.UpLoad <= 0 {
		add("autoscale.up_load", "must be positive")
	}
	if a.DownLoad <= 0 || (a.UpLoad > 0 && a.DownLoad >= a.UpLoad) {
		add("autoscale.down_load", "%v must be above 0 and below autoscale.up_load %v, or a model would scale up and down in turn", a.DownLoad, a.UpLoad)
	}
	for _, d := range []struct {
		key string
		val time.Duration
	}{{"autoscale.up_after", a.UpAfter}, {"autoscale.down_after", a.DownAfter}, {"autoscale.evict_after", a.EvictAfter}} {
		if d.val < 0 {
			add(d.key, "must not be negative")
		}
	}

	for i, m := range s.Models {
		if err := m.Validate(); err != nil {
			prefix := fmt.Sprintf("models[%d]", i)
			var mps spec.Problems
			if !errors.As(err, &mps) {
				add(prefix, "%v", err)
				continue
			}
			for _, p := range mps.Within(prefix) {
				if m.Name != "" {
					p.Msg += fmt.Sprintf(" (model %s)", m.Name)
				}
				ps = append(ps, p)
			}
		}
	}
	if err := spec.ValidateSet(s.Models); err != nil {
		var sps spec.Problems
		if errors.As(err, &sps) {
			ps = append(ps, sps...)
		} else {
			add("models", "%v", err)
		}
	}
	if len(ps) == 0 {
		return nil
	}
	return ps
}

// splitListen parses host:port with a numeric port.
func splitListen(addr string) (host string, port int, err error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%q is not host:port (e.g. \":8080\" or \"127.0.0.1:8080\")", addr)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 0 || n > 65535 {
		return "", 0, fmt.Errorf("%q: port %q is not a number from 0 to 65535", addr, p)
	}
	return host, n, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// unreported drops from ps the problems of keys konfig already reported in
// kerr (such a key kept its default, so its value problem would be a
// consequence, not news).
func unreported(ps spec.Problems, kerr error) spec.Problems {
	if kerr == nil {
		return ps
	}
	var keys []string
	for _, p := range konfig.Problems(kerr) {
		if p.Key != "" {
			keys = append(keys, p.Key)
		}
	}
	var out spec.Problems
	for _, p := range ps {
		if !spec.KeyWithin(p.Key, keys) {
			out = append(out, p)
		}
	}
	return out
}
