package testcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api/managev1"
)

// ReadyReplicas lists the ready replicas of model (of every model when
// model is empty) and, for WaitFor's message, the state of each replica
// listed: "model/id=state error; …".
func ReadyReplicas(ctx context.Context, mc managev1.ManageServiceClient, model string) ([]*managev1.Replica, string) {
	rs, err := mc.ListReplicas(ctx, &managev1.ListReplicasRequest{Model: model})
	if err != nil {
		return nil, err.Error()
	}
	var ready []*managev1.Replica
	var states []string
	for _, r := range rs.GetReplicas() {
		state := r.GetModel() + "/" + r.GetId() + "=" + r.GetState()
		if r.GetError() != "" {
			state += " " + r.GetError()
		}
		states = append(states, state)
		if r.GetState() == "ready" {
			ready = append(ready, r)
		}
	}
	return ready, strings.Join(states, "; ")
}

// IDAt names a replica "id@endpoint" (its first shard's endpoint): the
// same string before and after a restart means the same engine serves.
func IDAt(r *managev1.Replica) string {
	return r.GetId() + "@" + r.GetShards()[0].GetEndpoint()
}

// ReadyReplica returns the first ready replica of model as "id@endpoint",
// or "" and the replicas' states.
func ReadyReplica(ctx context.Context, mc managev1.ManageServiceClient, model string) (string, string) {
	ready, states := ReadyReplicas(ctx, mc, model)
	if len(ready) == 0 {
		return "", states
	}
	return IDAt(ready[0]), ""
}

// ReadyNode returns the node of the first ready replica of model (its
// first shard's), or "" and the replicas' states.
func ReadyNode(ctx context.Context, mc managev1.ManageServiceClient, model string) (string, string) {
	ready, states := ReadyReplicas(ctx, mc, model)
	if len(ready) == 0 {
		return "", states
	}
	return ready[0].GetShards()[0].GetNode(), ""
}

// WaitReadyReplica waits up to timeout for a ready replica of model and
// returns it as "id@endpoint"; the test fails, naming the replicas'
// states, when none comes.
func WaitReadyReplica(t testing.TB, mc managev1.ManageServiceClient, model string, timeout time.Duration) string {
	t.Helper()
	var replica string
	WaitFor(t, model+" ready", timeout, func() (bool, string) {
		r, why := ReadyReplica(context.Background(), mc, model)
		replica = r
		return r != "", why
	})
	return replica
}

// WaitNodesReady waits up to timeout until n nodes are ready.
func WaitNodesReady(t testing.TB, mc managev1.ManageServiceClient, n int, timeout time.Duration) {
	t.Helper()
	WaitFor(t, fmt.Sprint(n, " nodes ready"), timeout, func() (bool, string) {
		ns, err := mc.ListNodes(context.Background(), &managev1.ListNodesRequest{})
		if err != nil {
			return false, err.Error()
		}
		var states []string
		ready := 0
		for _, node := range ns.GetNodes() {
			states = append(states, node.GetId()+"="+node.GetState())
			if node.GetState() == "ready" {
				ready++
			}
		}
		return ready == n, strings.Join(states, "; ")
	})
}

// EngineChildren returns the pids of the sim engines serving model that
// the agent process agentPID started (its children).
func EngineChildren(t testing.TB, agentPID int, model string) []int {
	t.Helper()
	return Processes(t, func(ppid int, argv []string) bool {
		return ppid == agentPID && slices.Contains(argv, "sim-engine") && argAfter(argv, "--served-model-name") == model
	})
}

// Processes returns the pids of the processes match accepts, given each
// one's parent pid and command line, read from /proc.
func Processes(t testing.TB, match func(ppid int, argv []string) bool) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the command name, which is in parentheses: state ppid ...
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(cmd) == 0 {
			continue
		}
		if match(ppid, strings.Split(strings.TrimSuffix(string(cmd), "\x00"), "\x00")) {
			out = append(out, pid)
		}
	}
	return out
}

// argAfter returns the argument after flag in argv ("" when none).
func argAfter(argv []string, flag string) string {
	if i := slices.Index(argv, flag); i >= 0 && i+1 < len(argv) {
		return argv[i+1]
	}
	return ""
}

// WaitReadyReplicas waits up to timeout until n replicas of model (of
// every model when model is empty) are ready, and returns them; the test
// fails, naming the replicas' states, when they do not come.
func WaitReadyReplicas(t testing.TB, mc managev1.ManageServiceClient, model string, n int, timeout time.Duration) []*managev1.Replica {
	t.Helper()
	var ready []*managev1.Replica
	what := fmt.Sprintf("%d replicas of %s ready", n, model)
	if model == "" {
		what = fmt.Sprintf("%d replicas ready", n)
	}
	WaitFor(t, what, timeout, func() (bool, string) {
		var why string
		ready, why = ReadyReplicas(context.Background(), mc, model)
		return len(ready) == n, why
	})
	return ready
}
