package spec

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// validModel is a normalized, valid model to derive cases from.
func validModel() Model {
	m := Model{
		Name:    "m",
		Aliases: []string{"a1"},
		Source:  "/models/m.gguf",
		Scaling: Scaling{Min: 1, Max: 2},
		Profiles: []Profile{
			{Name: "cpu", Engine: "llamacpp", Labels: map[string]string{"k": "v"}, Args: []string{"--x"}},
			{Name: "gpu", Engine: "vllm", GPUClass: "h100-80g", TP: 2, Nodes: 2},
		},
	}
	m.Normalize()
	return m
}

func TestParseModelFile(t *testing.T) {
	tests := []struct {
		file string
		want Model
	}{
		{
			file: "qwen-coder-3b.yaml",
			want: Model{
				Name:           "qwen2.5-coder-3b-instruct",
				Aliases:        []string{"coder"},
				Source:         "/var/lib/llmgw-models/qwen2.5-coder-3b-instruct-q4_k_m.gguf",
				RoutingProfile: "chat",
				ContextLength:  32768,
				MaxOutput:      4096,
				Scaling:        Scaling{Min: 1, Max: 1},
				Profiles: []Profile{{
					Name: "cpu", Engine: "llamacpp", Nodes: 1, Weight: 1, Priority: 100,
					StartupTimeout: Duration(5 * time.Minute), MinMemoryGB: 8,
					Args: []string{"--ctx-size", "65536"},
				}},
			},
		},
		{
			file: "llama-70b.yaml",
			want: Model{
				Name:           "llama-3.1-70b-instruct",
				Source:         "http://models.internal:8081/llama-3.1-70b-instruct/2026-03/",
				RoutingProfile: "chat",
				Scaling:        Scaling{Min: 0, Max: 2, IdleTimeout: Duration(15 * time.Minute)},
				Profiles: []Profile{
					{Name: "tp8", Engine: "vllm", GPUClass: "h100-80g", TP: 8, Nodes: 1, Weight: 1, Priority: 100, StartupTimeout: DefaultStartupTimeout},
					{Name: "tp4x2", Engine: "vllm", GPUClass: "h100-80g", TP: 4, Nodes: 2, Weight: 1, Priority: 50, StartupTimeout: DefaultStartupTimeout, Labels: map[string]string{"rack": "r1"}},
				},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := ParseModelFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatalf("ParseModelFile: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestParseModelErrors(t *testing.T) {
	tests := []struct {
		name string
		file string
		body string
		want []string
	}{
		{
			name: "unknown key names key and file",
			file: "testdata/unknown-key.yaml",
			want: []string{`testdata/unknown-key.yaml:5: unknown key "profiles[0].gpu_klass" (did you mean profiles[0].gpu_class?)`},
		},
		{
			name: "every validation problem is reported with its key",
			file: "testdata/invalid.yaml",
			want: []string{
				`testdata/invalid.yaml: name: name "Bad Name" may contain only`,
				`testdata/invalid.yaml: aliases[0]: alias "Bad Name" may contain only`,
				`testdata/invalid.yaml: aliases[2]: alias "dup" is already listed at aliases[1]`,
				`testdata/invalid.yaml: scaling.min: must not be negative`,
				`testdata/invalid.yaml: profiles[0].engine: unknown engine "tgi"`,
				`testdata/invalid.yaml: profiles[1].name: profile "p" is already defined at profiles[0]`,
				`testdata/invalid.yaml: profiles[1].nodes: engine llamacpp cannot span nodes`,
				`testdata/invalid.yaml: profiles[2].tp: must be at least 1 when gpu_class is set`,
			},
		},
		{
			name: "bad duration",
			body: "name: m\nprofiles:\n- name: p\n  engine: sim\n  startup_timeout: soon\n",
			want: []string{`m.yaml:5: profiles[0].startup_timeout: cannot parse "soon" as a duration`},
		},
		{
			name: "wrong type",
			body: "name: m\ncontext_length: big\nprofiles:\n- name: p\n  engine: sim\n",
			want: []string{`m.yaml:2: context_length: cannot parse "big" as a whole number`},
		},
		{
			name: "NaN price in a model file",
			body: "name: m\npricing: {prompt_per_1k: .nan, completion_per_1k: .inf}\nprofiles:\n- name: p\n  engine: sim\n",
			want: []string{
				"m.yaml: pricing.prompt_per_1k: must be a finite number, got NaN",
				"m.yaml: pricing.completion_per_1k: must be a finite number, got +Inf",
			},
		},
		{
			name: "missing file",
			file: "testdata/nope.yaml",
			want: []string{"reading model definition", "nope.yaml"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.file != "" {
				_, err = ParseModelFile(tt.file)
			} else {
				_, err = ParseModelYAML([]byte(tt.body), "m.yaml")
			}
			if err == nil {
				t.Fatal("parse succeeded, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\ndoes not contain\n%s", err, w)
				}
			}
		})
	}
}

func TestParseModelValidationErrorIsProblems(t *testing.T) {
	_, err := ParseModelFile("testdata/invalid.yaml")
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("error %v does not unwrap to Problems", err)
	}
	if len(ps) != 8 {
		t.Fatalf("got %d problems, want 8:\n%v", len(ps), ps)
	}
}

func TestNormalize(t *testing.T) {
	m := Model{Name: "m", Scaling: Scaling{Min: 3}, Profiles: []Profile{{Name: "p", Engine: "sim"}, {Name: "q", Engine: "sim", Nodes: 2, Weight: 5, StartupTimeout: Duration(time.Minute)}}}
	m.Normalize()
	if m.RoutingProfile != "chat" || m.Scaling.Max != 3 {
		t.Errorf("model defaults: routing_profile %q, scaling.max %d", m.RoutingProfile, m.Scaling.Max)
	}
	if p := m.Profiles[0]; p.Nodes != 1 || p.Weight != 1 || p.StartupTimeout != Duration(10*time.Minute) {
		t.Errorf("profile defaults: %+v", p)
	}
	if p := m.Profiles[1]; p.Nodes != 2 || p.Weight != 5 || p.StartupTimeout != Duration(time.Minute) {
		t.Errorf("profile values overwritten: %+v", p)
	}
	unscaled := Model{}
	unscaled.Normalize()
	if unscaled.Scaling != (Scaling{}) {
		t.Errorf("no scaling stanza gave %+v, want min 0 max 0", unscaled.Scaling)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(m *Model)
		want   string // "" means valid
	}{
		{name: "valid", modify: func(m *Model) {}},
		{name: "name required", modify: func(m *Model) { m.Name = "" }, want: "name: is required"},
		{name: "name form", modify: func(m *Model) { m.Name = "Qwen/7B" }, want: `name: name "Qwen/7B" may contain only`},
		{name: "name starts with dot", modify: func(m *Model) { m.Name = ".m" }, want: "name: name"},
		{name: "name too long", modify: func(m *Model) { m.Name = strings.Repeat("a", 129) }, want: "longer than 128"},
		{name: "alias equals name", modify: func(m *Model) { m.Aliases = []string{"m"} }, want: `aliases[0]: alias "m" is the model's own name`},
		{name: "alias repeated", modify: func(m *Model) { m.Aliases = []string{"x", "x"} }, want: `aliases[1]: alias "x" is already listed at aliases[0]`},
		{name: "no profiles", modify: func(m *Model) { m.Profiles = nil }, want: "profiles: a model needs at least one profile"},
		{name: "profile name required", modify: func(m *Model) { m.Profiles[0].Name = "" }, want: "profiles[0].name: is required"},
		{name: "engine required", modify: func(m *Model) { m.Profiles[0].Engine = "" }, want: "profiles[0].engine: is required"},
		{name: "engine unknown", modify: func(m *Model) { m.Profiles[1].Engine = "tgi" }, want: `profiles[1].engine: unknown engine "tgi" (known: sim, llamacpp, vllm, sglang)`},
		{name: "negative tp", modify: func(m *Model) { m.Profiles[0].TP = -1 }, want: "profiles[0].tp: must not be negative"},
		{name: "gpu without tp", modify: func(m *Model) { m.Profiles[1].TP = 0 }, want: "profiles[1].tp: must be at least 1 when gpu_class is set"},
		{name: "zero nodes", modify: func(m *Model) { m.Profiles[0].Nodes = 0 }, want: "profiles[0].nodes: must be at least 1"},
		{name: "tp beyond the protocol", modify: func(m *Model) { m.Profiles[1].TP = 1<<32 + 1 }, want: "profiles[1].tp: 4294967297 is out of range: at most 2147483647"},
		{name: "context beyond the protocol", modify: func(m *Model) { m.ContextLength = 1 << 40 }, want: "context_length: 1099511627776 is out of range"},
		{name: "priority beyond the protocol", modify: func(m *Model) { m.Profiles[0].Priority = -(1 << 33) }, want: "profiles[0].priority: -8589934592 is out of range"},
		{name: "llamacpp multi-node", modify: func(m *Model) { m.Profiles[0].Nodes = 2 }, want: "profiles[0].nodes: engine llamacpp cannot span nodes"},
		{name: "sglang multi-node", modify: func(m *Model) { m.Profiles[1].Engine = "sglang" }},
		{name: "unknown routing profile", modify: func(m *Model) { m.RoutingProfile = "fastest" }, want: `routing_profile: "fastest" is not a routing profile: use one of chat, prefix, least-loaded, round-robin`},
		{name: "min above max", modify: func(m *Model) { m.Scaling = Scaling{Min: 3, Max: 1} }, want: "scaling.max: 1 is less than scaling.min 3"},
		{name: "negative min", modify: func(m *Model) { m.Scaling.Min = -1 }, want: "scaling.min: must not be negative"},
		{name: "negative idle timeout", modify: func(m *Model) { m.Scaling.IdleTimeout = -1 }, want: "scaling.idle_timeout: must not be negative"},
		{name: "max output above context", modify: func(m *Model) { m.ContextLength, m.MaxOutput = 10, 20 }, want: "max_output: 20 is more than context_length 10"},
		{name: "negative prompt price", modify: func(m *Model) { m.Pricing = &Pricing{PromptPer1K: -1} }, want: "pricing.prompt_per_1k: must not be negative"},
		{name: "negative completion price", modify: func(m *Model) { m.Pricing = &Pricing{CompletionPer1K: -0.5} }, want: "pricing.completion_per_1k: must not be negative"},
		{name: "NaN prompt price", modify: func(m *Model) { m.Pricing = &Pricing{PromptPer1K: math.NaN()} }, want: "pricing.prompt_per_1k: must be a finite number, got NaN"},
		{name: "infinite completion price", modify: func(m *Model) { m.Pricing = &Pricing{CompletionPer1K: math.Inf(1)} }, want: "pricing.completion_per_1k: must be a finite number, got +Inf"},
		{name: "negative infinite price", modify: func(m *Model) { m.Pricing = &Pricing{PromptPer1K: math.Inf(-1)} }, want: "pricing.prompt_per_1k: must be a finite number, got -Inf"},
		{name: "min above the hard bound", modify: func(m *Model) { m.Scaling = Scaling{Min: MaxReplicas + 1, Max: MaxReplicas + 1} }, want: "scaling.min: 10001 is more than 10000"},
		{name: "max above the hard bound", modify: func(m *Model) { m.Scaling = Scaling{Min: 1, Max: 1 << 32} }, want: "scaling.max: 4294967296 is more than 10000"},
		{name: "min at the hard bound", modify: func(m *Model) { m.Scaling = Scaling{Min: MaxReplicas, Max: MaxReplicas} }},
		{name: "negative memory", modify: func(m *Model) { m.Profiles[0].MinMemoryGB = -8 }, want: "profiles[0].min_memory_gb: must not be negative"},
		{name: "zero startup timeout", modify: func(m *Model) { m.Profiles[1].StartupTimeout = 0 }, want: "profiles[1].startup_timeout: must be positive"},
		{name: "vllm on ray", modify: func(m *Model) { m.Profiles[1].Engine, m.Profiles[1].LaunchMode = "vllm", "ray" }},
		{name: "launch mode unknown", modify: func(m *Model) { m.Profiles[1].Engine, m.Profiles[1].LaunchMode = "vllm", "slurm" }, want: `profiles[1].launch_mode: unknown launch mode "slurm" (mp or ray)`},
		{name: "launch mode on llamacpp", modify: func(m *Model) { m.Profiles[0].LaunchMode = "mp" }, want: "profiles[0].launch_mode: only vllm takes a launch mode; engine llamacpp does not"},
		{name: "env name with =", modify: func(m *Model) { m.Profiles[0].Env = map[string]string{"A=B": "x"} }, want: `profiles[0].env: "A=B" is not a valid environment variable name`},
		{name: "env", modify: func(m *Model) { m.Profiles[0].Env = map[string]string{"NCCL_SOCKET_IFNAME": "ib0"} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := validModel()
			tt.modify(&m)
			err := m.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want error containing %q", err, tt.want)
			}
		})
	}
}

func TestValidateSet(t *testing.T) {
	mk := func(name string, aliases ...string) Model { return Model{Name: name, Aliases: aliases} }
	tests := []struct {
		name   string
		models []Model
		want   string
	}{
		{name: "distinct", models: []Model{mk("a", "x"), mk("b", "y")}},
		{name: "empty", models: nil},
		{name: "duplicate name", models: []Model{mk("a"), mk("b"), mk("a")}, want: `models[2].name: model "a" is already defined at models[0]`},
		{name: "alias is another model's name", models: []Model{mk("a"), mk("b", "a")}, want: `models[1].aliases[0]: alias "a" of model "b" is already the name of model "a" (models[0])`},
		{name: "alias is another model's alias", models: []Model{mk("a", "coder"), mk("b", "x", "coder")}, want: `models[1].aliases[1]: alias "coder" of model "b" is already an alias of model "a" (models[0])`},
		{name: "name is an earlier model's alias", models: []Model{mk("a", "b"), mk("b")}, want: `models[0].aliases[0]: alias "b" of model "a" is already the name of model "b" (models[1])`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateSet(tt.models)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("ValidateSet = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ValidateSet = %v, want error containing %q", err, tt.want)
			}
		})
	}
}

