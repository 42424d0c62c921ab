// Package config reads the node agent's agent.yaml.
//
// Load applies, in order: the defaults (Default), the file, environment
// variables (LLMGW_ prefix: LLMGW_STATE_DIR=/srv/llmgw sets state_dir), and
// then checks the result, including the node declaration. Errors name the
// file (or environment variable) and the key.
package config

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/llmgw/internal/konfig"
	"github.com/llmgw/llmgw/spec"
)

// EnvPrefix starts every environment variable that overrides agent.yaml.
const EnvPrefix = "LLMGW_"

// Agent is the node agent's configuration.
type Agent struct {
	// NodeID is the node's claimed id; when set, the control plane refuses the
	// node unless it equals the certificate's common name (the CN is the
	// identity either way).
	NodeID string `koanf:"node_id" yaml:"node_id,omitempty" json:"node_id,omitempty"`
	// Server is the control plane's `agent_listen`, as host:port.
	// Default: required.
	// Type: address.
	Server string `koanf:"server" yaml:"server" json:"server"`
	// Servers are further control planes' agent addresses (host:port), tried
	// in turn after `server` when one is down; a standby answers with the
	// leader's address, which the agent dials (ha.md).
	Servers []string `koanf:"servers" yaml:"servers,omitempty" json:"servers,omitempty"`
	// ServerName is the name checked in the control plane's certificate, when
	// it differs from the host dialled.
	// Default: the host of `server`.
	ServerName string `koanf:"server_name" yaml:"server_name,omitempty" json:"server_name,omitempty"`
	// TLS is the CA that signed the control plane's certificate and this
	// node's client certificate and key.
	TLS TLS `koanf:"tls" yaml:"tls" json:"tls"`
	// Address is this node's address as others reach it (a host or IP, no
	// port, not 0.0.0.0): engines bind it and the control plane sends requests
	// to it. Set it on every real node.
	// Type: host.
	Address string `koanf:"address" yaml:"address" json:"address"`
	// StateDir holds shard state (`<shard>.json`) and engine output
	// (`<shard>.log`); created if missing. Its filesystem's free space is the
	// node's free disk for `min_disk_gb` when the agent reports no weights
	// cache (else the cache's filesystem counts, weights.md).
	// Type: path.
	StateDir string `koanf:"state_dir" yaml:"state_dir" json:"state_dir"`
	// EnginePorts is the range engines are given ports from.
	EnginePorts PortRange `koanf:"engine_ports" yaml:"engine_ports" json:"engine_ports"`
	// HeartbeatInterval is read and checked; agents use the interval the
	// control plane sends.
	HeartbeatInterval time.Duration `koanf:"heartbeat_interval" yaml:"heartbeat_interval" json:"heartbeat_interval"`
	// WeightsDir is the cache fetched weights are kept in, one directory per
	// source; absolute, created if missing.
	// Default: `<state_dir>/weights`.
	// Type: path.
	WeightsDir string `koanf:"weights_dir" yaml:"weights_dir,omitempty" json:"weights_dir,omitempty"`
	// Fetch tunes how weights are fetched.
	Fetch Fetch `koanf:"fetch" yaml:"fetch" json:"fetch"`
	// PeerListen is where the agent serves its cache entries (complete, or
	// as they are fetched) to the other nodes of its fabric, over mutual TLS with the node certificates
	// (`tls.cert`, `tls.key`, `tls.ca`); peers reach it at `address` and this
	// port (weights.md); `""` serves none.
	// Type: address.
	PeerListen string `koanf:"peer_listen" yaml:"peer_listen,omitempty" json:"peer_listen,omitempty"`

	// Declaration is what the operator says the node is: fabrics, engines,
	// labels, model_dirs and discovery are top-level keys of agent.yaml.
	// The control plane's copy, when it has one, replaces it.
	spec.Declaration `koanf:",squash" yaml:",inline" json:",inline"`
}

