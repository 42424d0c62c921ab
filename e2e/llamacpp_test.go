package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/testkit/gguf"
	"github.com/llmgw/llmgw/testkit/llamacpp"
	"github.com/llmgw/llmgw/testkit/nodejs"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

// openaiNodeVersion is the official openai npm package the Node.js client
// test installs (into a cache outside the checkout, once per machine).
const openaiNodeVersion = "6.30.1"

// llamaServerPIDs returns the pids of the llama-server processes serving
// the GGUF file model, whoever their parent is.
func llamaServerPIDs(t *testing.T, model string) []int {
	t.Helper()
	return testcluster.Processes(t, func(_ int, argv []string) bool {
		i := slices.Index(argv, "--model")
		return filepath.Base(argv[0]) == "llama-server" && i >= 0 && i+1 < len(argv) && argv[i+1] == model
	})
}

// TestLlamaCppEndToEnd runs a real llama-server, built from the llama.cpp
// source node-llama-cpp ships, on a tiny random-weight GGUF the test writes:
// the catalog model is placed on the agent, launched by the llamacpp
// driver, health-checked and routed, and the official OpenAI Go client
// talks to it through the gateway. Then the engine is killed (the shard
// reports its exit and last output and is replaced) and the agent
// restarted (the same llama-server process is adopted).
func TestLlamaCppEndToEnd(t *testing.T) {
	server := llamacpp.Server(t)
	model := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := gguf.Write(model, gguf.Model{}); err != nil {
		t.Fatal(err)
	}
	c := testcluster.New(t, binary, "10s", `  - name: tiny-llama
    source: `+model+`
    context_length: 1024
    scaling: { min: 1, max: 1 }
    profiles:
      - { name: cpu, engine: llamacpp, startup_timeout: 2m }
`)
	spec := testcluster.NodeSpec{ID: "node01", KeepEngines: true, Engines: map[string]string{"llamacpp": server}}
	first := c.StartAgent(spec)
	mc := c.ManageClient()
	ctx := context.Background()

	replica := testcluster.WaitReadyReplica(t, mc, "tiny-llama", 3*time.Minute)
	pids := llamaServerPIDs(t, model)
	if len(pids) != 1 {
		t.Fatalf("llama-server processes for the model: %v, want one", pids)
	}
	client := openai.NewClient(option.WithBaseURL(c.Client), option.WithAPIKey(c.APIKey), option.WithMaxRetries(0))

	t.Run("chat", func(t *testing.T) {
		resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:     "tiny-llama",
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello there")},
			MaxTokens: openai.Int(8),
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Choices) != 1 || resp.Model == "" || resp.Usage.PromptTokens == 0 || resp.Usage.CompletionTokens == 0 || resp.Usage.CompletionTokens > 8 {
			t.Fatalf("completion %+v", resp)
		}
	})

	t.Run("chat streaming with usage", func(t *testing.T) {
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:         "tiny-llama",
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("stream to me")},
			MaxTokens:     openai.Int(8),
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		var acc openai.ChatCompletionAccumulator
		chunks := 0
		for stream.Next() {
			acc.AddChunk(stream.Current())
			chunks++
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if chunks < 2 || len(acc.Choices) != 1 {
			t.Fatalf("%d chunks, choices %+v", chunks, acc.Choices)
		}
		if acc.Usage.PromptTokens == 0 || acc.Usage.CompletionTokens == 0 || acc.Usage.CompletionTokens > 8 {
			t.Fatalf("stream usage %+v", acc.Usage)
		}
	})

	t.Run("completions", func(t *testing.T) {
		resp, err := client.Completions.New(ctx, openai.CompletionNewParams{
			Model:     "tiny-llama",
			Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("the hello")},
			MaxTokens: openai.Int(6),
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Choices) != 1 || resp.Usage.CompletionTokens == 0 || resp.Usage.CompletionTokens > 6 {
			t.Fatalf("completion %+v", resp)
		}
	})

	t.Run("embeddings are not served without --embeddings", func(t *testing.T) {
		// The driver does not pass --embeddings, and llama-server then
		// refuses the endpoint; the gateway passes its answer on.
		_, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{
			Model: "tiny-llama",
			Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"one"}},
		})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotImplemented {
			t.Fatalf("embeddings: %v, want llama-server's 501", err)
		}
	})

	t.Run("tool call answered as a structured call", func(t *testing.T) {
		// The tools reach llama-server, whose Jinja chat template (on by
		// default in this build; the driver passes no --jinja) renders
		// them into the prompt, and whose grammar for the template's
		// <tool_call> format writes the call once it is opened. Random
		// weights would never open one: logit_bias pushes the <tool_call>
		// token (one token of the test model's vocabulary) and a newline,
		// forbids the other whitespace the grammar's "space" allows, and
		// pushes end-of-turn above all, which the grammar forbids until a
		// call is complete. The answer is then a real tool_calls entry
		// that llama-server parsed, not text.
		params := openai.ChatCompletionNewParams{
			Model:     "tiny-llama",
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("weather in Paris?")},
			MaxTokens: openai.Int(16),
		}
		plain, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		params.Tools = []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name:        "get_weather",
			Description: openai.String("the weather in a city"),
			Parameters: shared.FunctionParameters{
				"type":                 "object",
				"properties":           map[string]any{"city": map[string]any{"type": "string", "enum": []string{"Paris"}}},
				"required":             []string{"city"},
				"additionalProperties": false,
			},
		})}
		params.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
		params.ParallelToolCalls = openai.Bool(false)
		params.LogitBias = gguf.ToolCallBias()
		params.MaxTokens = openai.Int(300)
		resp, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Usage.PromptTokens < plain.Usage.PromptTokens+50 {
			t.Fatalf("prompt tokens %d with the tool, %d without: the tool did not reach the engine's template", resp.Usage.PromptTokens, plain.Usage.PromptTokens)
		}
		if len(resp.Choices) != 1 || len(resp.Choices[0].Message.ToolCalls) != 1 {
			t.Fatalf("choices %+v: want one answer with one tool call", resp.Choices)
		}
		call := resp.Choices[0].Message.ToolCalls[0]
		var args struct {
			City string `json:"city"`
		}
		if call.Function.Name != "get_weather" || json.Unmarshal([]byte(call.Function.Arguments), &args) != nil || args.City != "Paris" || call.ID == "" {
			t.Fatalf("tool call %+v: want get_weather with city Paris", call)
		}
		if resp.Choices[0].FinishReason != "tool_calls" {
			t.Errorf("finish reason %q, want tool_calls", resp.Choices[0].FinishReason)
		}
		t.Logf("prompt tokens %d with the tool, %d without; call %s(%s), %d completion tokens", resp.Usage.PromptTokens, plain.Usage.PromptTokens, call.Function.Name, call.Function.Arguments, resp.Usage.CompletionTokens)
	})

	t.Run("openai npm client under node", func(t *testing.T) {
		dir := nodejs.Install(t, "openai@"+openaiNodeVersion)
		out := nodejs.Run(t, filepath.Join("testdata", "openai-node.cjs"),
			"OPENAI_NODE_DIR="+dir, "OPENAI_BASE_URL="+c.Client, "OPENAI_API_KEY="+c.APIKey, "MODEL=tiny-llama")
		var got struct {
			Version     string                  `json:"version"`
			ChatChoices int                     `json:"chat_choices"`
			Chunks      int                     `json:"stream_chunks"`
			StreamUsage *openai.CompletionUsage `json:"stream_usage"`
			Completion  openai.CompletionUsage  `json:"completion_usage"`
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("node printed %q: %v", out, err)
		}
		t.Logf("openai npm %s: %s", got.Version, out)
		if got.ChatChoices != 1 || got.Chunks < 2 || got.StreamUsage == nil || got.StreamUsage.CompletionTokens == 0 || got.Completion.CompletionTokens == 0 {
			t.Fatalf("node client saw %s", out)
		}
	})
	if t.Failed() {
		return
	}

	// The engine killed: the agent reports the shard's exit with its last
	// output, and the control plane replaces the replica.
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var reported *managev1.Shard
	var next string
	testcluster.WaitFor(t, "the killed engine's replica replaced", 3*time.Minute, func() (bool, string) {
		rs, err := mc.ListReplicas(ctx, &managev1.ListReplicasRequest{Model: "tiny-llama"})
		if err != nil {
			return false, err.Error()
		}
		var states []string
		for _, r := range rs.GetReplicas() {
			states = append(states, r.GetId()+"="+r.GetState())
			for _, sh := range r.GetShards() {
				if reported == nil && sh.GetError() != "" {
					reported = sh
				}
			}
		}
		next, _ = testcluster.ReadyReplica(ctx, mc, "tiny-llama")
		return next != "" && next != replica, strings.Join(states, "; ")
	})
	if reported == nil || !strings.Contains(reported.GetError(), "signal: killed") || len(reported.GetLastOutput()) == 0 {
		t.Fatalf("the failed shard as reported: %+v; want its exit (signal: killed) and last output", reported)
	}
	t.Logf("the killed engine's shard: %s; last output: %q", reported.GetError(), reported.GetLastOutput()[len(reported.GetLastOutput())-1])
	replica = next
	pids = llamaServerPIDs(t, model)
	if len(pids) != 1 {
		t.Fatalf("llama-server processes after the replacement: %v, want one", pids)
	}

	// The agent restarted the production way (its engines keep running):
	// the new agent adopts the same llama-server process.
	first.Stop(t)
	if err := syscall.Kill(pids[0], 0); err != nil {
		t.Fatalf("llama-server %d did not outlive its agent: %v", pids[0], err)
	}
	spec.KeepEngines = false // the second agent stops it on exit: nothing is left behind
	second := c.StartAgent(spec)
	testcluster.WaitFor(t, "the engine adopted", time.Minute, func() (bool, string) {
		return strings.Contains(second.Output(), "engine adopted"), testcluster.Tail(second.Output(), 5)
	})
	after := testcluster.WaitReadyReplica(t, mc, "tiny-llama", time.Minute)
	if after != replica {
		t.Fatalf("replica %s before the agent restart, %s after; want the running engine adopted", replica, after)
	}
	if now := llamaServerPIDs(t, model); len(now) != 1 || now[0] != pids[0] {
		t.Fatalf("llama-server pids %v after the agent restart, want the same %d", now, pids[0])
	}
	if _, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:     "tiny-llama",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("after the agent restart")},
		MaxTokens: openai.Int(4),
	}); err != nil {
		t.Fatalf("chat through the adopted engine: %v", err)
	}
}

