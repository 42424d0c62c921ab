package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/spec"
)

const tlsYAML = "agent_tls: {ca: ca.pem, cert: s.pem, key: s-key.pem}\n"

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "server.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadExample(t *testing.T) {
	s, err := Load("testdata/server.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if s.MetricsListen != "0.0.0.0:9091" || s.Agents.Grace != 45*time.Second || !s.Agents.RequireDeclared ||
		s.Limits.MaxBodyBytes != 20<<20 || s.Timeouts.ResponseHeader != 2*time.Minute || s.Timeouts.Generation != 30*time.Minute {
		t.Errorf("values not read: %+v", s)
	}
	if s.Limits.MaxUnauthenticatedConns != 512 || s.Limits.MaxNotesPerAgent != 200 || s.Limits.MaxNotesPerProject != 2000 || s.Timeouts.ClientHeader != 5*time.Second ||
		s.Timeouts.ClientBody != 30*time.Second || s.Timeouts.ClientIdle != 90*time.Second {
		t.Errorf("client connection bounds not read: %+v %+v", s.Limits, s.Timeouts)
	}
	if s.Auth.DefaultRPM != 600 || s.Auth.DefaultTPM != 200000 || s.Auth.DefaultPrice == nil ||
		*s.Auth.DefaultPrice != (spec.Pricing{PromptPer1K: 0.01, CompletionPer1K: 0.03}) || s.Auth.LoginTTL != 8*time.Hour {
		t.Errorf("auth limits and price not read: %+v", s.Auth)
	}
	if s.ManageTLS != (CertKey{Cert: "/etc/llmgw/server.pem", Key: "/etc/llmgw/server-key.pem"}) {
		t.Errorf("manage_tls = %+v, want agent_tls's cert and key", s.ManageTLS)
	}
	if len(s.Models) != 1 {
		t.Fatalf("models = %d, want 1", len(s.Models))
	}
	m := s.Models[0]
	if m.Name != "qwen2.5-coder-3b-instruct" || m.RoutingProfile != "chat" || m.Profiles[0].Nodes != 1 ||
		m.Profiles[0].StartupTimeout != spec.Duration(5*time.Minute) {
		t.Errorf("model not read or not normalized: %+v", m)
	}
}

