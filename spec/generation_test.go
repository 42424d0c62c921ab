package spec

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestEveryFieldHasARole fails when a field is added to Model or Profile
// without saying whether changing it restarts a running replica (and when a
// role names a field that is gone).
func TestEveryFieldHasARole(t *testing.T) {
	for _, c := range []struct {
		typ   reflect.Type
		roles map[string]fieldRole
	}{{reflect.TypeFor[Model](), modelRoles}, {reflect.TypeFor[Profile](), profileRoles}} {
		names := map[string]bool{}
		for i := range c.typ.NumField() {
			name := c.typ.Field(i).Name
			names[name] = true
			if c.roles[name] == 0 {
				t.Errorf("%s.%s has no role: classify it in spec/model.go (build: its engine process is built from it; placement; serving; start)", c.typ.Name(), name)
			}
			if key, _, _ := strings.Cut(c.typ.Field(i).Tag.Get("json"), ","); c.roles[name] == roleBuild && (key == "" || key == "-") {
				t.Errorf("build field %s.%s has no json name: the generation hashes it by that name", c.typ.Name(), name)
			}
		}
		for name := range c.roles {
			if !names[name] {
				t.Errorf("%s has no field %s, but spec/generation.go gives it a role", c.typ.Name(), name)
			}
		}
	}
}

func twoProfiles() Model {
	return Model{Name: "m", Source: "sim://m", ContextLength: 4096, RoutingProfile: "chat", Scaling: Scaling{Min: 1, Max: 1},
		Profiles: []Profile{
			{Name: "a", Engine: "vllm", GPUClass: "h100-80g", TP: 1, Nodes: 1, Weight: 1, Priority: 10,
				StartupTimeout: DefaultStartupTimeout, MinMemoryGB: 8, MinDiskGB: 40, Labels: map[string]string{"zone": "eu"},
				Args: []string{"--x"}, Env: map[string]string{"A": "1"}, LaunchMode: "mp"},
			{Name: "b", Engine: "llamacpp", Nodes: 1, Weight: 1, StartupTimeout: DefaultStartupTimeout, Args: []string{"--threads", "4"}},
		}}
}

// TestReplicaGenerationIsItsOwnProfile: a replica of profile a is rebuilt
// only when a's build fields or the model's change; adding a profile,
// editing or removing profile b, and every placement or serving field leave
// it alone.
func TestReplicaGenerationIsItsOwnProfile(t *testing.T) {
	base := twoProfiles()
	g := ReplicaGeneration(base, "a")
	if g == "" || g == ReplicaGeneration(base, "b") {
		t.Fatalf("generations of a %q and b %q: want two distinct values", g, ReplicaGeneration(base, "b"))
	}
	keeps := map[string]func(m *Model){
		"added profile":        func(m *Model) { m.Profiles = append(m.Profiles, Profile{Name: "c", Engine: "sim", Nodes: 1}) },
		"b's args":             func(m *Model) { m.Profiles[1].Args = []string{"--threads", "8"} },
		"b's engine":           func(m *Model) { m.Profiles[1].Engine = "sim" },
		"b removed":            func(m *Model) { m.Profiles = m.Profiles[:1] },
		"profile order":        func(m *Model) { m.Profiles[0], m.Profiles[1] = m.Profiles[1], m.Profiles[0] },
		"aliases":              func(m *Model) { m.Aliases = []string{"x"} },
		"routing_profile":      func(m *Model) { m.RoutingProfile = "round-robin" },
		"max_output":           func(m *Model) { m.MaxOutput = 100 },
		"pricing":              func(m *Model) { m.Pricing = &Pricing{PromptPer1K: 1} },
		"scaling.min":          func(m *Model) { m.Scaling.Min = 3 },
		"scaling.max":          func(m *Model) { m.Scaling.Max = 9 },
		"scaling.idle_timeout": func(m *Model) { m.Scaling.IdleTimeout = 5 },
		"rollout":              func(m *Model) { m.Rollout = RolloutManual },
		"a's weight":           func(m *Model) { m.Profiles[0].Weight = 5 },
		"a's priority":         func(m *Model) { m.Profiles[0].Priority = 99 },
		"a's gpu_class":        func(m *Model) { m.Profiles[0].GPUClass = "a100-80g" },
		"a's startup_timeout":  func(m *Model) { m.Profiles[0].StartupTimeout = Duration(1) },
		"a's min_memory_gb":    func(m *Model) { m.Profiles[0].MinMemoryGB = 9 },
		"a's min_disk_gb":      func(m *Model) { m.Profiles[0].MinDiskGB = 41 },
		"a's labels":           func(m *Model) { m.Profiles[0].Labels = map[string]string{"zone": "us"} },
	}
	for name, edit := range keeps {
		m := base.Clone()
		edit(&m)
		if got := ReplicaGeneration(m, "a"); got != g {
			t.Errorf("%s changed the generation of profile a's replicas: they would roll for nothing", name)
		}
	}
	rolls := map[string]func(m *Model){
		"name":           func(m *Model) { m.Name = "n" },
		"source":         func(m *Model) { m.Source = "sim://other" },
		"context_length": func(m *Model) { m.ContextLength = 8192 },
		"a's engine":     func(m *Model) { m.Profiles[0].Engine = "sglang" },
		"a's tp":         func(m *Model) { m.Profiles[0].TP = 2 },
		"a's nodes":      func(m *Model) { m.Profiles[0].Nodes = 2 },
		"a's args":       func(m *Model) { m.Profiles[0].Args = []string{"--y"} },
		"a's env":        func(m *Model) { m.Profiles[0].Env = map[string]string{"A": "2"} },
		"a's launch":     func(m *Model) { m.Profiles[0].LaunchMode = "ray" },
	}
	for name, edit := range rolls {
		m := base.Clone()
		edit(&m)
		if ReplicaGeneration(m, "a") == g {
			t.Errorf("a %s change kept the generation of profile a's replicas: they would not roll", name)
		}
	}
	// An empty list or map is a missing one (the API and Terraform may
	// carry either).
	noArgs, emptyArgs := base.Clone(), base.Clone()
	noArgs.Profiles[0].Args, noArgs.Profiles[0].Env = nil, nil
	emptyArgs.Profiles[0].Args, emptyArgs.Profiles[0].Env = []string{}, map[string]string{}
	if ReplicaGeneration(noArgs, "a") != ReplicaGeneration(emptyArgs, "a") {
		t.Error("empty args or env hash otherwise than none")
	}
	renamed := base.Clone()
	renamed.Profiles[0].Name = "a2"
	if got := ReplicaGeneration(renamed, "a"); got != "" {
		t.Errorf("generation of a profile the model no longer has = %q, want \"\" (its replicas are stale)", got)
	}
}

