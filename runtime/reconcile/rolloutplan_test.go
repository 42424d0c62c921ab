package reconcile

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/models"
	"github.com/llmgw/llmgw/spec"
)

// TestPlanRolloutNamesEachReplacement: two replicas of tp 8 fill two of
// three 8-GPU nodes. The dry run of an args edit places the first
// replacement on the free node, then, with the replica it replaces
// stopped, the second on the node that one freed; a limit of 1 dry-runs
// one and counts the other; an edit that rolls nothing plans nothing, and
// a scaling.min of 3 adds one replica, on the free node.
func TestPlanRolloutNamesEachReplacement(t *testing.T) {
	m := chatModel()
	m.Scaling = spec.Scaling{Min: 2, Max: 2}
	m.Profiles[0].TP = 8
	h := newRouted(t)
	h.add(t, m)
	h.rec.Pass()
	h.readyAll("sim-chat")
	h.rec.Pass()
	live := h.live("sim-chat")
	if len(live) != 2 {
		t.Fatalf("%d live replicas, want 2", len(live))
	}
	busy := map[string]bool{live[0].Shards[0].Node: true, live[1].Shards[0].Node: true}
	free := ""
	for _, n := range []string{"node01", "node02", "node03"} {
		if !busy[n] {
			free = n
		}
	}

	edited := m
	edited.Profiles = []spec.Profile{m.Profiles[0]}
	edited.Profiles[0].Args = []string{"--x"}
	edited.Normalize()
	_, planned, more := h.rec.PlanRollout(edited, 8)
	if len(planned) != 2 || more != 0 {
		t.Fatalf("PlanRollout = %+v, %d more; want 2 replacements", planned, more)
	}
	for _, p := range planned {
		if !p.Plan.Placed {
			t.Fatalf("replacement of %s did not place: %s", p.Replaces, p.Plan.Explanation.String())
		}
	}
	byReplaced := map[string]string{planned[0].Replaces: planned[0].Plan.Shards[0].NodeID, planned[1].Replaces: planned[1].Plan.Shards[0].NodeID}
	if planned[0].Plan.Shards[0].NodeID != free {
		t.Errorf("first replacement on %s, want the free node %s", planned[0].Plan.Shards[0].NodeID, free)
	}
	// The second goes where the first replaced replica ran.
	if got, want := planned[1].Plan.Shards[0].NodeID, nodeOf(t, live, planned[0].Replaces); got != want {
		t.Errorf("second replacement on %s, want %s, freed by %s (%v)", got, want, planned[0].Replaces, byReplaced)
	}

	_, planned, more = h.rec.PlanRollout(edited, 1)
	if len(planned) != 1 || more != 1 {
		t.Errorf("PlanRollout with limit 1 = %d planned, %d more; want 1 and 1", len(planned), more)
	}

	priced := m
	priced.Pricing = &spec.Pricing{PromptPer1K: 1}
	priced.Normalize()
	if first, planned, more := h.rec.PlanRollout(priced, 8); len(planned) != 0 || more != 0 || !first.Placed {
		t.Errorf("PlanRollout of a pricing edit = %+v, %d more (one replica placed: %v); want nothing, and the one replica placed", planned, more, first.Placed)
	}
	bigger := priced
	bigger.Scaling = spec.Scaling{Min: 3, Max: 3}
	_, planned, more = h.rec.PlanRollout(bigger, 8)
	if len(planned) != 1 || planned[0].Replaces != "" || more != 0 {
		t.Fatalf("PlanRollout of scaling.min 3 = %+v, %d more; want one added replica", planned, more)
	}
	if !planned[0].Plan.Placed || planned[0].Plan.Shards[0].NodeID != free {
		t.Errorf("the added replica: placed %v on %v, want the free node %s", planned[0].Plan.Placed, planned[0].Plan.Shards, free)
	}
}

func nodeOf(t *testing.T, reps []fleet.Replica, id string) string {
	t.Helper()
	for _, r := range reps {
		if r.ID == id {
			return r.Shards[0].Node
		}
	}
	t.Fatalf("no replica %s", id)
	return ""
}

