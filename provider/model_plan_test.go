package provider

import (
	"slices"
	"testing"
	"time"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/spec"
)

// TestExpectedWhere: rollout_plan names each replica of the control
// plane's dry run in turn, a new one by its profile, a replacement by the
// replica it replaces, one that does not place with the reason, and how
// many more were not dry-run; a control plane that dry-runs one replica
// only gets the first named.
func TestExpectedWhere(t *testing.T) {
	ex := &managev1.Explanation{Placed: true, Profile: "h100",
		Profiles: []*managev1.ProfileExplanation{{Profile: "h100", Placed: true, Summary: "placed on node03 (gpu 0)"}},
		Rollout: []*managev1.PlannedReplica{
			{Placed: true, Profile: "h100", Summary: "placed on node03 (gpu 0)"},
			{Replaces: "r-1", Placed: true, Profile: "h100", Summary: "placed on node03 (gpu 1)"},
			{Replaces: "r-2", Summary: "profile h100: no node has 1 free h100-80g GPU"},
		},
		RolloutMore: 2,
	}
	want := "expected: profile h100, placed on node03 (gpu 0); r-1's replacement with profile h100, placed on node03 (gpu 1); " +
		"r-2's replacement: no node can hold it then (profile h100: no node has 1 free h100-80g GPU); 2 more replicas not dry-run"
	if got := expectedWhere(ex, true, "the first replacement"); got != want {
		t.Errorf("expectedWhere =\n%s\nwant\n%s", got, want)
	}
	ex.Rollout, ex.RolloutMore = nil, 0
	if got, want := expectedWhere(ex, true, "the first replacement"), "the first replacement is expected with profile h100, placed on node03 (gpu 0)"; got != want {
		t.Errorf("expectedWhere without a rollout dry run = %q, want %q", got, want)
	}
	if got := expectedWhere(ex, false, "the first"); got != `where the first goes is not dry-run (placement_check = "off", or a value known only at apply)` {
		t.Errorf("expectedWhere without a dry run = %q", got)
	}
}

// TestRolledReplicas: adding a profile replaces no replica stamped with
// its own profile's generation, but does replace one still carrying the
// whole-model stamp of an earlier release (a control plane of that
// release, whose replicas report it in model_generation alone), as that
// release rolls it; an args edit of its own profile replaces both kinds.
func TestRolledReplicas(t *testing.T) {
	old := spec.Model{Name: "m", Source: "sim://m", Profiles: []spec.Profile{{Name: "a", Engine: "sim"}}}
	old.Normalize()
	added := old.Clone()
	added.Profiles = append(added.Profiles, spec.Profile{Name: "b", Engine: "sim", Args: []string{"--x"}})
	added.Normalize()
	edited := old.Clone()
	edited.Profiles[0].Args = []string{"--y"}
	edited.Normalize()
	reps := []*managev1.Replica{
		{Id: "r-new", Profile: "a", State: "ready", ReplicaGeneration: spec.ReplicaGeneration(old, "a"), ModelGeneration: spec.Generation(old)},
		{Id: "r-restamp-pending", Profile: "a", State: "ready", ReplicaGeneration: spec.LegacyGeneration(old), ModelGeneration: spec.Generation(old)},
		{Id: "r-old-server", Profile: "a", State: "starting", ModelGeneration: spec.LegacyGeneration(old)},
		{Id: "r-failed", Profile: "a", State: "failed", ModelGeneration: spec.LegacyGeneration(old)},
	}
	for _, tt := range []struct {
		name       string
		m          spec.Model
		want       []string
		wantLegacy bool
	}{
		{"a profile added", added, []string{"r-restamp-pending on ", "r-old-server on "}, true},
		{"its own args", edited, []string{"r-new on ", "r-restamp-pending on ", "r-old-server on "}, true},
		{"nothing", old, nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			running, _, anyLive, anyLegacy := rolledReplicas(reps, old, tt.m, spec.RolledProfiles(old, tt.m))
			if !anyLive || anyLegacy != tt.wantLegacy || !slices.Equal(running, tt.want) {
				t.Fatalf("rolledReplicas = %q, live %v, legacy %v; want %q, legacy %v", running, anyLive, anyLegacy, tt.want, tt.wantLegacy)
			}
		})
	}
}