func TestRolledProfiles(t *testing.T) {
	base := twoProfiles()
	m := base.Clone()
	m.Profiles[1].Args = []string{"--threads", "8"}
	m.Profiles = append(m.Profiles, Profile{Name: "c", Engine: "sim", Nodes: 1})
	m.Pricing = &Pricing{PromptPer1K: 1}
	if got := RolledProfiles(base, m); !slices.Equal(got, []string{"b"}) {
		t.Errorf("RolledProfiles = %v, want [b]", got)
	}
	gone := base.Clone()
	gone.Profiles = gone.Profiles[1:]
	if got := RolledProfiles(base, gone); !slices.Equal(got, []string{"a"}) {
		t.Errorf("RolledProfiles after removing a = %v, want [a]", got)
	}
	placement := base.Clone()
	placement.Profiles[0].Weight, placement.Profiles[0].GPUClass, placement.Scaling.Max = 7, "a100-80g", 5
	if got := RolledProfiles(base, placement); len(got) != 0 {
		t.Errorf("a placement and routing change would roll the replicas of %v", got)
	}
	if Generation(placement) != Generation(base) {
		t.Error("the model's generation changed with a placement and routing change")
	}
	if Generation(m) == Generation(base) {
		t.Error("the model's generation kept through an added profile and an args change")
	}
}

func TestFollowProfile(t *testing.T) {
	running := twoProfiles().Profiles[0]
	catalog := running
	catalog.Weight, catalog.Priority, catalog.StartupTimeout, catalog.GPUClass = 9, 1, Duration(5), "l4"
	catalog.Args = []string{"--new"}
	got := FollowProfile(running, catalog)
	if got.Weight != 9 || got.Priority != 1 || got.GPUClass != "l4" {
		t.Errorf("FollowProfile did not take the catalog's serving and placement fields: %+v", got)
	}
	if got.StartupTimeout != running.StartupTimeout {
		t.Errorf("FollowProfile took the catalog's startup_timeout %v: the replica's agents were given %v", got.StartupTimeout, running.StartupTimeout)
	}
	if !slices.Equal(got.Args, running.Args) {
		t.Errorf("FollowProfile took the catalog's args %v: a running replica's engine was built with %v", got.Args, running.Args)
	}
}

// TestLegacyGeneration: the hash replicas were stamped with before
// generations were per replica is unchanged, so that a control plane
// upgraded under running replicas recognises them as current.
func TestLegacyGeneration(t *testing.T) {
	if got := LegacyGeneration(Model{Name: "m", Profiles: []Profile{{Name: "p", Engine: "sim", Weight: 1}}}); got != "449234e8327f" {
		t.Errorf("legacy generation = %s, want 449234e8327f", got)
	}
}

// TestStale: a replica is stale when its own profile's build fields (or
// the model's) changed since it was stamped, or its profile is gone; an
// edit of another profile, or of a field no replica is built from, leaves
// it current, and so does the whole-model stamp of an earlier release for
// exactly the current definition (and only that).
func TestStale(t *testing.T) {
	m := Model{Name: "m", Source: "sim://m", Profiles: []Profile{{Name: "a", Engine: "sim"}, {Name: "b", Engine: "sim"}}}
	m.Normalize()
	stamp, legacy := ReplicaGeneration(m, "a"), LegacyGeneration(m)
	edit := func(f func(*Model)) Model {
		n := m.Clone()
		f(&n)
		n.Normalize()
		return n
	}
	for _, tt := range []struct {
		name       string
		m          Model
		generation string
		want       bool
	}{
		{"unchanged", m, stamp, false},
		{"another profile's args", edit(func(n *Model) { n.Profiles[1].Args = []string{"--x"} }), stamp, false},
		{"its own weight", edit(func(n *Model) { n.Profiles[0].Weight = 7 }), stamp, false},
		{"its own args", edit(func(n *Model) { n.Profiles[0].Args = []string{"--x"} }), stamp, true},
		{"the model's source", edit(func(n *Model) { n.Source = "sim://n" }), stamp, true},
		{"its profile removed", edit(func(n *Model) { n.Profiles = n.Profiles[1:] }), stamp, true},
		{"an earlier release's stamp of this definition", m, legacy, false},
		{"an earlier release's stamp, another profile edited since", edit(func(n *Model) { n.Profiles[1].Args = []string{"--x"} }), legacy, true},
		{"no stamp", m, "", true},
	} {
		if got := Stale(tt.m, "a", tt.generation); got != tt.want {
			t.Errorf("%s: Stale = %v, want %v", tt.name, got, tt.want)
		}
	}
}
