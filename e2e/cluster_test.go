package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/sim/simhw"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

const testModels = `  - name: sim-chat
    aliases: [chat]
    source: sim://chat
    context_length: 4096
    scaling: { min: 1, max: 1 }
    profiles:
      - { name: h100, engine: sim, gpu_class: h100-80g, tp: 1, startup_timeout: 1m }
  - name: sim-2node
    source: sim://2node
    context_length: 4096
    scaling: { min: 1, max: 1 }
    profiles:
      - { name: x2, engine: sim, gpu_class: h100-80g, tp: 2, nodes: 2, startup_timeout: 1m }
`

func active(name string) simhw.SimAdapter {
	return simhw.SimAdapter{Name: name, Ports: []simhw.SimPort{{State: "ACTIVE", RateGbps: 200}}}
}

// TestCluster runs one control plane and four agents as separate processes
// over real mutual TLS and checks the client API with the official OpenAI
// Go client.
func TestCluster(t *testing.T) {
	c := testcluster.New(t, binary, "10s", testModels)
	c.StartAgent(testcluster.NodeSpec{ID: "node01", Fabrics: "fabrics: [{name: ib-a, adapters: [mlx5_0]}]", Adapters: []simhw.SimAdapter{active("mlx5_0")}})
	c.StartAgent(testcluster.NodeSpec{ID: "node02", Fabrics: "fabrics: [{name: ib-a, adapters: [mlx5_0]}]", Adapters: []simhw.SimAdapter{active("mlx5_0")}})
	c.StartAgent(testcluster.NodeSpec{ID: "node03"})
	// node04 declares two adapters for ib-b but its sysfs has only one.
	c.StartAgent(testcluster.NodeSpec{ID: "node04", Fabrics: "fabrics: [{name: ib-b, adapters: [mlx5_0, mlx5_1]}]", Adapters: []simhw.SimAdapter{active("mlx5_0")}})

	mc := c.ManageClient()
	ctx := context.Background()
	testcluster.WaitFor(t, "both models serving", 90*time.Second, func() (bool, string) {
		ms, err := mc.ListModels(ctx, &managev1.ListModelsRequest{})
		if err != nil {
			return false, err.Error()
		}
		var states []string
		ok := true
		for _, m := range ms.GetModels() {
			states = append(states, m.GetName()+"="+m.GetStatus().GetState()+" "+m.GetStatus().GetMessage())
			ok = ok && m.GetStatus().GetState() == "serving"
		}
		return ok && len(ms.GetModels()) == 2, strings.Join(states, "; ")
	})

	client := openai.NewClient(option.WithBaseURL(c.Client), option.WithAPIKey(c.APIKey), option.WithMaxRetries(0))

	t.Run("health and ready", func(t *testing.T) {
		base := strings.TrimSuffix(c.Client, "/v1")
		for _, path := range []string{"/health", "/ready"} {
			resp, err := http.Get(base + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s = %d", path, resp.StatusCode)
			}
		}
	})

	t.Run("models list", func(t *testing.T) {
		page, err := client.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range page.Data {
			ids = append(ids, m.ID)
		}
		if strings.Join(ids, ",") != "sim-2node,sim-chat" {
			t.Fatalf("models = %v", ids)
		}
	})

	t.Run("chat through an alias", func(t *testing.T) {
		resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:     "chat",
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello there cluster")},
			MaxTokens: openai.Int(12),
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Choices) != 1 || resp.Choices[0].Message.Content == "" {
			t.Fatalf("empty completion: %+v", resp)
		}
		if resp.Usage.CompletionTokens != 12 || resp.Usage.PromptTokens == 0 {
			t.Fatalf("usage = %+v, want 12 completion tokens", resp.Usage)
		}
	})

	t.Run("chat streaming", func(t *testing.T) {
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:         "sim-chat",
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("stream to me")},
			MaxTokens:     openai.Int(8),
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		acc := openai.ChatCompletionAccumulator{}
		chunks := 0
		for stream.Next() {
			acc.AddChunk(stream.Current())
			chunks++
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if chunks < 8 || acc.Choices[0].Message.Content == "" {
			t.Fatalf("got %d chunks, content %q", chunks, acc.Choices[0].Message.Content)
		}
		if acc.Usage.CompletionTokens != 8 {
			t.Fatalf("stream usage = %+v", acc.Usage)
		}
	})

	t.Run("embeddings", func(t *testing.T) {
		resp, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{
			Model: "sim-chat",
			Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"one", "two"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Data) != 2 || len(resp.Data[0].Embedding) == 0 {
			t.Fatalf("embeddings = %+v", resp.Data)
		}
	})

	t.Run("unknown model is a 404 model_not_found", func(t *testing.T) {
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "no-such-model",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) {
			t.Fatalf("want an API error, got %v", err)
		}
		if apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" {
			t.Fatalf("got %d %q", apiErr.StatusCode, apiErr.Code)
		}
	})

	t.Run("bad key is a 401", func(t *testing.T) {
		bad := openai.NewClient(option.WithBaseURL(c.Client), option.WithAPIKey("llmgw-not-a-key"), option.WithMaxRetries(0))
		_, err := bad.Models.List(ctx)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized {
			t.Fatalf("want 401, got %v", err)
		}
	})

	t.Run("two-node replica serves with only rank 0 listening", func(t *testing.T) {
		rs, err := mc.ListReplicas(ctx, &managev1.ListReplicasRequest{Model: "sim-2node"})
		if err != nil {
			t.Fatal(err)
		}
		var rep *managev1.Replica
		for _, r := range rs.GetReplicas() {
			if r.GetState() == "ready" {
				rep = r
			}
		}
		if rep == nil || len(rep.GetShards()) != 2 {
			t.Fatalf("no ready two-shard replica: %v", rs.GetReplicas())
		}
		if rep.GetFabric() != "ib-a" {
			t.Fatalf("replica fabric = %q, want ib-a (the only fabric with two nodes in service)", rep.GetFabric())
		}
		r0, r1 := rep.GetShards()[0], rep.GetShards()[1]
		if r0.GetEndpoint() == "" || r1.GetEndpoint() != "" {
			t.Fatalf("endpoints: rank0 %q rank1 %q; want only rank 0", r0.GetEndpoint(), r1.GetEndpoint())
		}
		// The worker's engine process listens on nothing; rank 0's does.
		for node, want := range map[string]bool{r1.GetNode(): false, r0.GetNode(): true} {
			engines := testcluster.EngineChildren(t, c.Nodes[node].Cmd.Process.Pid, "sim-2node")
			if len(engines) == 0 {
				t.Fatalf("no sim-2node engine process under the agent of %s", node)
			}
			listening := false
			for _, pid := range engines {
				if ports := listeningPorts(t, pid); len(ports) > 0 {
					listening = true
					if !want {
						t.Fatalf("worker %s: engine %d listens on %v", node, pid, ports)
					}
				}
			}
			if want && !listening {
				t.Fatalf("rank 0 on %s: no engine listens", node)
			}
		}
		resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "sim-2node",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("across two nodes")},
		})
		if err != nil || resp.Choices[0].Message.Content == "" {
			t.Fatalf("two-node replica did not answer: %v", err)
		}
	})

	t.Run("a declared adapter missing from sysfs takes the fabric out of service", func(t *testing.T) {
		n, err := mc.GetNode(ctx, &managev1.GetNodeRequest{Id: "node04"})
		if err != nil {
			t.Fatal(err)
		}
		if len(n.GetFabrics()) != 1 || n.GetFabrics()[0].GetInService() {
			t.Fatalf("node04 fabrics = %v; want ib-b out of service", n.GetFabrics())
		}
		if p := strings.Join(n.GetFabrics()[0].GetProblems(), "; "); !strings.Contains(p, "mlx5_1") {
			t.Fatalf("problems %q do not name the missing adapter", p)
		}
		if !strings.Contains(c.Nodes["node04"].Output(), "mlx5_1") {
			t.Fatalf("the agent's log does not name the missing adapter:\n%s", testcluster.Tail(c.Nodes["node04"].Output(), 20))
		}
	})

	t.Run("an agent whose certificate names another node is refused", func(t *testing.T) {
		imp := c.StartAgent(testcluster.NodeSpec{ID: "node09", CertFor: "node01-imposter"})
		testcluster.WaitFor(t, "the refusal in both logs", 30*time.Second, func() (bool, string) {
			srv := c.Server.Output()
			ok := strings.Contains(srv, "agent refused") && strings.Contains(srv, `claimed node id \"node09\"`) &&
				strings.Contains(imp.Output(), "refused by control plane")
			return ok, fmt.Sprintf("server log tail:\n%s\nagent log tail:\n%s", testcluster.Tail(srv, 5), testcluster.Tail(imp.Output(), 5))
		})
		if _, err := mc.GetNode(ctx, &managev1.GetNodeRequest{Id: "node09"}); err == nil {
			t.Fatal("the refused node is listed")
		}
	})
}

