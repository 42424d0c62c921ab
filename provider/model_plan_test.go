package provider

import (
	"testing"

	managev1 "github.com/llmgw/llmgw/api/managev1"
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
