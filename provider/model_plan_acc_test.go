package provider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

// planModelTF is a terraform configuration with model tf-roll.
func planModelTF(contextLength, maxOutput int) string {
	return planModelTFRollout(contextLength, maxOutput, "auto")
}

// planModelTFRollout is planModelTF with the model's rollout policy.
func planModelTFRollout(contextLength, maxOutput int, rollout string) string {
	return fmt.Sprintf(`terraform {
  required_providers {
    llmgw = { source = "llmgw/llmgw" }
  }
}

provider "llmgw" {}

resource "llmgw_model" "m" {
  name           = "tf-roll"
  source         = "sim://roll"
  context_length = %d
  max_output     = %d
  rollout        = %q
  scaling        = { min = 2 }
  profiles = [{
    name            = "h100"
    engine          = "sim"
    gpu_class       = "h100-80g"
    tp              = 1
    startup_timeout = "1m"
  }]
}
`, contextLength, maxOutput, rollout)
}

// planModelTFTwoProfiles is planModelTF(8192, 2048) with placement and
// serving edits: a second profile (cpu, with args cpuArgs, tried after
// h100), h100's weight, pricing and scaling.max.
func planModelTFTwoProfiles(cpuArgs string) string {
	return fmt.Sprintf(`terraform {
  required_providers {
    llmgw = { source = "llmgw/llmgw" }
  }
}

provider "llmgw" {}

resource "llmgw_model" "m" {
  name           = "tf-roll"
  source         = "sim://roll"
  context_length = 8192
  max_output     = 2048
  pricing        = { prompt_per_1k = 0.5, completion_per_1k = 1 }
  scaling        = { min = 2, max = 3 }
  profiles = [{
    name            = "h100"
    engine          = "sim"
    gpu_class       = "h100-80g"
    tp              = 1
    weight          = 3
    priority        = 10
    startup_timeout = "1m"
  }, {
    name   = "cpu"
    engine = "sim"
    args   = [%q]
  }]
}
`, cpuArgs)
}

