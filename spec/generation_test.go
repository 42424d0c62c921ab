package spec

import "testing"

func TestGenerationChangesOnlyWithWhatReplicasAreBuiltFrom(t *testing.T) {
	base := Model{Name: "m", RoutingProfile: "chat", Scaling: Scaling{Min: 1, Max: 1}, Profiles: []Profile{{Name: "p", Engine: "sim", Nodes: 1, Weight: 1, StartupTimeout: DefaultStartupTimeout}}}
	g := Generation(base)
	same := base.Clone()
	same.Aliases = []string{"x"}
	same.Scaling.Min = 3
	if Generation(same) != g {
		t.Fatal("aliases or scaling changed the generation: replicas would roll for nothing")
	}
	other := base.Clone()
	other.Profiles[0].Args = []string{"--decode-tps", "50"}
	if Generation(other) == g {
		t.Fatal("changed engine args kept the generation: replicas would not roll")
	}
}

func TestSameReplicas(t *testing.T) {
	base := Model{Name: "m", Profiles: []Profile{{Name: "p", Engine: "sim", TP: 1}}}
	priced := base.Clone()
	priced.Pricing = &Pricing{PromptPer1K: 1}
	if !SameReplicas(base, priced) {
		t.Fatal("a price change would roll replicas")
	}
	wider := base.Clone()
	wider.Profiles[0].TP = 2
	if SameReplicas(base, wider) {
		t.Fatal("a tp change would not roll replicas")
	}
}

// TestGenerationIgnoresRouting: a profile's weight and priority decide how
// traffic and placement choose among profiles, not how a replica is built,
// so changing them must not roll replicas; every field a replica is built
// from still does.
func TestGenerationIgnoresRouting(t *testing.T) {
	base := Model{Name: "m", Source: "sim://m", ContextLength: 4096, Scaling: Scaling{Min: 1, Max: 1},
		Profiles: []Profile{{Name: "p", Engine: "vllm", GPUClass: "h100-80g", TP: 1, Nodes: 1, Weight: 1, Priority: 10,
			StartupTimeout: DefaultStartupTimeout, MinMemoryGB: 8, MinDiskGB: 40, Labels: map[string]string{"zone": "eu"},
			Args: []string{"--x"}, Env: map[string]string{"A": "1"}, LaunchMode: "mp"}}}
	for name, edit := range map[string]func(p *Profile){
		"weight":   func(p *Profile) { p.Weight = 5 },
		"priority": func(p *Profile) { p.Priority = 99 },
	} {
		m := base.Clone()
		edit(&m.Profiles[0])
		if !SameReplicas(base, m) {
			t.Errorf("a %s change would roll replicas", name)
		}
	}
	for name, edit := range map[string]func(p *Profile){
		"engine":          func(p *Profile) { p.Engine = "sglang" },
		"gpu_class":       func(p *Profile) { p.GPUClass = "a100-80g" },
		"tp":              func(p *Profile) { p.TP = 2 },
		"nodes":           func(p *Profile) { p.Nodes = 2 },
		"startup_timeout": func(p *Profile) { p.StartupTimeout = Duration(1) },
		"min_memory_gb":   func(p *Profile) { p.MinMemoryGB = 9 },
		"min_disk_gb":     func(p *Profile) { p.MinDiskGB = 41 },
		"labels":          func(p *Profile) { p.Labels = map[string]string{"zone": "us"} },
		"args":            func(p *Profile) { p.Args = []string{"--y"} },
		"env":             func(p *Profile) { p.Env = map[string]string{"A": "2"} },
		"launch_mode":     func(p *Profile) { p.LaunchMode = "ray" },
		"name":            func(p *Profile) { p.Name = "q" },
	} {
		m := base.Clone()
		edit(&m.Profiles[0])
		if SameReplicas(base, m) {
			t.Errorf("a %s change would not roll replicas", name)
		}
	}
	for name, edit := range map[string]func(m *Model){
		"source":         func(m *Model) { m.Source = "sim://other" },
		"context_length": func(m *Model) { m.ContextLength = 8192 },
	} {
		m := base.Clone()
		edit(&m)
		if SameReplicas(base, m) {
			t.Errorf("a %s change would not roll replicas", name)
		}
	}
	// The hash did not change for a profile at the defaults: replicas
	// placed before weight and priority were left out are not rolled.
	if got := Generation(Model{Name: "m", Profiles: []Profile{{Name: "p", Engine: "sim", Weight: 1}}}); got != "449234e8327f" {
		t.Errorf("generation of a default-routing profile = %s, want 449234e8327f (its hash before): every running replica would roll on upgrade", got)
	}
}
