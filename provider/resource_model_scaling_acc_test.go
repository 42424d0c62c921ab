package provider

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/testkit/testcluster"
)

// TestAccModelScalingAboveFleet plans, with the real terraform CLI, a model
// whose scaling.min is above what a fleet of four H100s holds: the plan
// succeeds and warns naming what the fleet can hold, for a new model and
// for a min raised on an applied one (profiles unchanged).
func TestAccModelScalingAboveFleet(t *testing.T) {
	c := newAccCluster(t, "", twoNodes()...)
	tf := testcluster.NewTerraform(t, c.Cluster)
	write := func(min string) {
		t.Helper()
		hcl := strings.Replace(modelHCL("tf-many", `[]`, "", ""), "scaling = { min = 1 }", "scaling = { min = "+min+" }", 1)
		main := "terraform {\n  required_providers {\n    llmgw = { source = \"llmgw/llmgw\" }\n  }\n}\n\nprovider \"llmgw\" {}\n\n" + hcl
		if err := os.WriteFile(filepath.Join(tf.Dir, "main.tf"), []byte(main), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Terraform wraps diagnostics; compare with the line breaks folded.
	flat := func(out string) string { return strings.Join(strings.Fields(out), " ") }
	const summary = "Warning: Model tf-many asks for more replicas than the fleet holds"

	write("1000")
	tf.Run(0, "init", "-input=false")
	out, _ := tf.Run(0, "plan", "-input=false", "-no-color")
	if f := flat(out); !strings.Contains(f, summary) ||
		!strings.Contains(f, "scaling.min 1000: the fleet can hold at most 4 replicas of model tf-many now (4 more with profile h100;") {
		t.Fatalf("plan of a new model with min 1000 did not warn:\n%s", testcluster.Tail(out, 40))
	}

	write("1")
	out, _ = tf.Run(0, "apply", "-auto-approve", "-input=false", "-no-color")
	if strings.Contains(flat(out), summary) {
		t.Fatalf("min 1 warned:\n%s", testcluster.Tail(out, 40))
	}
	write("9")
	out, _ = tf.Run(0, "plan", "-input=false", "-no-color")
	if f := flat(out); !strings.Contains(f, summary) ||
		!strings.Contains(f, "scaling.min 9: the fleet can hold at most 4 replicas of model tf-many now (1 running, 3 more with profile h100;") {
		t.Fatalf("plan raising min to 9 did not warn:\n%s", testcluster.Tail(out, 40))
	}
	write("1")
	tf.Run(0, "destroy", "-auto-approve", "-input=false")
}