// TestLostNodeReplicaRebuilt cuts a node off (its agent stops, so its
// heartbeats stop while its engine keeps running): after the grace period
// the node is lost, its replica fails and is rebuilt on the other node, and
// requests are served again. When the agent comes back it stops the engine
// of the replica that was replaced.
func TestLostNodeReplicaRebuilt(t *testing.T) {
	c := testcluster.New(t, binary, "3s", `  - name: sim-chat
    source: sim://chat
    scaling: { min: 1, max: 1 }
    profiles:
      - { name: h100, engine: sim, gpu_class: h100-80g, tp: 1, startup_timeout: 1m }
`)
	c.StartAgent(testcluster.NodeSpec{ID: "node01"})
	c.StartAgent(testcluster.NodeSpec{ID: "node02"})
	mc := c.ManageClient()
	ctx := context.Background()
	readyOn := func() (string, string) { return testcluster.ReadyNode(ctx, mc, "sim-chat") }
	var first string
	testcluster.WaitFor(t, "sim-chat ready", 60*time.Second, func() (bool, string) {
		n, why := readyOn()
		first = n
		return n != "", why
	})
	other := map[string]string{"node01": "node02", "node02": "node01"}[first]
	agent := c.Nodes[first]
	if err := agent.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = agent.Cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	defer resume()

	testcluster.WaitFor(t, first+" lost and the replica rebuilt on "+other, 60*time.Second, func() (bool, string) {
		n, err := mc.GetNode(ctx, &managev1.GetNodeRequest{Id: first})
		if err != nil {
			return false, err.Error()
		}
		on, why := readyOn()
		return n.GetState() == "lost" && on == other, fmt.Sprintf("%s is %s; replica on %q %s", first, n.GetState(), on, why)
	})
	client := openai.NewClient(option.WithBaseURL(c.Client), option.WithAPIKey(c.APIKey), option.WithMaxRetries(0))
	if _, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    "sim-chat",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("still there?")},
	}); err != nil {
		t.Fatalf("request after the rebuild: %v", err)
	}

	resume()
	testcluster.WaitFor(t, first+" back and its replaced engine stopped", 60*time.Second, func() (bool, string) {
		n, err := mc.GetNode(ctx, &managev1.GetNodeRequest{Id: first})
		if err != nil {
			return false, err.Error()
		}
		if engines := testcluster.EngineChildren(t, agent.Cmd.Process.Pid, "sim-chat"); len(engines) > 0 {
			return false, fmt.Sprintf("%s is %s; engine %v still running", first, n.GetState(), engines)
		}
		return n.GetState() == "ready", first + " is " + n.GetState()
	})
}

