package ctl

import (
	"strings"
	"testing"

	"github.com/llmgw/llmgw/api/managev1"
)

// TestCostText: costs print as plain decimals with four significant digits;
// issue 18 saw 3.3e-05 in ctl usage.
func TestCostText(t *testing.T) {
	for _, tt := range []struct {
		in   float64
		want string
	}{
		{0, "0"}, {3.3e-05, "0.000033"}, {0.000033000000000000004, "0.000033"}, {1.23456, "1.235"},
		{12.5, "12.5"}, {12345.678, "12346"}, {0.1 + 0.2, "0.3"}, {-0.0042, "-0.0042"}, {7, "7"},
	} {
		if got := costText(tt.in); got != tt.want {
			t.Errorf("costText(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestUsageCostsPlain: ctl usage prints a small cost as 0.000033.
func TestUsageCostsPlain(t *testing.T) {
	var b strings.Builder
	if err := writeUsageTotals(&b, []*managev1.UsageTotal{{Project: "team", Model: "mine", Requests: 1, PromptTokens: 9, CompletionTokens: 12, Cost: 3.3e-05}}, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), " 0.000033\n") || strings.Contains(b.String(), "e-") {
		t.Errorf("ctl usage printed:\n%s", b.String())
	}
}

// TestNodesGPUErrorOnce: a node whose reason already carries the GPU
// discovery error prints it once.
func TestNodesGPUErrorOnce(t *testing.T) {
	e := "GPU discovery failed: nvidia-smi not found at /usr/bin/nvidia-smi"
	var b strings.Builder
	if err := writeNodes(&b, []*managev1.Node{{Id: "cpu-01", State: "ready", Reason: e, GpuError: e, Declared: true}}, testNow); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "nvidia-smi not found"); n != 1 {
		t.Errorf("ctl nodes prints the GPU error %d times:\n%s", n, b.String())
	}
}

// TestUsageEmptyHint: ctl usage with nothing to show says when rows appear.
func TestUsageEmptyHint(t *testing.T) {
	env, _ := startManage(t)
	_, errOut := mustCtl(t, env, exitOK, "usage")
	if !strings.Contains(errOut, "no usage in this window; a request's row is written about half a second after it ends") {
		t.Errorf("ctl usage on an empty store said %q on stderr", errOut)
	}
}