func TestCloneIsDeep(t *testing.T) {
	m := validModel()
	c := m.Clone()
	if !m.Equal(c) || !reflect.DeepEqual(m, c) {
		t.Fatal("clone differs from the original")
	}
	c.Aliases[0] = "changed"
	c.Profiles[0].Labels["k"] = "changed"
	c.Profiles[0].Args[0] = "changed"
	c.Profiles[1].Name = "changed"
	if m.Aliases[0] != "a1" || m.Profiles[0].Labels["k"] != "v" || m.Profiles[0].Args[0] != "--x" || m.Profiles[1].Name != "gpu" {
		t.Fatalf("changing the clone changed the original: %+v", m)
	}
}

func TestModelEqual(t *testing.T) {
	tests := []struct {
		name   string
		modify func(m *Model)
		equal  bool
	}{
		{name: "same", modify: func(m *Model) {}, equal: true},
		{name: "empty aliases equal nil", modify: func(m *Model) { m.Aliases = nil }, equal: true},
		{name: "empty labels equal nil", modify: func(m *Model) { m.Profiles[1].Labels = map[string]string{} }, equal: true},
		{name: "source", modify: func(m *Model) { m.Source = "other" }},
		{name: "scaling", modify: func(m *Model) { m.Scaling.IdleTimeout = Duration(time.Minute) }},
		{name: "alias", modify: func(m *Model) { m.Aliases = []string{"x"} }},
		{name: "profile args", modify: func(m *Model) { m.Profiles[0].Args = []string{"--y"} }},
		{name: "profile label", modify: func(m *Model) { m.Profiles[0].Labels["k"] = "w" }},
		{name: "profile tp", modify: func(m *Model) { m.Profiles[1].TP = 4 }},
		{name: "profile order", modify: func(m *Model) { m.Profiles[0], m.Profiles[1] = m.Profiles[1], m.Profiles[0] }},
		{name: "profile removed", modify: func(m *Model) { m.Profiles = m.Profiles[:1] }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := validModel()
			m.Aliases = []string{}
			base := m.Clone()
			tt.modify(&m)
			if got := base.Equal(m); got != tt.equal {
				t.Fatalf("Equal = %v, want %v", got, tt.equal)
			}
			if got := m.Equal(base); got != tt.equal {
				t.Fatalf("Equal is not symmetric")
			}
		})
	}
}

func TestDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{5 * time.Minute, "5m"},
		{time.Hour, "1h"},
		{90 * time.Minute, "1h30m"},
		{90 * time.Second, "1m30s"},
		{time.Hour + 5*time.Second, "1h0m5s"},
		{0, "0s"},
		{1500 * time.Millisecond, "1.5s"},
	}
	for _, tt := range tests {
		d := Duration(tt.d)
		if got := d.String(); got != tt.want {
			t.Errorf("Duration(%v).String() = %q, want %q", tt.d, got, tt.want)
		}
		var back Duration
		if err := back.UnmarshalText([]byte(tt.want)); err != nil || back != d {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", tt.want, back, err, d)
		}
	}
	var d Duration
	if err := d.UnmarshalText([]byte("soon")); err == nil || !strings.Contains(err.Error(), `cannot parse "soon" as a duration`) {
		t.Errorf("UnmarshalText(soon) = %v", err)
	}
}

func TestModelRoundTrip(t *testing.T) {
	m, err := ParseModelFile("testdata/llama-70b.yaml")
	if err != nil {
		t.Fatal(err)
	}
	t.Run("json", func(t *testing.T) {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"idle_timeout":"15m"`) || !strings.Contains(string(b), `"startup_timeout":"10m"`) || !strings.Contains(string(b), `"gpu_class":"h100-80g"`) {
			t.Fatalf("json = %s", b)
		}
		var back Model
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if !back.Equal(m) {
			t.Fatalf("json round trip changed the model:\n%+v\n%+v", back, m)
		}
	})
	t.Run("yaml through the strict parser", func(t *testing.T) {
		b, err := yaml.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "idle_timeout: 15m") {
			t.Fatalf("yaml =\n%s", b)
		}
		path := filepath.Join(t.TempDir(), "m.yaml")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		back, err := ParseModelFile(path)
		if err != nil {
			t.Fatalf("parsing marshaled yaml: %v\n%s", err, b)
		}
		if !back.Equal(m) {
			t.Fatalf("yaml round trip changed the model:\n%+v\n%+v", back, m)
		}
	})
}

func TestProblemsWithin(t *testing.T) {
	ps := Problems{{Key: "name", Msg: "is required"}, {Key: "[0]", Msg: "x"}, {Msg: "whole"}}
	got := ps.Within("models[2]").Error()
	want := "models[2].name: is required\nmodels[2][0]: x\nmodels[2]: whole"
	if got != want {
		t.Fatalf("Within = %q, want %q", got, want)
	}
	if ps[0].Key != "name" {
		t.Fatal("Within changed its receiver")
	}
	if Problems(nil).Prefixed("f") != nil {
		t.Fatal("Prefixed of no problems is not nil")
	}
}

func TestPricing(t *testing.T) {
	p := Pricing{PromptPer1K: 0.5, CompletionPer1K: 2}
	if got := p.Cost(1000, 500); got != 1.5 {
		t.Errorf("Cost(1000, 500) = %v, want 1.5", got)
	}
	if p.Free() || !(Pricing{}).Free() {
		t.Error("Free is wrong")
	}
	// Pricing is part of a model's definition but a copy never shares it.
	m := Model{Name: "m", Pricing: &p}
	c := m.Clone()
	c.Pricing.PromptPer1K = 9
	if m.Pricing.PromptPer1K != 0.5 || m.Equal(c) {
		t.Error("Clone shares the pricing, or Equal ignores it")
	}
}
