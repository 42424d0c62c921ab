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
