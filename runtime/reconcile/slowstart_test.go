package reconcile

import (
	"context"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/runtime/models"
	"github.com/llmgw/llmgw/spec"
)

// TestSlowStartReportedStalled: profile h100's first replica took 5s to
// become ready; after an args edit its replacement, placed but never
// ready, is not reported at 14s (twice 5s, and 10s more than it, is 15s),
// and at 16s NotReady names it with its shard's state and last engine
// output, while the old replica keeps serving. A fetch moving bytes puts
// the clock back. Once ready, nothing is reported.
func TestSlowStartReportedStalled(t *testing.T) {
	reg, err := models.New(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	h.rec.opts.Catalog = reg
	h.fleet.SetClock(func() time.Time { return h.now })
	ctx := context.Background()
	m := chatModel()
	m.Scaling = spec.Scaling{Min: 1, Max: 1}
	if _, err := reg.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	var node string
	var s *agentv1.StartShard
	for n, ss := range h.startsFor("sim-chat") {
		node, s = n, ss[0]
	}
	h.now = h.now.Add(5 * time.Second)
	h.report(node, s, agentv1.ShardState_SHARD_STATE_READY, func(st *agentv1.ShardStatus) { st.Endpoint = "127.0.0.1:9430" })
	h.rec.Pass()

	m.Profiles[0].Args = []string{"--hang"}
	e, err := reg.Update(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	var repl *agentv1.StartShard
	var replNode string
	for n, ss := range h.startsFor("sim-chat") {
		for _, x := range ss {
			if x.GetReplicaId() != s.GetReplicaId() {
				repl, replNode = x, n
			}
		}
	}
	if repl == nil {
		t.Fatal("no replacement placed after the args edit")
	}
	placed := h.now
	h.now = placed.Add(14 * time.Second)
	h.report(replNode, repl, agentv1.ShardState_SHARD_STATE_STARTING, func(st *agentv1.ShardStatus) {
		st.LastOutput = []string{"loading weights", "waiting for a lock that never comes"}
	})
	h.rec.Pass()
	if got := h.rec.NotReady("sim-chat", e.Generation); got != "" {
		t.Fatalf("NotReady at 14s = %q, want nothing before 15s", got)
	}
	h.now = placed.Add(16 * time.Second)
	h.rec.Pass()
	got := h.rec.NotReady("sim-chat", e.Generation)
	for _, want := range []string{
		"replica " + repl.GetReplicaId() + " (profile h100, on " + replNode + ") not ready after 16s",
		"profile h100's last replica was ready in 5s",
		"shard 0 on " + replNode + ": starting, last output: waiting for a lock that never comes",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("NotReady = %q, lacks %q", got, want)
		}
	}
	if stops := h.conns[node].stops(); len(stops) != 0 {
		t.Fatalf("the old replica stopped while its replacement is not ready: %v", stops)
	}
	if got := h.rec.NotReady("sim-chat", "another"); got != "" {
		t.Errorf("NotReady of another generation = %q, want nothing", got)
	}

	// A fetch that moved a byte puts the clock back to then.
	h.report(replNode, repl, agentv1.ShardState_SHARD_STATE_STARTING, func(st *agentv1.ShardStatus) {
		st.Fetch = &agentv1.FetchProgress{Source: "sim://chat", BytesDone: 10, BytesTotal: 100}
	})
	h.rec.Pass()
	if got := h.rec.NotReady("sim-chat", e.Generation); got != "" {
		t.Errorf("NotReady right after fetch progress = %q, want nothing", got)
	}

	h.now = h.now.Add(time.Second)
	h.report(replNode, repl, agentv1.ShardState_SHARD_STATE_READY, func(st *agentv1.ShardStatus) { st.Endpoint = "127.0.0.1:9431" })
	h.rec.Pass()
	if got := h.rec.NotReady("sim-chat", e.Generation); got != "" {
		t.Errorf("NotReady once ready = %q, want nothing", got)
	}
}
