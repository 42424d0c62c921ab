package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/config"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

// nodeLossGoal is the bound on a lost node's model serving again
// elsewhere, on top of the engine's own load time.
const nodeLossGoal = 25 * time.Second

// BenchmarkNodeLoss measures, with the shipped defaults (heartbeats every
// 2 s, grace 20 s), how long after a node dies its model serves again on
// another node, through the gateway, with real processes over mutual TLS:
// once for a node whose agent and engine are killed (the connection goes
// with them), once for a node whose agent hangs silent (its connection stays
// open, nothing comes) while its engine is killed. It prints each time
// beside the goal, 25 s plus the engine's load time (measured as the first
// replica's placement to its first answer), and marks a miss.
func BenchmarkNodeLoss(b *testing.B) {
	llmgw, err := testcluster.Build(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	const m = "sim-chat"
	c := testcluster.NewCluster(b, llmgw, testcluster.Options{Grace: "20s",
		Models:    "  - name: " + m + "\n    source: sim://chat\n    scaling: { min: 1, max: 1 }\n    profiles:\n      - { name: h100, engine: sim, gpu_class: h100-80g, tp: 1, startup_timeout: 1m }\n",
		Configure: func(s *config.Server) { s.Agents = config.Default().Agents }})
	for _, n := range []string{"node01", "node02", "node03"} {
		c.StartAgent(testcluster.NodeSpec{ID: n})
	}
	mc := c.ManageClient()
	ctx := context.Background()
	readyOn := func() string {
		n, _ := testcluster.ReadyNode(ctx, mc, m)
		return n
	}
	serves := func() bool {
		req, _ := http.NewRequest(http.MethodPost, c.Client+"/chat/completions",
			strings.NewReader(`{"model":"`+m+`","max_tokens":1,"messages":[{"role":"user","content":"there?"}]}`))
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
		req.Header.Set("Content-Type", "application/json")
		cl := &http.Client{Timeout: 5 * time.Second}
		resp, err := cl.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	// load is the engine's load time: from the first replica's placement
	// (its creation) to its first answer through the gateway, without the
	// agents' connecting before it.
	var node string
	var load time.Duration
	testcluster.WaitFor(b, m+" serving", 60*time.Second, func() (bool, string) {
		ready, states := testcluster.ReadyReplicas(ctx, mc, m)
		if len(ready) == 0 || len(ready[0].GetShards()) == 0 || !serves() {
			return false, states
		}
		node = ready[0].GetShards()[0].GetNode()
		load = time.Since(time.UnixMilli(ready[0].GetCreatedUnixMs()))
		return true, ""
	})

	// until measures from now until a request through the gateway is
	// answered 200 again by a replica on another node than gone.
	until := func(gone string) time.Duration {
		t0 := time.Now()
		for {
			if on := readyOn(); on != "" && on != gone && serves() {
				return time.Since(t0)
			}
			if time.Since(t0) > 2*time.Minute {
				b.Fatalf("%s not serving elsewhere 2 minutes after %s died", m, gone)
			}
			time.Sleep(100 * time.Millisecond) // request pacing, not a wait for a condition
		}
	}
	kill := func(node string, agentSig syscall.Signal) {
		agent := c.Nodes[node]
		engines := testcluster.EngineChildren(b, agent.Cmd.Process.Pid, m)
		if len(engines) == 0 {
			b.Fatalf("no %s engine under %s's agent", m, node)
		}
		if agentSig == syscall.SIGSTOP {
			b.Cleanup(func() { _ = agent.Cmd.Process.Signal(syscall.SIGCONT) })
		}
		if err := agent.Cmd.Process.Signal(agentSig); err != nil {
			b.Fatal(err)
		}
		for _, pid := range engines {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}

	kill(node, syscall.SIGKILL)
	gone := until(node)
	node = readyOn()
	kill(node, syscall.SIGSTOP)
	silent := until(node)

	var out strings.Builder
	fmt.Fprintf(&out, "\nnode loss → the model serving elsewhere, shipped defaults (heartbeat %s, grace %s), real processes (%s)\n",
		config.Default().Agents.HeartbeatInterval, config.Default().Agents.Grace, time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&out, "engine load (the first replica's placement to its first answer): %.1fs\n", load.Seconds())
	for _, r := range []struct {
		name, metric string
		took         time.Duration
	}{{"agent and engine killed (connection gone)", "connection-gone-s", gone}, {"agent hung, engine killed (connection silent)", "connection-silent-s", silent}} {
		verdict := "ok"
		if r.took > nodeLossGoal+load {
			verdict = "MISSED"
		}
		fmt.Fprintf(&out, "%-46s %5.1fs   goal ≤ %.0fs + load (%.1fs)  %s\n", r.name, r.took.Seconds(), nodeLossGoal.Seconds(), (nodeLossGoal + load).Seconds(), verdict)
		b.ReportMetric(r.took.Seconds(), r.metric)
	}
	fmt.Fprint(os.Stdout, out.String())
}
