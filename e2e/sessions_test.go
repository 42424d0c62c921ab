package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

// Regression (issue 16, item 4): a second agent started with node03's
// certificate while the first ran took node03's session; once it was
// killed node03 stayed "ready … agent disconnected", unplaceable and
// refusing check-engines, until the real agent restarted. One live session
// per node: the twin is refused (both sides say so), the first keeps
// serving, and the twin's death changes nothing.
func TestTwinAgentRefused(t *testing.T) {
	c := testcluster.New(t, binary, "10s", `  - name: sim-chat
    source: sim://chat
    scaling: { min: 1, max: 1 }
    profiles:
      - { name: h100, engine: sim, gpu_class: h100-80g, tp: 1, startup_timeout: 1m }
`)
	c.StartAgent(testcluster.NodeSpec{ID: "node03"})
	mc := c.ManageClient()
	ctx := context.Background()
	client := openai.NewClient(option.WithBaseURL(c.Client), option.WithAPIKey(c.APIKey), option.WithMaxRetries(0))
	chat := func() error {
		resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:     "sim-chat",
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("are you the real node03")},
			MaxTokens: openai.Int(4),
		})
		if err == nil && resp.Usage.CompletionTokens != 4 {
			err = fmt.Errorf("usage %+v, want 4 completion tokens", resp.Usage)
		}
		return err
	}
	// healthy reports whether node03 is ready, connected, reported by its
	// first agent (version and GPUs unchanged) and serving sim-chat.
	var firstSeen int64
	healthy := func() (bool, string) {
		n, err := mc.GetNode(ctx, &managev1.GetNodeRequest{Id: "node03"})
		if err != nil {
			return false, err.Error()
		}
		rs, err := mc.ListReplicas(ctx, &managev1.ListReplicasRequest{Model: "sim-chat"})
		if err != nil {
			return false, err.Error()
		}
		ready := false
		for _, r := range rs.GetReplicas() {
			ready = ready || (r.GetState() == "ready" && r.GetShards()[0].GetNode() == "node03")
		}
		state := fmt.Sprintf("node03 %s (%s) connected=%v since=%d; replica ready=%v", n.GetState(), n.GetReason(), n.GetConnected(), n.GetConnectedSinceUnixMs(), ready)
		return n.GetState() == "ready" && n.GetConnected() && ready && (firstSeen == 0 || n.GetConnectedSinceUnixMs() == firstSeen), state
	}
	testcluster.WaitFor(t, "node03 serving sim-chat", 60*time.Second, healthy)
	n, err := mc.GetNode(ctx, &managev1.GetNodeRequest{Id: "node03"})
	if err != nil {
		t.Fatal(err)
	}
	firstSeen = n.GetConnectedSinceUnixMs()

	twin := c.StartAgent(testcluster.NodeSpec{ID: "node03", Name: "node03-twin"})
	testcluster.WaitFor(t, "the twin refused twice, and told why", 60*time.Second, func() (bool, string) {
		out := twin.Output()
		refusals := 0
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "refused by control plane") && strings.Contains(line, "AlreadyExists") &&
				strings.Contains(line, "node node03 already has a live session from 127.0.0.1:") {
				refusals++
			}
		}
		return refusals >= 2, testcluster.Tail(out, 3)
	})
	if ok, state := healthy(); !ok {
		t.Fatalf("node03 while its twin is refused: %s", state)
	}
	var logged bool
	for _, line := range strings.Split(c.Server.Output(), "\n") {
		logged = logged || (strings.Contains(line, "agent refused") && strings.Contains(line, "node=node03") &&
			strings.Contains(line, "live_session_remote=127.0.0.1:") && strings.Contains(line, "live_session_since="))
	}
	if !logged {
		t.Fatalf("the control plane did not log the twin's refusal:\n%s", testcluster.Tail(c.Server.Output(), 20))
	}
	if err := chat(); err != nil {
		t.Fatalf("chat while the twin is refused: %v", err)
	}

	if err := twin.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-twin.Done
	// The twin's death ends nothing: node03 answers check-engines through
	// its first agent's session and keeps serving.
	resp, err := mc.CheckNodeEngines(ctx, &managev1.CheckNodeEnginesRequest{Name: "node03", TimeoutMs: 30_000})
	if err != nil {
		t.Fatalf("check-engines on node03 after its twin was killed: %v", err)
	}
	if len(resp.GetNode().GetEngineChecks()) == 0 {
		t.Fatalf("check-engines on node03 returned no checks: %v", resp.GetNode())
	}
	if ok, state := healthy(); !ok {
		t.Fatalf("node03 after its twin was killed: %s", state)
	}
	if err := chat(); err != nil {
		t.Fatalf("chat after the twin was killed: %v", err)
	}
}
