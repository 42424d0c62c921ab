// Package modelcatalog_test runs the model-catalog module with the real
// terraform CLI and the provider binary built from this repository against a
// real control plane and agent (testkit/testcluster). It runs under TF_ACC,
// like the provider's acceptance tests.
package modelcatalog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/testkit/testcluster"
	"github.com/llmgw/llmgw/testkit/tfacc"
)

// modelYAML is a model file as `llmgw ctl model add -f` reads it: a CPU sim
// profile, durations spelled as the control plane does not ("90s"), and
// optional keys (routing_profile, context_length, gpu_class, labels) left
// out, so an empty plan after apply shows the module maps both right.
func modelYAML(name, decodeTPS string) string {
	return fmt.Sprintf(`# %[1]s: a simulated chat model.
name: %[1]s
aliases: [%[1]s-alias]
source: sim://%[1]s
scaling: { min: 1, max: 1, idle_timeout: 90s }
profiles:
  - name: cpu
    engine: sim
    startup_timeout: 90s
    args: ["--decode-tps", %[2]q]
`, name, decodeTPS)
}

// TestModule walks a catalog repository's life: two files are applied and
// serve; removing a file plans exactly one destroy; a profile change rolls a
// new generation; a file with an unknown key, two files naming one model and
// an empty directory are refused with a message naming the files. After every
// apply the next plan is empty.
func TestModule(t *testing.T) {
	h := newHarness(t)
	models := filepath.Join(h.dir, "models")
	if err := os.MkdirAll(models, 0o750); err != nil {
		t.Fatal(err)
	}
	write := func(file, content string) {
		if err := os.WriteFile(filepath.Join(models, file), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	remove := func(file string) {
		if err := os.Remove(filepath.Join(models, file)); err != nil {
			t.Fatal(err)
		}
	}
	h.writeRoot(`module "catalog" {
  source     = %q
  models_dir = "${path.module}/models"
}

output "names" { value = module.catalog.names }
output "generations" { value = module.catalog.generations }
`)
	h.tf(0, "init", "-input=false")

	gens := map[string]string{}
	steps := []struct {
		name     string
		edit     func()
		wantPlan map[string]string // resource address (without the module prefix) => actions
		wantErr  *regexp.Regexp    // the plan fails with this
		check    func(t *testing.T)
	}{
		{
			name: "two files are created and serve",
			edit: func() { write("a.yaml", modelYAML("tf-a", "1000")); write("b.yaml", modelYAML("tf-b", "1000")) },
			wantPlan: map[string]string{
				`llmgw_model.this["tf-a"]`: "create",
				`llmgw_model.this["tf-b"]`: "create",
			},
			check: func(t *testing.T) {
				h.expectServing(t, "tf-a")
				h.expectServing(t, "tf-b")
				if got := h.outputList("names"); !slices.Equal(got, []string{"tf-a", "tf-b"}) {
					t.Errorf("output names = %v, want [tf-a tf-b]", got)
				}
				gens = h.outputMap("generations")
			},
		},
		{
			name:     "a removed file plans one destroy",
			edit:     func() { remove("b.yaml") },
			wantPlan: map[string]string{`llmgw_model.this["tf-b"]`: "delete"},
			check: func(t *testing.T) {
				_, err := h.manage.GetModel(context.Background(), &managev1.GetModelRequest{Name: "tf-b"})
				if status.Code(err) != codes.NotFound {
					t.Errorf("tf-b after destroy: err = %v, want NotFound", err)
				}
				h.expectServing(t, "tf-a")
				if got := h.outputMap("generations"); got["tf-a"] != gens["tf-a"] {
					t.Errorf("tf-a's generation changed from %s to %s though tf-a did not", gens["tf-a"], got["tf-a"])
				}
			},
		},
		{
			name:     "a profile change rolls a new generation",
			edit:     func() { write("a.yaml", modelYAML("tf-a", "2000")) },
			wantPlan: map[string]string{`llmgw_model.this["tf-a"]`: "update"},
			check: func(t *testing.T) {
				now := h.outputMap("generations")
				if now["tf-a"] == "" || now["tf-a"] == gens["tf-a"] {
					t.Fatalf("tf-a's generation = %q after the profile change, want a new one (was %q)", now["tf-a"], gens["tf-a"])
				}
				h.expectReadyReplica(t, "tf-a", now["tf-a"])
			},
		},
		{
			name: "an unknown key is refused naming file and key",
			edit: func() {
				write("c.yaml", "name: tf-c\nscaling: { min: 0, mx: 1 }\nprofiles:\n  - { name: cpu, engine: sim }\n")
			},
			wantErr: regexp.MustCompile(`c\.yaml:\s+unknown\s+key\s+scaling\.mx`),
		},
		{
			name:    "two files naming one model are refused naming both",
			edit:    func() { remove("c.yaml"); write("d.yaml", modelYAML("tf-a", "2000")) },
			wantErr: regexp.MustCompile(`Model tf-a is defined in more than one file of\s+./models:\s+a\.yaml,\s+d\.yaml`),
		},
		{
			name:    "an empty directory is refused unless allowed",
			edit:    func() { remove("a.yaml"); remove("d.yaml") },
			wantErr: regexp.MustCompile(`holds\s+no\s+\*\.yaml\s+file`),
		},
	}
	for _, s := range steps {
		ok := t.Run(s.name, func(t *testing.T) {
			s.edit()
			if s.wantErr != nil {
				out := h.tf(1, "plan", "-input=false", "-no-color")
				if !s.wantErr.MatchString(out) {
					t.Fatalf("plan failed, but not with %s:\n%s", s.wantErr, out)
				}
				return
			}
			h.tf(2, "plan", "-input=false", "-detailed-exitcode", "-out=tfplan")
			if got := h.planActions("tfplan"); !maps.Equal(got, s.wantPlan) {
				t.Fatalf("plan = %v, want %v", got, s.wantPlan)
			}
			h.tf(0, "apply", "-input=false", "tfplan")
			s.check(t)
			h.tf(0, "plan", "-input=false", "-detailed-exitcode") // empty after apply
		})
		if !ok {
			break
		}
	}
}

// harness is a cluster, a terraform working directory and the environment
// terraform runs with: the provider comes from a filesystem mirror holding
// the binary built from this repository, and is configured from LLMGW_*.
type harness struct {
	t       *testing.T
	run     *testcluster.Terraform
	dir     string
	cluster *testcluster.Cluster
	manage  managev1.ManageServiceClient
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	tfacc.Require(t)
	llmgw, err := testcluster.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := testcluster.New(t, llmgw, "10s", "  []\n")
	c.StartAgent(testcluster.NodeSpec{ID: "node01", GPUs: 1})
	tf := testcluster.NewTerraform(t, c)
	return &harness{t: t, run: tf, dir: tf.Dir, cluster: c, manage: c.ManageClient()}
}

// writeRoot writes main.tf from format, given the module's path relative to
// the working directory (a local module source must start with ../).
func (h *harness) writeRoot(format string) {
	h.t.Helper()
	here, err := os.Getwd()
	if err != nil {
		h.t.Fatal(err)
	}
	rel, err := filepath.Rel(h.dir, here)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.dir, "main.tf"), []byte(fmt.Sprintf(format, rel)), 0o600); err != nil {
		h.t.Fatal(err)
	}
}