// TestControlPlaneRestartRebuildsFleetFromAgents restarts the control plane:
// the fleet is rebuilt from what the agents report, the same replicas (the
// same engines) serve again, and nothing is placed anew.
func TestControlPlaneRestartRebuildsFleetFromAgents(t *testing.T) {
	c := testcluster.New(t, binary, "5s", testModels)
	c.StartAgent(testcluster.NodeSpec{ID: "node01", Fabrics: "fabrics: [{name: ib-a, adapters: [mlx5_0]}]", Adapters: []simhw.SimAdapter{active("mlx5_0")}})
	c.StartAgent(testcluster.NodeSpec{ID: "node02", Fabrics: "fabrics: [{name: ib-a, adapters: [mlx5_0]}]", Adapters: []simhw.SimAdapter{active("mlx5_0")}})
	ctx := context.Background()
	serving := func(mc managev1.ManageServiceClient) (map[string]string, string) {
		rs, why := testcluster.ReadyReplicas(ctx, mc, "")
		ready := map[string]string{}
		for _, r := range rs {
			ready[r.GetModel()] = testcluster.IDAt(r)
		}
		return ready, why
	}
	var before map[string]string
	mc := c.ManageClient()
	testcluster.WaitFor(t, "both models serving", 60*time.Second, func() (bool, string) {
		r, why := serving(mc)
		before = r
		return len(r) == 2, why
	})

	c.StopServer()
	c.StartServer()
	mc = c.ManageClient()
	var after map[string]string
	testcluster.WaitFor(t, "both models serving again", 60*time.Second, func() (bool, string) {
		r, why := serving(mc)
		after = r
		return len(r) == 2, why
	})
	for m, id := range before {
		if after[m] != id {
			t.Errorf("%s: replica %s before the restart, %s after; want the same engines adopted", m, id, after[m])
		}
	}
	client := openai.NewClient(option.WithBaseURL(c.Client), option.WithAPIKey(c.APIKey), option.WithMaxRetries(0))
	for _, model := range []string{"chat", "sim-2node"} {
		if _, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    model,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("after the restart")},
		}); err != nil {
			t.Fatalf("%s after the restart: %v", model, err)
		}
	}
	if strings.Contains(c.Server.Output(), "replica placed") {
		t.Fatalf("the restarted control plane placed replicas anew:\n%s", testcluster.Tail(c.Server.Output(), 20))
	}
}

