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
	testcluster.WaitReadyReplicas(t, mc, "sim-chat", 2, 60*time.Second)

	agent := c.Nodes["node01"]
	engines := testcluster.EngineChildren(t, agent.Cmd.Process.Pid, "sim-chat")
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

// TestOnDemandModel: a model at min 0 runs nothing until asked; the first
// request places a replica and, the sim engine starting within
// timeouts.cold_start_wait (5 s), is answered; after idle_timeout with no
// request the replica stops.
func TestOnDemandModel(t *testing.T) {
	c := testcluster.New(t, binary, "30s", `  - name: sim-lazy
    source: sim://lazy
    scaling: { min: 0, max: 1, idle_timeout: 3s }
    profiles:
      - { name: h100, engine: sim, gpu_class: h100-80g, tp: 1, startup_timeout: 1m }
`)
	c.StartAgent(testcluster.NodeSpec{ID: "node01"})
	mc := c.ManageClient()
	ctx := context.Background()
	live := func() (int, string) {
		rs, err := mc.ListReplicas(ctx, &managev1.ListReplicasRequest{Model: "sim-lazy"})
		if err != nil {
			return -1, err.Error()
		}
		n := 0
		var states []string
		for _, r := range rs.GetReplicas() {
			states = append(states, r.GetId()+"="+r.GetState())
			if st := r.GetState(); st == "ready" || st == "starting" || st == "draining" { // running
				n++
			}
		}
		return n, strings.Join(states, "; ")
	}
	testcluster.WaitFor(t, "node01 ready", 30*time.Second, func() (bool, string) {
		n, err := mc.GetNode(ctx, &managev1.GetNodeRequest{Id: "node01"})
		return err == nil && n.GetState() == "ready", "not yet"
	})
	if n, states := live(); n != 0 {
		t.Fatalf("%d replicas of a model nobody asked for: %s", n, states)
	}
	client := openai.NewClient(option.WithBaseURL(c.Client), option.WithAPIKey(c.APIKey), option.WithMaxRetries(0))
	start := time.Now()
	if _, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    "sim-lazy",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("wake up")},
	}); err != nil {
		t.Fatalf("first request to an on-demand model (answered within the cold-start wait): %v", err)
	}
	t.Logf("first request answered after %s, the replica placed and started meanwhile", time.Since(start).Round(time.Millisecond))
	testcluster.WaitFor(t, "the idle replica stopped", 30*time.Second, func() (bool, string) {
		n, states := live()
		return n == 0, states
	})
	if !strings.Contains(c.Server.Output(), "idle for 3s (scaling.idle_timeout)") {
		t.Errorf("the control plane did not log why it stopped the replica:\n%s", testcluster.Tail(c.Server.Output(), 20))
	}
}