// TLS names PEM files: the CA bundle and a certificate with its key.
type TLS struct {
	// CA is the CA that signed the control plane's certificate.
	// Default: required.
	// Type: path.
	CA string `koanf:"ca" yaml:"ca" json:"ca"`
	// Cert is this node's certificate (`llmgw ctl cert issue-node`, or
	// Terraform's `llmgw_node_certificate`).
	// Default: required.
	// Type: path.
	Cert string `koanf:"cert" yaml:"cert" json:"cert"`
	// Key is its key.
	// Default: required.
	// Type: path.
	Key string `koanf:"key" yaml:"key" json:"key"`
}

// Fetch tunes the weights fetch.
type Fetch struct {
	// StallAfter is how long a fetch may move no byte before it is reported
	// stalled (`ctl replicas`), with its last error; and how long a peer
	// followed while it fetches may move none before the node leaves it
	// for the next source. Going on from a wait on a peer, or to the next
	// source after a peer failed, counts as a move: the count starts again.
	StallAfter time.Duration `koanf:"stall_after" yaml:"stall_after" json:"stall_after"`
	// GiveUpAfter is how long a fetch may move no byte, counted as for
	// `fetch.stall_after`, before its shards fail with the last error; at
	// least `fetch.stall_after`.
	GiveUpAfter time.Duration `koanf:"give_up_after" yaml:"give_up_after" json:"give_up_after"`
	// HFEndpoint is the Hugging Face hub `hf:` sources are resolved against.
	// Default: `$HF_ENDPOINT`, else `https://huggingface.co`.
	// Type: URL.
	HFEndpoint string `koanf:"hf_endpoint" yaml:"hf_endpoint,omitempty" json:"hf_endpoint,omitempty"`
	// HFTokenFile is a file holding a hub token, sent as a bearer token to
	// `fetch.hf_endpoint` (not to where it redirects).
	// Type: path.
	HFTokenFile string `koanf:"hf_token_file" yaml:"hf_token_file,omitempty" json:"hf_token_file,omitempty"`
	// S3Endpoint is the S3 endpoint `s3://` sources are read from (`http://`
	// means no TLS); the credentials are the agent's `AWS_ACCESS_KEY_ID`,
	// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN` (none: anonymous requests).
	// Default: `$AWS_ENDPOINT_URL_S3`, `$AWS_ENDPOINT_URL`, else AWS.
	// Type: URL.
	S3Endpoint string `koanf:"s3_endpoint" yaml:"s3_endpoint,omitempty" json:"s3_endpoint,omitempty"`
	// S3Region is the S3 region.
	// Default: `$AWS_REGION`, `$AWS_DEFAULT_REGION`.
	S3Region string `koanf:"s3_region" yaml:"s3_region,omitempty" json:"s3_region,omitempty"`
}

// WeightsPath is the weights cache directory: weights_dir, or
// <state_dir>/weights when it is not set.
func (a Agent) WeightsPath() string {
	if a.WeightsDir != "" {
		return a.WeightsDir
	}
	return filepath.Join(a.StateDir, "weights")
}

// PortRange is an inclusive range of TCP ports.
type PortRange struct {
	// From is the first port engines may take.
	From int `koanf:"from" yaml:"from" json:"from"`
	// To is the last port engines may take (inclusive); `from <= to`, both in
	// 1-65535.
	To int `koanf:"to" yaml:"to" json:"to"`
}

// Size returns how many ports the range holds.
func (r PortRange) Size() int { return max(r.To-r.From+1, 0) }

// Default returns the configuration before any file is read. Every default
// is here.
func Default() Agent {
	return Agent{
		Address:           "127.0.0.1",
		StateDir:          "/var/lib/llmgw-agent",
		EnginePorts:       PortRange{From: 20000, To: 20999},
		HeartbeatInterval: 5 * time.Second,
		Fetch:             Fetch{StallAfter: 60 * time.Second, GiveUpAfter: 10 * time.Minute},
	}
}

