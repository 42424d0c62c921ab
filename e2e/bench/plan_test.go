package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/testkit/testcluster"
	"github.com/llmgw/llmgw/testkit/tfacc"
)

const (
	tfPlanModels      = 200
	tfPlanSmallModels = 20
	tfPlanRuns        = 3
	tfPlanTarget      = 5 * time.Second
)

// BenchmarkTerraformPlan200Models times `terraform plan` of a 200-model
// catalog (modules/model-catalog over 200 YAML files) against a real control
// plane, with the real terraform and the provider binary built from this
// repository: with no change, and with one model's profile changed (which
// adds the control plane's placement dry run). Each is the median of three
// runs; a no-change plan with -refresh=false splits Terraform's own work
// from the provider's reads. The models have scaling.min 0, so nothing runs
// and the cluster stays small. It needs TF_ACC, like the acceptance tests.
//
// The goal is the wall time of the no-change plan. Since the machine is
// shared, each of its runs is paired with a run of a 20-model catalog of
// the same cluster (its own directory and state) right before it, and the
// bench also reports CPU time (terraform and the provider it starts, and
// the control plane's): the cost per model from the difference of the two
// catalogs and the 200/20 ratio (10 when a plan is linear in the catalog
// with nothing fixed, less with a fixed part) say whether a plan scales
// linearly and what a model costs whatever the load.
func BenchmarkTerraformPlan200Models(b *testing.B) {
	tf, cp := newTFBench(b)
	small := tf.In(b.TempDir())
	writeCatalog(b, tf, "bench", tfPlanModels)
	writeCatalog(b, small, "small", tfPlanSmallModels)
	for _, t := range []*testcluster.Terraform{small, tf} {
		tfRun(t, 0, "init", "-input=false")
	}
	tfRun(small, 0, "apply", "-input=false", "-auto-approve")
	apply := tfRun(tf, 0, "apply", "-input=false", "-auto-approve")

	load := loadAvg()
	var big, little []planRun
	for range tfPlanRuns {
		little = append(little, timePlan(b, small, cp, 0))
		big = append(big, timePlan(b, tf, cp, 0))
	}
	noChange, smallPlan := median(big), median(little)
	var noRefresh, oneChange []planRun
	for range tfPlanRuns {
		noRefresh = append(noRefresh, timePlan(b, tf, cp, 0, "-refresh=false"))
	}
	writeModel(b, tf, "bench", 0, "600")
	for range tfPlanRuns {
		oneChange = append(oneChange, timePlan(b, tf, cp, 2))
	}

	verdict := "met"
	if noChange.wall > tfPlanTarget {
		verdict = "MISSED"
	}
	extra := float64(tfPlanModels - tfPlanSmallModels)
	perWall := time.Duration(float64(noChange.wall-smallPlan.wall) / extra)
	perCPU := time.Duration(float64(noChange.cpu-smallPlan.cpu) / extra)
	perCP := time.Duration(float64(noChange.cp-smallPlan.cp) / extra)
	var out strings.Builder
	fmt.Fprintf(&out, "\nterraform plan of a %d-model catalog (modules/model-catalog, real control plane, %s, %s, load average %s)\n", tfPlanModels, runtime.Version(), time.Now().UTC().Format(time.RFC3339), load)
	fmt.Fprintf(&out, "%-38s %s\n", "apply (create all, once)", apply.Round(time.Millisecond))
	fmt.Fprintf(&out, "%-38s %s (median of %d; CPU: terraform+provider / control plane)\n", "", "wall     CPU tf+provider  CPU control plane", tfPlanRuns)
	row := func(what string, r planRun) {
		fmt.Fprintf(&out, "%-38s %-8s %-16s %s\n", what, r.wall.Round(time.Millisecond), r.cpu.Round(time.Millisecond), r.cp.Round(time.Millisecond))
	}
	row(fmt.Sprintf("plan, no change, %d models", tfPlanSmallModels), smallPlan)
	row(fmt.Sprintf("plan, no change, %d models", tfPlanModels), noChange)
	row("plan -refresh=false, no change", median(noRefresh))
	row("plan, one model's profile changed", median(oneChange))
	fmt.Fprintf(&out, "%-38s %-8s %-16s %s\n", "per model (200 against 20)", perWall.Round(10*time.Microsecond), perCPU.Round(10*time.Microsecond), perCP.Round(10*time.Microsecond))
	fmt.Fprintf(&out, "%-38s %-8.2f %.2f (10 is linear with nothing fixed)\n", fmt.Sprintf("ratio %d/%d models", tfPlanModels, tfPlanSmallModels),
		noChange.wall.Seconds()/smallPlan.wall.Seconds(), noChange.cpu.Seconds()/smallPlan.cpu.Seconds())
	fmt.Fprintf(&out, "target: no-change plan of %d models ≤ %s wall: %s\n", tfPlanModels, tfPlanTarget, verdict)
	fmt.Fprint(os.Stdout, out.String())
	b.ReportMetric(noChange.wall.Seconds(), "plan-no-change-s")
	b.ReportMetric(median(oneChange).wall.Seconds(), "plan-one-change-s")
	b.ReportMetric(noChange.cpu.Seconds(), "plan-cpu-s")
	b.ReportMetric(float64(perCPU.Microseconds())/1000, "cpu-ms/model")
}

