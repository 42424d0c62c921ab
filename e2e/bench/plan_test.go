package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/testkit/testcluster"
	"github.com/llmgw/llmgw/testkit/tfacc"
)

const (
	tfPlanModels = 200
	tfPlanRuns   = 3
	tfPlanTarget = 5 * time.Second
)

// BenchmarkTerraformPlan200Models times `terraform plan` of a 200-model
// catalog (modules/model-catalog over 200 YAML files) against a real control
// plane, with the real terraform and the provider binary built from this
// repository: with no change, and with one model's profile changed (which
// adds the control plane's placement dry run). Each is the median of three
// runs; a no-change plan with -refresh=false splits Terraform's own work
// from the provider's reads. The models have scaling.min 0, so nothing runs and the cluster stays
// small. It needs TF_ACC, like the acceptance tests.
func BenchmarkTerraformPlan200Models(b *testing.B) {
	tf := newTFBench(b)
	models := filepath.Join(tf.Dir, "models")
	if err := os.MkdirAll(models, 0o750); err != nil {
		b.Fatal(err)
	}
	writeModel := func(i int, decodeTPS string) {
		name := fmt.Sprintf("bench-%03d", i)
		y := fmt.Sprintf("name: %[1]s\naliases: [b%03[2]d]\nsource: sim://%[1]s\nscaling: { min: 0, max: 1, idle_timeout: 5m }\n"+
			"profiles:\n  - name: cpu\n    engine: sim\n    startup_timeout: 1m\n    args: [\"--decode-tps\", %[3]q]\n", name, i, decodeTPS)
		if err := os.WriteFile(filepath.Join(models, name+".yaml"), []byte(y), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	for i := range tfPlanModels {
		writeModel(i, "500")
	}
	here, err := os.Getwd()
	if err != nil {
		b.Fatal(err)
	}
	module, err := filepath.Rel(tf.Dir, filepath.Join(here, "..", "..", "modules", "model-catalog"))
	if err != nil {
		b.Fatal(err)
	}
	root := fmt.Sprintf("module \"catalog\" {\n  source     = %q\n  models_dir = \"${path.module}/models\"\n}\n", module)
	if err := os.WriteFile(filepath.Join(tf.Dir, "main.tf"), []byte(root), 0o600); err != nil {
		b.Fatal(err)
	}

	tfRun(tf, 0, "init", "-input=false")
	apply := tfRun(tf, 0, "apply", "-input=false", "-auto-approve")
	plan := func(want int, extra ...string) time.Duration {
		var runs []time.Duration
		for range tfPlanRuns {
			runs = append(runs, tfRun(tf, want, append([]string{"plan", "-input=false", "-detailed-exitcode"}, extra...)...))
		}
		slices.Sort(runs)
		return runs[len(runs)/2]
	}
	noChange := plan(0)
	noRefresh := plan(0, "-refresh=false")
	writeModel(0, "600")
	oneChange := plan(2)

	verdict := "met"
	if noChange > tfPlanTarget {
		verdict = "MISSED"
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\nterraform plan of a %d-model catalog (modules/model-catalog, real control plane, %s, %s)\n", tfPlanModels, runtime.Version(), time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&out, "%-34s %s\n", "apply (create all, once)", apply.Round(time.Millisecond))
	fmt.Fprintf(&out, "%-34s %s (median of %d)\n", "plan, no change", noChange.Round(time.Millisecond), tfPlanRuns)
	fmt.Fprintf(&out, "%-34s %s (median of %d; the rest of a plan is refreshing state)\n", "plan -refresh=false, no change", noRefresh.Round(time.Millisecond), tfPlanRuns)
	fmt.Fprintf(&out, "%-34s %s (median of %d)\n", "plan, one model's profile changed", oneChange.Round(time.Millisecond), tfPlanRuns)
	fmt.Fprintf(&out, "target: no-change plan ≤ %s: %s\n", tfPlanTarget, verdict)
	fmt.Fprint(os.Stdout, out.String())
	b.ReportMetric(noChange.Seconds(), "plan-no-change-s")
	b.ReportMetric(oneChange.Seconds(), "plan-one-change-s")
}

// newTFBench starts a cluster with one node and a terraform runner for it.
func newTFBench(b *testing.B) *testcluster.Terraform {
	b.Helper()
	tfacc.Require(b)
	llmgw, err := testcluster.Build(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	c := testcluster.New(b, llmgw, "10s", "  []\n")
	c.StartAgent(testcluster.NodeSpec{ID: "node01", GPUs: 8})
	return testcluster.NewTerraform(b, c)
}

// tfRun runs terraform and returns how long it took.
func tfRun(tf *testcluster.Terraform, want int, args ...string) time.Duration {
	_, took := tf.Run(want, args...)
	return took
}