// TestDryRunsTakeTheReadLock: while a reader holds the fleet (as agent
// reports' readers and other dry runs do), PlanRollout, PlanOne, Explain
// and Capacity still answer: none takes the exclusive lock that agent
// reports and reconciler passes need.
func TestDryRunsTakeTheReadLock(t *testing.T) {
	m := chatModel()
	h := newRouted(t)
	h.add(t, m)
	h.rec.Pass()
	edited := m
	edited.Profiles = []spec.Profile{m.Profiles[0]}
	edited.Profiles[0].Args = []string{"--x"}
	edited.Normalize()
	inside, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	go h.fleet.Read(func(*fleet.Tx) { close(inside); <-release })
	<-inside
	for name, call := range map[string]func(){
		"PlanRollout": func() { h.rec.PlanRollout(edited, 16) },
		"PlanOne":     func() { h.rec.PlanOne(edited) },
		"Explain":     func() { h.rec.Explain(edited) },
		"Capacity":    func() { h.rec.Capacity(edited, 4) },
	} {
		done := make(chan struct{})
		go func() { call(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s waits while a reader holds the fleet: it takes the exclusive lock", name)
		}
	}
}

// BenchmarkPlanRollout1000 is PlanPlacement's dry run of an args edit to a
// model of 20 replicas (16 dry-run) on 1,000 nodes of 8 H100s holding
// about 1,000 replicas of 500 models: the plan for one replica with every
// node's verdict, then each replacement in turn.
func BenchmarkPlanRollout1000(b *testing.B) {
	const nodes = 1000
	var ms []spec.Model
	for i := range nodes / 2 {
		p := spec.Profile{Name: "p", Engine: "sim", GPUClass: "h100-80g", TP: []int{1, 2, 4, 8, 8}[i%5]}
		ms = append(ms, spec.Model{Name: fmt.Sprintf("model%04d", i), Source: fmt.Sprintf("sim://m%04d", i),
			Scaling: spec.Scaling{Min: 1 + i%3, Max: 3}, Profiles: []spec.Profile{p}})
	}
	big := spec.Model{Name: "big", Source: "sim://big", Scaling: spec.Scaling{Min: 20, Max: 20}, Profiles: []spec.Profile{{Name: "p", Engine: "sim", GPUClass: "h100-80g", TP: 1}}}
	reg, err := models.New(append(ms, big), nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	fl := fleet.New()
	for i := range nodes {
		id := fmt.Sprintf("node%04d", i)
		fl.Connect(&agentv1.Hello{NodeId: id, Address: "127.0.0.1", Inventory: inventory(fmt.Sprintf("ib-%02d", i/100))}, id, nil, false, &recordingConn{})
	}
	rec := New(Options{Fleet: fl, Catalog: reg, Grace: time.Hour, Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return time.Unix(1_700_000_000, 0) }})
	rec.Pass()
	edited := big
	edited.Profiles = []spec.Profile{big.Profiles[0]}
	edited.Profiles[0].Args = []string{"--x"}
	edited.Normalize()
	b.ReportAllocs()
	for b.Loop() {
		if _, planned, more := rec.PlanRollout(edited, 16); len(planned) != 16 || more != 4 {
			b.Fatalf("planned %d, %d more; want 16 and 4", len(planned), more)
		}
	}
}

// TestPlanRolloutReleasesAStoppedShardsNode: a replaced replica whose shard
// already reported stopped still counted one replica of the model on that
// node in the snapshot, so once the dry run releases it the node counts
// none: the spread ranker must see that. Three 8-GPU nodes; model m (tp 4,
// scaling 3) runs stale rA (its shard stopped, on node01, no GPU held) and
// stale rB (ready, node02 GPUs 0-3), and current rC (node03, GPUs 0-1).
// The first replacement (rA's, not ready first) fills node02; the second
// then scores node01 (8 free, no replica of m: 1.5/3) above node03 (6
// free, one replica of m: 1.25/3), and would go to node03 if node01 still
// counted rA (1/3).
func TestPlanRolloutReleasesAStoppedShardsNode(t *testing.T) {
	m := spec.Model{Name: "m", Source: "sim://m", Scaling: spec.Scaling{Min: 3, Max: 3},
		Profiles: []spec.Profile{{Name: "p", Engine: "sim", GPUClass: "h100-80g", TP: 4}}}
	reg, err := models.New([]spec.Model{m}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	fl := fleet.New()
	for _, id := range []string{"node01", "node02", "node03"} {
		fl.Connect(&agentv1.Hello{NodeId: id, Address: "127.0.0.1", Inventory: inventory("")}, id, nil, false, &recordingConn{})
	}
	e := models.NewEntry(m, "", 0)
	shard := func(rep, node string, st agentv1.ShardState, gpus ...int) []*fleet.Shard {
		return []*fleet.Shard{{ID: rep + "-0", Node: node, GPUs: gpus, State: st, Sent: true}}
	}
	fl.Update(func(tx *fleet.Tx) {
		tx.Add(&fleet.Replica{ID: "rA", Model: "m", Profile: m.Profiles[0], Generation: "old",
			Shards: shard("rA", "node01", agentv1.ShardState_SHARD_STATE_STOPPED, 0, 1, 2, 3)})
		for _, r := range []*fleet.Replica{
			{ID: "rB", Model: "m", Profile: m.Profiles[0], Generation: "old", Shards: shard("rB", "node02", agentv1.ShardState_SHARD_STATE_READY, 0, 1, 2, 3)},
			{ID: "rC", Model: "m", Profile: m.Profiles[0], Generation: e.ReplicaGeneration("p"), Shards: shard("rC", "node03", agentv1.ShardState_SHARD_STATE_READY, 0, 1)},
		} {
			tx.Add(r)
			r.State = fleet.ReplicaReady
		}
	})
	rec := New(Options{Fleet: fl, Catalog: reg, Grace: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	_, planned, more := rec.PlanRollout(m, 8)
	var got []string
	for _, p := range planned {
		if !p.Plan.Placed {
			t.Fatalf("replacement of %s did not place: %s", p.Replaces, p.Plan.Explanation.String())
		}
		got = append(got, fmt.Sprintf("%s->%s", p.Replaces, p.Plan.Shards[0].NodeID))
	}
	if want := []string{"rA->node02", "rB->node01"}; more != 0 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("PlanRollout placed %v (%d more), want %v", got, more, want)
	}
}