// TestAgentRestartAdoptsEngines restarts an agent the production way (its
// engines keep running): the new agent adopts the running engine, the
// control plane keeps the same replica, and nothing is placed anew.
func TestAgentRestartAdoptsEngines(t *testing.T) {
	c := testcluster.New(t, binary, "10s", `  - name: sim-chat
    source: sim://chat
    scaling: { min: 1, max: 1 }
    profiles:
      - { name: h100, engine: sim, gpu_class: h100-80g, tp: 1, startup_timeout: 1m }
`)
	spec := testcluster.NodeSpec{ID: "node01", KeepEngines: true}
	first := c.StartAgent(spec)
	mc := c.ManageClient()
	ctx := context.Background()
	before := testcluster.WaitReadyReplica(t, mc, "sim-chat", 60*time.Second)
	endpoint := before[strings.Index(before, "@")+1:]

	first.Stop(t)
	resp, err := http.Get("http://" + endpoint + "/health")
	if err != nil {
		t.Fatalf("the engine did not outlive its agent: %v", err)
	}
	resp.Body.Close()

	// The second agent stops its engines on exit, so the test leaves nothing behind.
	spec.KeepEngines = false
	second := c.StartAgent(spec)
	testcluster.WaitFor(t, "the engine adopted", 60*time.Second, func() (bool, string) {
		return strings.Contains(second.Output(), "engine adopted"), testcluster.Tail(second.Output(), 5)
	})
	after := testcluster.WaitReadyReplica(t, mc, "sim-chat", 60*time.Second)
	if after != before {
		t.Fatalf("replica %s before the agent restart, %s after; want the running engine adopted", before, after)
	}
	if n := strings.Count(c.Server.Output(), "replica placed"); n != 1 {
		t.Fatalf("%d placements; the restart must not place anew:\n%s", n, testcluster.Tail(c.Server.Output(), 20))
	}
	client := openai.NewClient(option.WithBaseURL(c.Client), option.WithAPIKey(c.APIKey), option.WithMaxRetries(0))
	if _, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    "sim-chat",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("after the agent restart")},
	}); err != nil {
		t.Fatalf("request through the adopted engine: %v", err)
	}
}