// tf runs terraform in the working directory and fails the test unless it
// exits with want; it returns the combined output.
func (h *harness) tf(want int, args ...string) string {
	h.t.Helper()
	out, _ := h.run.Run(want, args...)
	return out
}

// planActions reads a saved plan: the address of every resource that
// changes, without the module prefix, with its actions joined by "-".
func (h *harness) planActions(plan string) map[string]string {
	h.t.Helper()
	var p struct {
		ResourceChanges []struct {
			Address string `json:"address"`
			Change  struct {
				Actions []string `json:"actions"`
			} `json:"change"`
		} `json:"resource_changes"`
	}
	if err := json.Unmarshal([]byte(h.tf(0, "show", "-json", plan)), &p); err != nil {
		h.t.Fatalf("reading the plan: %v", err)
	}
	out := map[string]string{}
	for _, rc := range p.ResourceChanges {
		if a := strings.Join(rc.Change.Actions, "-"); a != "no-op" {
			out[strings.TrimPrefix(rc.Address, "module.catalog.")] = a
		}
	}
	return out
}

func (h *harness) output(name string, v any) {
	h.t.Helper()
	if err := json.Unmarshal([]byte(h.tf(0, "output", "-json", name)), v); err != nil {
		h.t.Fatalf("reading output %s: %v", name, err)
	}
}

func (h *harness) outputList(name string) []string {
	var v []string
	h.output(name, &v)
	return v
}

func (h *harness) outputMap(name string) map[string]string {
	var v map[string]string
	h.output(name, &v)
	return v
}

// expectServing checks that apply returned with the model serving: the
// provider waited for the rollout.
func (h *harness) expectServing(t *testing.T, name string) {
	t.Helper()
	m, err := h.manage.GetModel(context.Background(), &managev1.GetModelRequest{Name: name})
	if err != nil {
		t.Fatalf("reading model %s: %v", name, err)
	}
	if st := m.GetStatus(); st.GetState() != "serving" || st.GetReplicasReady() < 1 {
		t.Errorf("model %s after apply: %s with %d ready replicas, want serving with 1", name, st.GetState(), st.GetReplicasReady())
	}
	if m.GetOrigin() != "api" {
		t.Errorf("model %s: origin %q, want api", name, m.GetOrigin())
	}
}

// expectReadyReplica checks that a replica built from the model's current
// definition (of generation, not stale) is ready when apply returns, and
// that the stale replicas go away (the roll ends).
func (h *harness) expectReadyReplica(t *testing.T, name, generation string) {
	t.Helper()
	list := func() []*managev1.Replica {
		reps, err := h.manage.ListReplicas(context.Background(), &managev1.ListReplicasRequest{Model: name})
		if err != nil {
			t.Fatalf("listing replicas of %s: %v", name, err)
		}
		return reps.GetReplicas()
	}
	if !slices.ContainsFunc(list(), func(r *managev1.Replica) bool {
		return !r.GetStale() && r.GetState() == "ready" && r.GetModelGeneration() == generation
	}) {
		t.Fatalf("no ready replica of %s generation %s when apply returned: %v", name, generation, list())
	}
	testcluster.WaitFor(t, "the old generation of "+name+" to stop", 30*time.Second, func() (bool, string) {
		reps := list()
		for _, r := range reps {
			if r.GetStale() {
				return false, fmt.Sprint(reps)
			}
		}
		return true, ""
	})
}