// planRun is one terraform plan: its wall time, the CPU time of terraform
// and its provider, and the CPU time the control plane spent meanwhile.
type planRun struct{ wall, cpu, cp time.Duration }

// timePlan runs terraform plan in tf's directory and times it.
func timePlan(b *testing.B, tf *testcluster.Terraform, cp int, want int, extra ...string) planRun {
	b.Helper()
	before := procCPU(b, cp)
	_, wall, cpu := tf.RunCPU(want, append([]string{"plan", "-input=false", "-detailed-exitcode"}, extra...)...)
	return planRun{wall: wall, cpu: cpu, cp: procCPU(b, cp) - before}
}

// median is the median of each figure of runs on its own (wall, CPU, the
// control plane's CPU): they may come from different runs.
func median(runs []planRun) planRun {
	pick := func(f func(planRun) time.Duration) time.Duration {
		v := make([]time.Duration, len(runs))
		for i, r := range runs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return planRun{
		wall: pick(func(r planRun) time.Duration { return r.wall }),
		cpu:  pick(func(r planRun) time.Duration { return r.cpu }),
		cp:   pick(func(r planRun) time.Duration { return r.cp }),
	}
}

// procCPU is the CPU time process pid has used (Linux: utime + stime of
// /proc/PID/stat, in the kernel's clock ticks, 100 a second).
func procCPU(b *testing.B, pid int) time.Duration {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatalf("reading the control plane's CPU time: %v", err)
	}
	// The command name, in parentheses, may hold spaces: the fields
	// counted are those after it (utime and stime are fields 14 and 15).
	rest := string(raw[strings.LastIndexByte(string(raw), ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		b.Fatalf("/proc/%d/stat has %d fields after the name, want at least 13", pid, len(f))
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatalf("/proc/%d/stat: %v", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * (time.Second / 100)
}

// loadAvg is the machine's 1-minute load average when the plans start.
func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(raw))[0]
}

// writeCatalog writes n model files named prefix-NNN and a root module
// that reads them with modules/model-catalog into tf's directory.
func writeCatalog(b *testing.B, tf *testcluster.Terraform, prefix string, n int) {
	b.Helper()
	if err := os.MkdirAll(filepath.Join(tf.Dir, "models"), 0o750); err != nil {
		b.Fatal(err)
	}
	for i := range n {
		writeModel(b, tf, prefix, i, "500")
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
}

// writeModel writes model prefix-NNN (alias first letter and NNN) whose one
// profile's engine runs at decodeTPS.
func writeModel(b *testing.B, tf *testcluster.Terraform, prefix string, i int, decodeTPS string) {
	b.Helper()
	name := fmt.Sprintf("%s-%03d", prefix, i)
	y := fmt.Sprintf("name: %[1]s\naliases: [%[4]s%03[2]d]\nsource: sim://%[1]s\nscaling: { min: 0, max: 1, idle_timeout: 5m }\n"+
		"profiles:\n  - name: cpu\n    engine: sim\n    startup_timeout: 1m\n    args: [\"--decode-tps\", %[3]q]\n", name, i, decodeTPS, prefix[:1])
	if err := os.WriteFile(filepath.Join(tf.Dir, "models", name+".yaml"), []byte(y), 0o600); err != nil {
		b.Fatal(err)
	}
}

// newTFBench starts a cluster with one node and returns a terraform runner
// for it and the control plane's process id.
func newTFBench(b *testing.B) (*testcluster.Terraform, int) {
	b.Helper()
	tfacc.Require(b)
	llmgw, err := testcluster.Build(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	c := testcluster.New(b, llmgw, "10s", "  []\n")
	c.StartAgent(testcluster.NodeSpec{ID: "node01", GPUs: 8})
	return testcluster.NewTerraform(b, c), c.Server.Cmd.Process.Pid
}

// tfRun runs terraform and returns how long it took.
func tfRun(tf *testcluster.Terraform, want int, args ...string) time.Duration {
	_, took := tf.Run(want, args...)
	return took
}
