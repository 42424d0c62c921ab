package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

// TestFailoverToAnotherReplica kills the engine of one of a model's two
// replicas while its agent is frozen (so the control plane still routes to
// it): every request, sent by the official client with its retries off,
// is answered by the other replica, and only the first one tries the dead
// engine, which left the routing table at once.
func TestFailoverToAnotherReplica(t *testing.T) {
	c := testcluster.New(t, binary, "30s", `  - name: sim-chat
    source: sim://chat
    scaling: { min: 2, max: 2 }
    profiles:
      - { name: h100, engine: sim, gpu_class: h100-80g, tp: 1, startup_timeout: 1m }
`)
	// One GPU each: one replica per node.
	c.StartAgent(testcluster.NodeSpec{ID: "node01", GPUs: 1})
	c.StartAgent(testcluster.NodeSpec{ID: "node02", GPUs: 1})
	mc := c.ManageClient()
	ctx := context.Background()
	testcluster.WaitFor(t, "two replicas of sim-chat ready", 60*time.Second, func() (bool, string) {
		rs, err := mc.ListReplicas(ctx, &managev1.ListReplicasRequest{Model: "sim-chat"})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		var states []string
		for _, r := range rs.GetReplicas() {
			states = append(states, r.GetId()+"="+r.GetState())
			if r.GetState() == "ready" {
				ready++
			}
		}
		return ready == 2, strings.Join(states, "; ")
	})

	agent := c.Nodes["node01"]
	engines := childEngines(t, agent.Cmd.Process.Pid, "sim-chat")
	if len(engines) != 1 {
		t.Fatalf("node01 runs %d sim-chat engines, want 1", len(engines))
	}
	if err := agent.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = agent.Cmd.Process.Signal(syscall.SIGCONT) })
	if err := syscall.Kill(engines[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	client := openai.NewClient(option.WithBaseURL(c.Client), option.WithAPIKey(c.APIKey), option.WithMaxRetries(0))
	for i := range 10 {
		if _, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "sim-chat",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("are you there?")},
		}); err != nil {
			t.Fatalf("request %d with one engine dead: %v", i, err)
		}
	}
	if n := strings.Count(c.Server.Output(), "replica failed before answering"); n != 1 {
		t.Fatalf("the dead engine was tried %d times over 10 requests, want once (then out of the table):\n%s", n, testcluster.Tail(c.Server.Output(), 20))
	}
}