// TestAccModelPlanSaysRollout is issue 18's item 4, with the real terraform
// CLI's plan text as a CI job shows it: a new model's plan says where each
// of its two replicas goes; a max_output change says no running replica
// restarts, and so does an added profile with a weight, pricing and
// scaling.max change, and an args edit of a profile no replica uses; a
// context_length change warns that the two running replicas will be
// replaced, names them and where they run, and says where the control
// plane's dry run expects each one's replacement. With rollout manual the
// same change leaves them serving, stale; setting rollout back to auto
// then names them as replaced, and apply replaces them.
func TestAccModelPlanSaysRollout(t *testing.T) {
	c := newAccCluster(t, declaredModel, twoNodes()...)
	tf := testcluster.NewTerraform(t, c.Cluster)
	write := func(cfg string) {
		if err := os.WriteFile(filepath.Join(tf.Dir, "main.tf"), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(planModelTF(8192, 1024))
	tf.Run(0, "init", "-input=false")
	out, _ := tf.Run(0, "plan", "-input=false", "-no-color")
	if !regexp.MustCompile(`rollout_plan\s+= "new model: 2 replicas to place; expected: profile h100, placed on node0[12] \(gpu [01]\); profile h100, placed on node0[12] \(gpu [01]\)"`).MatchString(out) {
		t.Errorf("the plan of a new model does not say where it goes:\n%s", out)
	}
	tf.Run(0, "apply", "-input=false", "-auto-approve", "-no-color")
	// live is the model's live replicas, each "id" or "id (stale)".
	live := func() []string {
		reps, err := c.ManageClient().ListReplicas(context.Background(), &managev1.ListReplicasRequest{Model: "tf-roll"})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range reps.GetReplicas() {
			if st := r.GetState(); st == "ready" || st == "starting" {
				id := r.GetId()
				if r.GetStale() {
					id += " (stale)"
				}
				out = append(out, id)
			}
		}
		slices.Sort(out)
		return out
	}
	first := live()

	write(planModelTF(8192, 2048))
	out, _ = tf.Run(0, "plan", "-input=false", "-no-color")
	if !strings.Contains(out, `rollout_plan   = "new model: 2 replicas to place`) && !regexp.MustCompile(`~ rollout_plan\s+= "new model: [^"]*" -> "no running replica restarts \(the change keeps what they are built from\)"`).MatchString(out) {
		t.Errorf("the plan of a max_output change does not say that nothing restarts:\n%s", out)
	}
	if strings.Contains(out, "will be replaced") {
		t.Errorf("the plan of a max_output change warns of a replacement:\n%s", out)
	}

	// A profile added, h100's weight, pricing and scaling.max: the running
	// h100 replica is built as before, so nothing restarts and nothing
	// warns; nor does an edit of the cpu profile's args once applied.
	write(planModelTFTwoProfiles("--decode-tps=5"))
	out, _ = tf.Run(0, "plan", "-input=false", "-no-color")
	if !regexp.MustCompile(`rollout_plan\s+= "[^"]*" -> "no running replica restarts \(the change keeps what they are built from\)"`).MatchString(out) {
		t.Errorf("the plan of an added profile, a weight, pricing and scaling.max does not say that nothing restarts:\n%s", out)
	}
	if strings.Contains(out, "Warning") {
		t.Errorf("the plan of a placement-only change warns:\n%s", out)
	}
	tf.Run(0, "apply", "-input=false", "-auto-approve", "-no-color")
	// The replicas list says at once whether the edit made a replica
	// stale; a replacement the reconciler would place (starting, a new id)
	// shows once a pass that began after the edit was stored has ended:
	// of the two passes completed after apply returned, the second did.
	c.AwaitPasses(t, 2, 30*time.Second)
	if now := live(); len(first) != 2 || !slices.Equal(now, first) {
		t.Errorf("live replicas after applying an added profile, a weight, pricing and scaling.max = %v, want %v kept, none stale", now, first)
	}
	write(planModelTFTwoProfiles("--decode-tps=50"))
	out, _ = tf.Run(0, "plan", "-input=false", "-no-color")
	if !regexp.MustCompile(`rollout_plan\s+= "[^"]*" -> "no running replica restarts \(profile cpu changes, which no running replica uses\)"`).MatchString(out) {
		t.Errorf("the plan of an edit of a profile no replica uses does not say that nothing restarts:\n%s", out)
	}
	if strings.Contains(out, "Warning") {
		t.Errorf("the plan of an edit of a profile no replica uses warns:\n%s", out)
	}

	write(planModelTF(16384, 2048))
	out, _ = tf.Run(0, "plan", "-input=false", "-no-color")
	for _, re := range []string{
		`Warning: Model tf-roll: 2 running replicas will be replaced`,
		`context_length\s+8192\s+→\s+16384`,
		`rollout_plan\s+= "[^"]*" -> "new generation: replaces 2 running replicas \((r-\w+) on node0[12] \(gpu [01]\); (r-\w+) on node0[12] \(gpu [01]\)\), each replacement ready before the replica it replaces stops; expected: r-\w+'s replacement with profile h100, placed on node0[12] \(gpu [01]\); r-\w+'s replacement with profile h100, placed on node0[12] \(gpu [01]\)"`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("the plan of a context_length change lacks %s:\n%s", re, out)
		}
	}
	m := regexp.MustCompile(`replaces 2 running replicas \((r-\w+) on [^;]*; (r-\w+) on .*expected: (r-\w+)'s replacement[^;]*; (r-\w+)'s replacement`).FindStringSubmatch(out)
	if oneEach := m != nil && (m[1] == m[3] && m[2] == m[4] || m[1] == m[4] && m[2] == m[3]); !oneEach {
		t.Errorf("the replacements expected do not name the two running replicas, one each: %q", m)
	}

	// With rollout = "manual" the same change leaves the replica serving,
	// stale, until llmgw ctl rollout: the plan says so instead.
	write(planModelTFRollout(16384, 2048, "manual"))
	out, _ = tf.Run(0, "plan", "-input=false", "-no-color")
	for _, re := range []string{
		`Warning: Model tf-roll: 2 running replicas will be stale`,
		`rollout_plan\s+= "[^"]*" -> "new generation: 2 running replicas \(r-\w+ on node0[12] \(gpu [01]\); r-\w+ on node0[12] \(gpu [01]\)\) keep serving the earlier definition, stale, until .llmgw ctl rollout tf-roll. replaces them one at a time`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("the plan of a context_length change with rollout manual lacks %s:\n%s", re, out)
		}
	}
	if strings.Contains(out, "will be replaced") {
		t.Errorf("with rollout manual the plan still says the replica will be replaced:\n%s", out)
	}
	// Applying it stores the edit and returns at once: the stale replica
	// serving is what a manual rollout promises, so apply does not wait for
	// a replacement the control plane will not place (it used to, until
	// rollout_timeout).
	out, took := tf.Run(0, "apply", "-input=false", "-auto-approve", "-no-color")
	if !strings.Contains(out, "Apply complete!") || took > time.Minute {
		t.Errorf("apply of a manual-rollout edit took %s:\n%s", took, out)
	}

	// Setting rollout back to auto releases the held rollout: the plan
	// names the two stale replicas as replaced and warns, and apply waits
	// until replicas of the new definition serve in their place.
	held := live()
	write(planModelTFRollout(16384, 2048, "auto"))
	out, _ = tf.Run(0, "plan", "-input=false", "-no-color")
	for _, re := range []string{
		`Warning: Model tf-roll: 2 running replicas will be replaced`,
		`rollout manual → auto`,
		`rollout_plan\s+= "[^"]*" -> "rollout manual → auto: replaces 2 running replicas the manual rollout held stale \(r-\w+ on node0[12] \(gpu [01]\); r-\w+ on node0[12] \(gpu [01]\)\), each replacement ready before the replica it replaces stops; expected: r-\w+'s replacement`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("the plan of rollout manual → auto with 2 replicas held stale lacks %s:\n%s", re, out)
		}
	}
	if len(held) != 2 || !strings.HasSuffix(held[0], " (stale)") || !strings.HasSuffix(held[1], " (stale)") {
		t.Errorf("live replicas after the manual-rollout edit = %v, want 2 stale", held)
	}
	tf.Run(0, "apply", "-input=false", "-auto-approve", "-no-color")
	// Apply returns once two current replicas are ready; the last stale
	// one stops at the control plane's next pass.
	testcluster.WaitFor(t, fmt.Sprintf("2 current replicas in place of %v after applying rollout auto", held), 30*time.Second, func() (bool, string) {
		now := live()
		return len(now) == 2 && !slices.ContainsFunc(now, func(id string) bool { return strings.HasSuffix(id, " (stale)") }), fmt.Sprint(now)
	})
	tf.Run(0, "destroy", "-input=false", "-auto-approve", "-no-color")
}
