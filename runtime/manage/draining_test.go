package manage

import (
	"context"
	"testing"
	"time"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/runtime/reconcile"
	"github.com/llmgw/llmgw/runtime/router"
)

// TestDrainingReplicaNotServing: a replica drained before it is stopped
// (here: its model, loaded on demand, went idle) still runs, but serves
// nothing new: it is not counted ready, its model reads idle, not serving
// 1/0, and ListReplicas shows it draining.
func TestDrainingReplicaNotServing(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	rt := router.New()
	now := time.Now()
	s.opts.Reconciler = reconcile.New(reconcile.Options{Fleet: s.opts.Fleet, Catalog: s.opts.Catalog, Endpoints: rt, Routing: rt,
		Now: func() time.Time { return now }, DrainSettle: time.Hour}) // drained, not stopped, for the test
	connectSimNode(s.opts.Fleet, "node02", "h100-80g")
	_, _ = rt.Pick("from-yaml", "")
	s.opts.Reconciler.Pass()
	reps := s.opts.Fleet.Replicas()
	if len(reps) != 1 {
		t.Fatalf("%d replicas placed, want 1", len(reps))
	}
	sh := reps[0].Shards[0]
	s.opts.Fleet.ApplyShardStatus(sh.Node, &agentv1.ShardStatus{ShardId: sh.ID, ReplicaId: reps[0].ID, Model: "from-yaml",
		State: agentv1.ShardState_SHARD_STATE_READY, Endpoint: "127.0.0.1:9"})
	s.opts.Reconciler.Pass()
	m, err := s.GetModel(ctx, &managev1.GetModelRequest{Name: "from-yaml"})
	if st := m.GetStatus(); err != nil || st.GetState() != "serving" || st.GetReplicasReady() != 1 {
		t.Fatalf("once ready: %v, %v; want serving, 1 ready", st, err)
	}

	now = now.Add(16 * time.Minute) // past the default idle_timeout
	s.opts.Reconciler.Pass()
	if d := s.opts.Reconciler.Draining(); !d[reps[0].ID] {
		t.Fatalf("draining %v after idle_timeout, want %s", d, reps[0].ID)
	}
	m, err = s.GetModel(ctx, &managev1.GetModelRequest{Name: "from-yaml"})
	if st := m.GetStatus(); err != nil || st.GetState() != "idle" || st.GetReplicasReady() != 0 || st.GetReplicasDesired() != 0 || st.GetReplicasTotal() != 1 {
		t.Fatalf("while its replica drains: %v, %v; want idle, 0 ready of 0 desired, 1 live", st, err)
	}
	list, err := s.ListReplicas(ctx, &managev1.ListReplicasRequest{Model: "from-yaml"})
	if err != nil || len(list.GetReplicas()) != 1 || list.GetReplicas()[0].GetState() != "draining" {
		t.Fatalf("ListReplicas while it drains: %v, %v; want it draining", list.GetReplicas(), err)
	}
	if st, err := s.GetStatus(ctx, &managev1.GetStatusRequest{}); err != nil || st.GetReplicasReady() != 0 || st.GetReplicasTotal() != 1 {
		t.Fatalf("GetStatus while it drains: %v, %v; want 0 ready of 1", st, err)
	}
}
