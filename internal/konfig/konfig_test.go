package konfig

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// textDuration stands in for catalog.Duration: a duration decoded through
// encoding.TextUnmarshaler.
type textDuration time.Duration

func (d *textDuration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("cannot parse %q as a duration", b)
	}
	*d = textDuration(v)
	return nil
}

type item struct {
	Name    string       `koanf:"name"`
	Timeout textDuration `koanf:"timeout"`
}

type embedded struct {
	Fabrics []string `koanf:"fabrics"`
}

type testConfig struct {
	Listen string `koanf:"listen"`
	Agents struct {
		Grace           time.Duration `koanf:"grace"`
		Heartbeat       time.Duration `koanf:"heartbeat_interval"`
		RequireDeclared bool          `koanf:"require_declared"`
	} `koanf:"agents"`
	Limits struct {
		MaxBodyBytes int64 `koanf:"max_body_bytes"`
		Ratio        float64
	} `koanf:"limits"`
	Labels    map[string]string `koanf:"labels"`
	ModelDirs []string          `koanf:"model_dirs"`
	Items     []item            `koanf:"items"`
	embedded  `koanf:",squash"`
}

func defaults() testConfig {
	var c testConfig
	c.Listen = ":9999"
	c.Agents.Grace = 30 * time.Second
	c.Agents.Heartbeat = 5 * time.Second
	c.Limits.MaxBodyBytes = 1024
	return c
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadValidFile(t *testing.T) {
	c := defaults()
	if err := Load("testdata/valid.yaml", "", &c); err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := defaults()
	want.Listen = ":8080"
	want.Agents.Grace = 45 * time.Second
	want.Agents.RequireDeclared = true
	want.Limits.MaxBodyBytes = 2048
	want.Labels = map[string]string{"zone": "a", "topology.example/rack": "r1"}
	want.ModelDirs = []string{"/srv/models", "/mnt/models"}
	want.Items = []item{{Name: "first", Timeout: textDuration(5 * time.Minute)}, {Name: "second"}}
	want.Fabrics = []string{"ib-a"}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("Load =\n%+v\nwant\n%+v", c, want)
	}
}