func TestLoadDefaults(t *testing.T) {
	s, err := Load("testdata/minimal.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := Default()
	want.AgentTLS = TLS{CA: "ca.pem", Cert: "server.pem", Key: "server-key.pem"}
	want.ManageTLS = CertKey{Cert: "server.pem", Key: "server-key.pem"}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("Load =\n%+v\nwant\n%+v", s, want)
	}
	if s.PprofListen != "127.0.0.1:6060" || s.Listen != ":8080" || !s.Auth.Enabled || s.Auth.Store != "llmgw.db" || s.Auth.LoginTTL != 12*time.Hour {
		t.Fatalf("defaults wrong: %+v", s)
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name string
		body string
		want []string
	}{
		{
			name: "unknown key",
			body: tlsYAML + "agent:\n  grace: 45s\n",
			want: []string{`server.yaml:3: unknown key "agent.grace" (did you mean agents.grace?)`},
		},
		{
			name: "wrong type",
			body: tlsYAML + "auth:\n  enabled: sometimes\n",
			want: []string{`server.yaml:3: auth.enabled: cannot parse "sometimes" as true or false`},
		},
		{
			name: "bad duration",
			body: tlsYAML + "agents:\n  grace: soon\n",
			want: []string{`server.yaml:3: agents.grace: cannot parse "soon" as a duration`},
		},
		{
			name: "negative default limit",
			body: tlsYAML + "auth:\n  default_tpm: -5\n",
			want: []string{`server.yaml: auth.default_tpm: must not be negative`},
		},
		{
			name: "NaN default price",
			body: tlsYAML + "auth:\n  default_price: {prompt_per_1k: .nan, completion_per_1k: .inf}\n",
			want: []string{
				"server.yaml: auth.default_price.prompt_per_1k: must be a finite number, got NaN",
				"server.yaml: auth.default_price.completion_per_1k: must be a finite number, got +Inf",
			},
		},
		{
			name: "negative default price",
			body: tlsYAML + "auth:\n  default_price: {prompt_per_1k: 1, completion_per_1k: -1}\n",
			want: []string{"server.yaml: auth.default_price.completion_per_1k: must not be negative"},
		},
		{
			name: "login ttl too short",
			body: tlsYAML + "auth:\n  login_ttl: 30s\n",
			want: []string{`server.yaml: auth.login_ttl: 30s: must be between 1m0s and 720h0m0s`},
		},
		{
			name: "login ttl forever",
			body: tlsYAML + "auth:\n  login_ttl: 8760h\n",
			want: []string{`auth.login_ttl: 8760h0m0s: must be between`, "llmgw keys admin-token"},
		},
		{
			name: "pprof on all interfaces",
			body: tlsYAML + "pprof_listen: 0.0.0.0:6060\n",
			want: []string{`server.yaml: pprof_listen: "0.0.0.0:6060" is not a loopback address`},
		},
		{
			name: "pprof without host",
			body: tlsYAML + "pprof_listen: \":6060\"\n",
			want: []string{`pprof_listen: ":6060" is not a loopback address`},
		},
		{
			name: "pprof on a public name",
			body: tlsYAML + "pprof_listen: example.com:6060\n",
			want: []string{`pprof_listen: "example.com:6060" is not a loopback address`},
		},
		{
			name: "bad listen address",
			body: tlsYAML + "listen: \"8080\"\nmetrics_listen: \":http\"\n",
			want: []string{`server.yaml: listen: "8080" is not host:port`, `metrics_listen: ":http": port "http" is not a number`},
		},
		{
			name: "listener reused",
			body: tlsYAML + "metrics_listen: \":8080\"\n",
			want: []string{`metrics_listen: ":8080" is already used by listen`},
		},
		{
			name: "agent tls required",
			body: "listen: \":8080\"\n",
			want: []string{"agent_tls.ca: is required", "agent_tls.cert: is required", "agent_tls.key: is required"},
		},
		{
			name: "manage tls half set",
			body: tlsYAML + "manage_tls: {cert: m.pem}\n",
			want: []string{"manage_tls: set both cert and key"},
		},
		{
			name: "grace not longer than heartbeat",
			body: tlsYAML + "agents: {heartbeat_interval: 10s, grace: 5s}\n",
			want: []string{"agents.grace: 5s must be longer than agents.heartbeat_interval 10s"},
		},
		{
			name: "bad model",
			body: tlsYAML + "models:\n- name: a\n  profiles: [{name: p, engine: sim}]\n- name: b\n  profiles: [{name: p, engine: tgi}]\n",
			want: []string{`server.yaml: models[1].profiles[0].engine: unknown engine "tgi"`, "(model b)"},
		},
		{
			name: "model without profiles",
			body: tlsYAML + "models:\n- name: a\n",
			want: []string{`server.yaml: models[0].profiles: a model needs at least one profile (model a)`},
		},
		{
			name: "unknown key in a model",
			body: tlsYAML + "models:\n- name: a\n  profiles: [{name: p, engine: sim, gpu: x}]\n",
			want: []string{`server.yaml:4: unknown key "models[0].profiles[0].gpu"`},
		},
		{
			name: "alias clash across models",
			body: tlsYAML + "models:\n- name: a\n  profiles: [{name: p, engine: sim}]\n- name: b\n  aliases: [a]\n  profiles: [{name: p, engine: sim}]\n",
			want: []string{`server.yaml: models[1].aliases[0]: alias "a" of model "b" is already the name of model "a" (models[0])`},
		},
		{
			name: "client timeouts and connection bound not positive",
			body: tlsYAML + "limits: {max_unauthenticated_conns: 0, max_notes_per_agent: -1, max_notes_per_project: 0}\ntimeouts: {client_header: 0s, client_body: -1s, client_idle: 0s}\n",
			want: []string{"server.yaml: limits.max_unauthenticated_conns: must be positive", "server.yaml: limits.max_notes_per_agent: must be positive", "server.yaml: limits.max_notes_per_project: must be positive", "server.yaml: timeouts.client_header: must be positive",
				"server.yaml: timeouts.client_body: must be positive", "server.yaml: timeouts.client_idle: must be positive"},
		},
		{
			name: "client body timeout not a duration",
			body: tlsYAML + "timeouts:\n  client_body: slow\n",
			want: []string{`server.yaml:3: timeouts.client_body: cannot parse "slow" as a duration`},
		},
		{
			name: "every problem reported",
			body: tlsYAML + "pprof_listen: 0.0.0.0:1\nlimits: {max_body_bytes: 0}\n",
			want: []string{"pprof_listen:", "limits.max_body_bytes: must be positive"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.body)
			_, err := Load(path)
			if err == nil {
				t.Fatalf("Load succeeded, want %q", tt.want)
			}
			msg := strings.ReplaceAll(err.Error(), path, "server.yaml")
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error\n%s\ndoes not contain\n%s", msg, w)
				}
			}
		})
	}
}

func TestLoadEnv(t *testing.T) {
	t.Setenv("LLMGW_AGENTS__GRACE", "45s")
	t.Setenv("LLMGW_AGENT_TLS__CA", "env-ca.pem")
	t.Setenv("LLMGW_PPROF_LISTEN", "")
	path := writeConfig(t, tlsYAML+"agents: {grace: 10s}\n")
	s, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if s.Agents.Grace != 45*time.Second || s.AgentTLS.CA != "env-ca.pem" || s.PprofListen != "" {
		t.Fatalf("environment not applied: grace %v, ca %q, pprof %q", s.Agents.Grace, s.AgentTLS.CA, s.PprofListen)
	}

	t.Setenv("LLMGW_AGENTS__GRAC", "45s")
	_, err = Load(path)
	if err == nil || !strings.Contains(err.Error(), `LLMGW_AGENTS__GRAC: unknown key "agents.grac" (did you mean agents.grace?)`) {
		t.Fatalf("Load with unknown variable = %v", err)
	}
}

func TestLoadEnvOnly(t *testing.T) {
	t.Setenv("LLMGW_AGENT_TLS__CA", "ca.pem")
	t.Setenv("LLMGW_AGENT_TLS__CERT", "s.pem")
	t.Setenv("LLMGW_AGENT_TLS__KEY", "k.pem")
	t.Setenv("LLMGW_PPROF_LISTEN", "0.0.0.0:6060")
	_, err := Load("")
	if err == nil || !strings.Contains(err.Error(), "configuration: pprof_listen:") {
		t.Fatalf("Load(\"\") = %v, want the pprof error", err)
	}
}