// Load reads agent.yaml at path (or only defaults and environment when path
// is "") and validates it.
func Load(path string) (Agent, error) {
	a := Default()
	// Every problem at once: those of single keys, then the value checks
	// on every other key.
	kerr := konfig.Load(path, EnvPrefix, &a)
	if kerr != nil && !konfig.Partial(kerr) {
		return Agent{}, kerr
	}
	if err := a.Validate(); err != nil {
		source := path
		if source == "" {
			source = "configuration"
		}
		// A key konfig reported kept its default: its value problem is a
		// consequence, not news.
		var reported []string
		for _, p := range konfig.Problems(kerr) {
			reported = append(reported, p.Key)
		}
		var lines []string
		for line := range strings.SplitSeq(err.Error(), "\n") {
			key, _, _ := strings.Cut(line, ": ")
			if !spec.KeyWithin(key, reported) {
				lines = append(lines, source+": "+line)
			}
		}
		if len(lines) > 0 {
			return Agent{}, errors.Join(kerr, errors.New(strings.Join(lines, "\n")))
		}
	}
	if kerr != nil {
		return Agent{}, kerr
	}
	return a, nil
}

// Validate checks the configuration and the declaration in it, reporting
// every problem with its key, one per line.
func (a Agent) Validate() error {
	var problems []string
	add := func(key, format string, args ...any) {
		problems = append(problems, key+": "+fmt.Sprintf(format, args...))
	}
	if a.Server == "" {
		add("server", "is required: the control plane's agent endpoint, host:port")
	} else if host, port, err := net.SplitHostPort(a.Server); err != nil || host == "" || !validPort(port) {
		add("server", "%q is not host:port (e.g. \"cp.internal:7443\")", a.Server)
	}
	for i, srv := range a.Servers {
		if host, port, err := net.SplitHostPort(srv); err != nil || host == "" || !validPort(port) {
			add(fmt.Sprintf("servers[%d]", i), "%q is not host:port (e.g. \"cp2.internal:7443\")", srv)
		}
	}
	for _, f := range []struct{ key, val string }{
		{"tls.ca", a.TLS.CA}, {"tls.cert", a.TLS.Cert}, {"tls.key", a.TLS.Key},
	} {
		if f.val == "" {
			add(f.key, "is required: the agent connects over mutual TLS")
		}
	}
	switch {
	case a.Address == "":
		add("address", "is required: the host other nodes use to reach this node's engines")
	case strings.Contains(a.Address, ":") && net.ParseIP(a.Address) == nil:
		add("address", "%q must be a host name or IP address without a port", a.Address)
	case net.ParseIP(a.Address) != nil && net.ParseIP(a.Address).IsUnspecified():
		add("address", "%q cannot be reached by other nodes; give this node's own address", a.Address)
	}
	if a.StateDir == "" {
		add("state_dir", "is required")
	}
	r := a.EnginePorts
	if r.From < 1 || r.To > 65535 || r.From > r.To {
		add("engine_ports", "from %d to %d is not a port range within 1-65535 with from <= to", r.From, r.To)
	}
	if a.HeartbeatInterval <= 0 {
		add("heartbeat_interval", "must be positive")
	}
	if a.WeightsDir != "" && !filepath.IsAbs(a.WeightsDir) {
		add("weights_dir", "%q must be an absolute path", a.WeightsDir)
	}
	if a.Fetch.StallAfter <= 0 {
		add("fetch.stall_after", "must be positive")
	}
	if a.Fetch.GiveUpAfter < a.Fetch.StallAfter {
		add("fetch.give_up_after", "%s is shorter than fetch.stall_after %s", a.Fetch.GiveUpAfter, a.Fetch.StallAfter)
	}
	if u := a.Fetch.HFEndpoint; u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		add("fetch.hf_endpoint", "%q is not an http(s) URL", u)
	}
	if u := a.Fetch.S3Endpoint; u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		add("fetch.s3_endpoint", "%q is not an http(s) URL", u)
	}
	if l := a.PeerListen; l != "" {
		if _, port, err := net.SplitHostPort(l); err != nil || port == "" {
			add("peer_listen", "%q is not host:port (e.g. \":7444\")", l)
		}
	}
	if err := a.Declaration.Validate(); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}

func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n > 0 && n <= 65535
}

// ServerList is Server followed by Servers, each once.
func (a Agent) ServerList() []string {
	out := []string{a.Server}
	for _, s := range a.Servers {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
