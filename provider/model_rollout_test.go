package provider

import (
	"strings"
	"testing"

	managev1 "github.com/llmgw/llmgw/api/managev1"
)

// TestRolloutStalledReasons: a not_ready stall reads "is not becoming
// ready" with the control plane's text; a placement stall "cannot make
// progress".
func TestRolloutStalledReasons(t *testing.T) {
	for _, tt := range []struct {
		reason, wantSummary string
	}{
		{"not_ready", "Rollout of model m is not becoming ready"},
		{"placement", "Rollout of model m cannot make progress"},
	} {
		d := rolloutStalled("m", &managev1.ModelStatus{Stalled: "replica r-1 (profile h100, on node01) not ready after 16s", StalledReason: tt.reason})
		if d.Summary() != tt.wantSummary || !strings.Contains(d.Detail(), "replica r-1 (profile h100, on node01) not ready after 16s") {
			t.Errorf("%s: %q / %q", tt.reason, d.Summary(), d.Detail())
		}
	}
}
