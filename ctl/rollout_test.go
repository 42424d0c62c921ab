package ctl

import (
	"strings"
	"testing"
)

const blockedReplica = "replica r-1 of model sim-2node (on llmgw-node02, llmgw-node01) cannot move: profile x2: needs 2 nodes in one fabric; fabric ib-a has 1 feasible node of 2 (llmgw-node01); rejected llmgw-node02: not ready: draining"

// TestDrainThatCannotFinish: the control plane refuses a drain whose
// replica cannot move; ctl prints its reason and fails. --force drains
// anyway and lists what stays; ctl nodes then says why the drain is
// blocked.
func TestDrainThatCannotFinish(t *testing.T) {
	f := cannedManage()
	f.nodes[1].DrainBlocked = blockedReplica
	env := startServer(t, f)
	code, out, errOut := runCtl(t, env, "drain", "llmgw-node02")
	if code != 1 || out != "" || !strings.Contains(errOut, "draining node llmgw-node02: node llmgw-node02 cannot be drained") || !strings.Contains(errOut, blockedReplica) {
		t.Errorf("drain: exit %d, stdout %q, stderr %q; want exit 1 naming the replica", code, out, errOut)
	}
	code, out, errOut = runCtl(t, env, "drain", "llmgw-node02", "--force")
	want := "draining llmgw-node02: 1 replica to move; watch with llmgw ctl nodes\n  stays until a node can take it: " + blockedReplica + "\n"
	if code != 0 || out != want {
		t.Errorf("drain --force: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	if got := f.drains[len(f.drains)-1]; !got.GetForce() {
		t.Errorf("drain --force asked %v", got)
	}
	_, out, _ = runCtl(t, env, "nodes")
	if !strings.Contains(out, "llmgw-node02: drain blocked: "+blockedReplica+"\n") {
		t.Errorf("ctl nodes does not say why the drain is blocked:\n%s", out)
	}
}

// TestModelsShowStuckRollout is issue 18's tp 1 → 9: the old replica keeps
// the model serving, and ctl models and ctl model get say the new
// generation is stuck and why.
func TestModelsShowStuckRollout(t *testing.T) {
	f := cannedManage()
	stalled := "generation 9a1b cannot be placed: no node can hold profile cpu: llmgw-node01: 7 free GPUs, needs 9; replica r-1 (stale, profile cpu, on llmgw-node01) keeps serving until it can"
	st := f.models[0].Status
	st.Stalled, st.ReplicasOutdated = stalled, 1
	env := startServer(t, f)
	_, out, _ := runCtl(t, env, "models")
	for _, want := range []string{"serving, rollout stuck", "qwen2.5-coder-3b-instruct: rollout stuck: " + stalled} {
		if !strings.Contains(out, want) {
			t.Errorf("ctl models lacks %q:\n%s", want, out)
		}
	}
	_, out, _ = runCtl(t, env, "model", "get", "qwen2.5-coder-3b-instruct")
	for _, want := range []string{"# rollout: 1 replica of an older generation or on a draining node still serving until replaced\n", "# rollout stuck: " + stalled + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("ctl model get lacks %q:\n%s", want, out)
		}
	}
	st.Stalled = ""
	_, out, _ = runCtl(t, env, "models")
	if !strings.Contains(out, "serving, rolling") {
		t.Errorf("ctl models with an outdated replica and no stall lacks \"serving, rolling\":\n%s", out)
	}
}