func TestLoadKeepsDefaults(t *testing.T) {
	tests := []struct{ name, path string }{
		{"no file", ""},
		{"empty file", writeFile(t, "empty.yaml", "")},
		{"null sections", writeFile(t, "null.yaml", "agents:\nlimits: ~\n")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := defaults()
			if err := Load(tt.path, "", &c); err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !reflect.DeepEqual(c, defaults()) {
				t.Fatalf("Load changed the defaults: %+v", c)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name string
		body string
		want []string // each must appear in the error
	}{
		{
			name: "unknown section with suggestion",
			body: "listen: \":1\"\nagent:\n  grace: 45s\n",
			want: []string{`server.yaml:3: unknown key "agent.grace" (did you mean agents.grace?)`},
		},
		{
			name: "unknown key in a list item",
			body: "items:\n  - name: a\n    timout: 5m\n",
			want: []string{`server.yaml:3: unknown key "items[0].timout" (did you mean items[0].timeout?)`},
		},
		{
			name: "key at the wrong level",
			body: "grace: 45s\n",
			want: []string{`server.yaml:1: unknown key "grace" (did you mean agents.grace?)`},
		},
		{
			name: "unknown key without a close match",
			body: "completely_different: 1\n",
			want: []string{`server.yaml:1: unknown key "completely_different"`},
		},
		{
			name: "bad duration",
			body: "agents:\n  grace: soon\n",
			want: []string{`server.yaml:2: agents.grace: cannot parse "soon" as a duration`},
		},
		{
			name: "duration without unit",
			body: "agents:\n  grace: 30\n",
			want: []string{`server.yaml:2: agents.grace: cannot parse 30 as a duration: give it a unit, e.g. "30s"`},
		},
		{
			name: "bad text-unmarshaled duration",
			body: "items:\n  - timeout: later\n",
			want: []string{`server.yaml:2: items[0].timeout: cannot parse "later" as a duration`},
		},
		{
			name: "string for an integer",
			body: "limits:\n  max_body_bytes: lots\n",
			want: []string{`server.yaml:2: limits.max_body_bytes: cannot parse "lots" as a whole number`},
		},
		{
			name: "string for a bool",
			body: "agents:\n  require_declared: maybe\n",
			want: []string{`agents.require_declared: cannot parse "maybe" as true or false`},
		},
		{
			name: "bool for a string",
			body: "listen: true\n",
			want: []string{`server.yaml:1: listen: expected a string, got true`},
		},
		{
			name: "date for a string",
			body: "listen: 2026-03-01\n",
			want: []string{`server.yaml:1: listen: expected a string, got 2026-03-01T00:00:00Z (YAML reads it as a timestamp; quote it)`},
		},
		{
			name: "scalar for a section",
			body: "agents: 5\n",
			want: []string{`server.yaml:1: agents: expected a mapping of keys, got 5`},
		},
		{
			name: "mapping for a list",
			body: "model_dirs:\n  a: b\n",
			want: []string{`model_dirs: expected a list, got a mapping`},
		},
		{
			name: "several problems are all reported",
			body: "agents:\n  grace: soon\nlistn: x\n",
			want: []string{`agents.grace: cannot parse "soon"`, `unknown key "listn" (did you mean listen?)`},
		},
		{
			name: "yaml syntax error names the line",
			body: "listen: \":1\"\nagents:\n  grace: 1s\n bad: [\n",
			want: []string{`server.yaml:3: invalid YAML: did not find expected key`},
		},
		{
			name: "top level list",
			body: "- a\n- b\n",
			want: []string{`server.yaml:1: the file must be a mapping of keys at the top level`},
		},
		{
			name: "duplicate key",
			body: "listen: a\nlisten: b\n",
			want: []string{`server.yaml:2:`, `already defined`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, "server.yaml", tt.body)
			c := defaults()
			err := Load(path, "", &c)
			if err == nil {
				t.Fatalf("Load succeeded, want error containing %q", tt.want)
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

func TestLoadMissingFile(t *testing.T) {
	c := defaults()
	err := Load(filepath.Join(t.TempDir(), "nope.yaml"), "", &c)
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Load(missing) = %v, want os.ErrNotExist", err)
	}
}

func TestLoadProblemsUnwrap(t *testing.T) {
	path := writeFile(t, "server.yaml", "agents:\n  grace: soon\n")
	c := defaults()
	err := Load(path, "", &c)
	var p *Problem
	if !errors.As(err, &p) {
		t.Fatalf("Load error %v is not a *Problem", err)
	}
	if p.Key != "agents.grace" || p.Line != 2 || p.Source != path {
		t.Fatalf("problem = %+v, want key agents.grace line 2 source %s", p, path)
	}
}

func TestLoadEnv(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		file    string
		check   func(t *testing.T, c testConfig)
		wantErr string
	}{
		{
			name: "nested duration overrides the file",
			file: "agents:\n  grace: 10s\n",
			env:  map[string]string{"KTEST_AGENTS__GRACE": "45s"},
			check: func(t *testing.T, c testConfig) {
				if c.Agents.Grace != 45*time.Second {
					t.Errorf("grace = %v, want 45s", c.Agents.Grace)
				}
			},
		},
		{
			name: "top level key with underscore, bool, int",
			env: map[string]string{
				"KTEST_LISTEN":                     "127.0.0.1:1",
				"KTEST_AGENTS__REQUIRE_DECLARED":   "true",
				"KTEST_LIMITS__MAX_BODY_BYTES":     "77",
				"KTEST_AGENTS__HEARTBEAT_INTERVAL": "2s",
			},
			check: func(t *testing.T, c testConfig) {
				if c.Listen != "127.0.0.1:1" || !c.Agents.RequireDeclared || c.Limits.MaxBodyBytes != 77 || c.Agents.Heartbeat != 2*time.Second {
					t.Errorf("got %+v", c)
				}
			},
		},
		{
			name: "list split at commas, map sub-key, squashed key",
			file: "labels:\n  zone: a\n",
			env: map[string]string{
				"KTEST_MODEL_DIRS":   "/a, /b",
				"KTEST_LABELS__RACK": "r7",
				"KTEST_FABRICS":      "ib-a",
			},
			check: func(t *testing.T, c testConfig) {
				if !reflect.DeepEqual(c.ModelDirs, []string{"/a", "/b"}) {
					t.Errorf("model_dirs = %q", c.ModelDirs)
				}
				if !reflect.DeepEqual(c.Labels, map[string]string{"zone": "a", "rack": "r7"}) {
					t.Errorf("labels = %v", c.Labels)
				}
				if !reflect.DeepEqual(c.Fabrics, []string{"ib-a"}) {
					t.Errorf("fabrics = %q", c.Fabrics)
				}
			},
		},
		{
			name:    "unknown key names the variable",
			env:     map[string]string{"KTEST_AGENT__GRACE": "45s"},
			wantErr: `KTEST_AGENT__GRACE: unknown key "agent.grace" (did you mean agents.grace?)`,
		},
		{
			name:    "bad value names the variable",
			env:     map[string]string{"KTEST_AGENTS__GRACE": "soon"},
			wantErr: `KTEST_AGENTS__GRACE: agents.grace: cannot parse "soon" as a duration`,
		},
		{
			name:    "list of sections cannot come from the environment",
			env:     map[string]string{"KTEST_ITEMS": "a"},
			wantErr: `KTEST_ITEMS: items: expected a list, got "a"`,
		},
		{
			name:    "empty nesting level",
			env:     map[string]string{"KTEST_AGENTS____GRACE": "1s"},
			wantErr: `KTEST_AGENTS____GRACE: names no key`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			path := ""
			if tt.file != "" {
				path = writeFile(t, "server.yaml", tt.file)
			}
			c := defaults()
			err := Load(path, "KTEST_", &c)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Load = %v, want error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			tt.check(t, c)
		})
	}
}

func TestParse(t *testing.T) {
	var it item
	if err := Parse([]byte("name: x\ntimeout: 1m\n"), "model.yaml", &it); err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if it.Name != "x" || time.Duration(it.Timeout) != time.Minute {
		t.Fatalf("Parse = %+v", it)
	}
	err := Parse([]byte("nam: x\n"), "model.yaml", &it)
	if err == nil || err.Error() != `model.yaml:1: unknown key "nam" (did you mean name?)` {
		t.Fatalf("Parse(unknown) = %v", err)
	}
	if err := Parse(nil, "x", it); err == nil {
		t.Fatal("Parse into a non-pointer succeeded")
	}
}

func TestSuggest(t *testing.T) {
	known := []string{"listen", "agent_listen", "agents.grace", "agents.heartbeat_interval", "auth.store", "auth.enabled"}
	tests := []struct{ in, want string }{
		{"agent.grace", "agents.grace"},
		{"lisen", "listen"},
		{"grace", "agents.grace"},
		{"heartbeat", ""},
		{"store", "auth.store"},
		{"zzz", ""},
	}
	for _, tt := range tests {
		if got := suggest(tt.in, known); got != tt.want {
			t.Errorf("suggest(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// Regression: a shell that sourced `llmgw dev`'s env file (LLMGW_API_KEY,
// LLMGW_TOKEN, ...) must still be able to start a daemon.
func TestLoadIgnoresClientVariables(t *testing.T) {
	t.Setenv("LLMGW_API_KEY", "llmgw-x")
	t.Setenv("LLMGW_TOKEN", "llmgwadm-x")
	t.Setenv("LLMGW_ENDPOINT", "127.0.0.1:9090")
	var out struct {
		Listen string `koanf:"listen"`
	}
	if err := Load("", "LLMGW_", &out); err != nil {
		t.Fatalf("Load with client variables set: %v", err)
	}
}