// TestRolledReplicasStaleBefore: a replica already stale before the change
// (a manual rollout holds it on an earlier definition of its profile) is
// judged as the control plane judges it (spec.Stale, which Entry.Stale is;
// TestEntryStaleIsSpecStale in runtime/models): setting
// its profile back to what it was placed with makes it current, so it is
// not replaced; another edit of its profile leaves it stale, not this
// change's doing, so it is named as already stale and not as replaced.
// A replica current before the change is replaced by either edit, also
// one the control plane holds current (Replica.stale false) whose stamp
// the provider cannot reproduce: "stale before" is the control plane's
// verdict, and such a replica is never taken as already stale.
func TestRolledReplicasStaleBefore(t *testing.T) {
	placed := spec.Model{Name: "m", Source: "sim://m", Rollout: spec.RolloutManual, Profiles: []spec.Profile{{Name: "a", Engine: "sim", Args: []string{"--y"}}}}
	placed.Normalize()
	old := placed.Clone() // edited since r-held was placed; the rollout is held
	old.Profiles[0].Args = []string{"--z"}
	old.Normalize()
	again := placed.Clone()
	again.Profiles[0].Args = []string{"--w"}
	again.Normalize()
	reps := []*managev1.Replica{
		{Id: "r-held", Profile: "a", State: "ready", Stale: true, ReplicaGeneration: spec.ReplicaGeneration(placed, "a"), ModelGeneration: spec.ReplicaGeneration(placed, "a")},
		{Id: "r-current", Profile: "a", State: "ready", ReplicaGeneration: spec.ReplicaGeneration(old, "a"), ModelGeneration: spec.Generation(old)},
		// Current by the control plane, but stamped with a hash the
		// provider does not reproduce from old (a build field newer than
		// the provider, or drifted state).
		{Id: "r-unmatched", Profile: "a", State: "ready", ReplicaGeneration: "0123456789ab", ModelGeneration: spec.Generation(old)},
	}
	for _, tt := range []struct {
		name          string
		m             spec.Model
		want, already []string
	}{
		{"set back to what r-held was placed with", placed, []string{"r-current on ", "r-unmatched on "}, nil},
		{"edited again", again, []string{"r-current on ", "r-unmatched on "}, []string{"r-held on "}},
		{"nothing", old, nil, []string{"r-held on "}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			running, already, _, _ := rolledReplicas(reps, old, tt.m, spec.RolledProfiles(old, tt.m))
			if !slices.Equal(running, tt.want) || !slices.Equal(already, tt.already) {
				t.Fatalf("rolledReplicas = %q, already stale %q; want %q, %q", running, already, tt.want, tt.already)
			}
		})
	}
}

// TestKeepsGeneration: the plan keeps the generation only when neither
// this release's hash (what each profile's replicas are built from) nor an
// earlier release's whole-model hash changes, whichever the prior value
// came from: plan and apply may reach control planes of different releases.
// A gpu_class edit changes only the whole-model hash; a weight edit
// neither; an args edit both.
func TestKeepsGeneration(t *testing.T) {
	old := spec.Model{Name: "m", Source: "sim://m", Profiles: []spec.Profile{{Name: "a", Engine: "sim"}}}
	old.Normalize()
	placed := old.Clone()
	placed.Profiles[0].GPUClass = "h100-80g"
	timed := old.Clone()
	timed.Profiles[0].StartupTimeout = spec.Duration(time.Minute)
	added := old.Clone()
	added.Profiles = append(added.Profiles, spec.Profile{Name: "b", Engine: "sim"})
	added.Normalize()
	weighed := old.Clone()
	weighed.Profiles[0].Weight = 5
	built := old.Clone()
	built.Profiles[0].Args = []string{"--x"}
	if spec.Generation(placed) != spec.Generation(old) || spec.LegacyGeneration(placed) == spec.LegacyGeneration(old) {
		t.Fatal("the test needs a gpu_class edit to change the whole-model hash only")
	}
	for _, tt := range []struct {
		name string
		m    spec.Model
		want bool
	}{
		{"gpu_class", placed, false},
		{"startup_timeout", timed, false},
		{"a profile added", added, false},
		{"args", built, false},
		{"weight", weighed, true},
		{"nothing", old.Clone(), true},
	} {
		if got := keepsGeneration(old, tt.m); got != tt.want {
			t.Errorf("%s: keepsGeneration = %v, want %v", tt.name, got, tt.want)
		}
	}
}