// TestLlamaCppTerraformApply applies a llamacpp model with the real
// terraform: apply returns once the real llama-server is ready (the model
// then answers at once), and a model whose weights llama-server cannot load
// fails the apply with the shard's error and the engine's last output.
func TestLlamaCppTerraformApply(t *testing.T) {
	server := llamacpp.Server(t)
	model := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := gguf.Write(model, gguf.Model{}); err != nil {
		t.Fatal(err)
	}
	c := testcluster.New(t, binary, "10s", "")
	tf := testcluster.NewTerraform(t, c)
	c.StartAgent(testcluster.NodeSpec{ID: "node01", Engines: map[string]string{"llamacpp": server}})
	mc := c.ManageClient()
	ctx := context.Background()
	testcluster.WaitFor(t, "node01 ready", time.Minute, func() (bool, string) {
		ns, err := mc.ListNodes(ctx, &managev1.ListNodesRequest{})
		if err != nil {
			return false, err.Error()
		}
		for _, n := range ns.GetNodes() {
			if n.GetId() == "node01" && n.GetState() == "ready" {
				return true, ""
			}
		}
		return false, ns.String()
	})
	resource := func(name, source string) string {
		return `
resource "llmgw_model" "` + name + `" {
  name            = "` + name + `"
  source          = "` + source + `"
  context_length  = 512
  rollout_timeout = "2m"
  scaling         = { min = 1, max = 1 }
  profiles        = [{ name = "cpu", engine = "llamacpp", startup_timeout = "1m" }]
}
`
	}
	root := `terraform {
  required_providers {
    llmgw = { source = "llmgw/llmgw" }
  }
}
` + resource("tiny-llama", model)
	write := func(body string) {
		if err := os.WriteFile(filepath.Join(tf.Dir, "main.tf"), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(root)
	tf.Run(0, "init", "-input=false")
	out, took := tf.Run(0, "apply", "-auto-approve", "-input=false")
	t.Logf("apply took %s", took)
	rs, err := mc.ListReplicas(ctx, &managev1.ListReplicasRequest{Model: "tiny-llama"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs.GetReplicas()) != 1 || rs.GetReplicas()[0].GetState() != "ready" {
		t.Fatalf("apply returned before the replica was ready: %v\n%s", rs.GetReplicas(), out)
	}
	client := openai.NewClient(option.WithBaseURL(c.Client), option.WithAPIKey(c.APIKey), option.WithMaxRetries(0))
	if _, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:     "tiny-llama",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("right after apply")},
		MaxTokens: openai.Int(4),
	}); err != nil {
		t.Fatalf("chat right after apply: %v", err)
	}

	// Weights llama-server cannot load: the shard exits before ready and
	// apply fails with what llama-server said.
	broken := filepath.Join(t.TempDir(), "broken.gguf")
	if err := os.WriteFile(broken, []byte("not a gguf file"), 0o600); err != nil {
		t.Fatal(err)
	}
	write(root + resource("broken-llama", broken))
	out, _ = tf.Run(1, "apply", "-auto-approve", "-input=false", "-no-color")
	if !strings.Contains(out, "broken-llama") || !strings.Contains(out, "exited before ready") || !strings.Contains(out, "gguf") {
		t.Fatalf("apply of unloadable weights; want the shard's exit and llama-server's output:\n%s", out)
	}
	if _, rest, ok := strings.Cut(out, "exited before ready"); ok {
		t.Logf("apply said: exited before ready%s", rest[:min(len(rest), 600)])
	}
}
