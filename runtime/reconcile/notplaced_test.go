package reconcile

import (
	"errors"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/runtime/router"
)

// TestOnDemandTooBigIsNotLoading: a model loaded on demand that no node can
// hold is asked for; after the pass that tried to place it, a request is
// told why it cannot be loaded (not that it is loading), the reconciler
// wants one replica, and the request still counts as demand. Once a node
// that can hold it joins, it is placed, requests are told it is loading,
// and then served.
func TestOnDemandTooBigIsNotLoading(t *testing.T) {
	h := newRouted(t, onDemand("big", 16, 5*time.Minute))
	h.rec.Pass()
	if n, _ := h.rec.Wanted("big"); n != 0 {
		t.Fatalf("wanted %d replicas of an on-demand model nobody asked for", n)
	}
	var nr *router.NotReadyError
	if _, err := h.rt.Pick("big", ""); !errors.As(err, &nr) || !nr.Loading {
		t.Fatalf("first request: %v, want loading (nothing has tried to place it yet)", err)
	}
	h.rec.Pass()
	if n := len(h.live("big")); n != 0 {
		t.Fatalf("%d replicas of a model no node can hold", n)
	}
	if n, _ := h.rec.Wanted("big"); n != 1 {
		t.Errorf("wanted %d replicas while asked for, want 1", n)
	}
	why, failed := h.rec.NotPlaced("big")
	if !strings.Contains(why, "no node can hold profile gpu") || !strings.Contains(why, "needs 16") || failed {
		t.Errorf("NotPlaced = %q, %v; want the placement's explanation", why, failed)
	}
	_, err := h.rt.Pick("big", "")
	if !errors.As(err, &nr) || nr.Loading || nr.NotPlaced != why {
		t.Fatalf("request after the pass: %v, want not loading, saying %q", err, why)
	}
	if !h.rt.Demand("big").Pending {
		t.Error("a request for a model that cannot be placed no longer counts as demand")
	}

	// A node that can hold it joins: placed, loading, then served.
	inv := inventory("")
	for i := 8; i < 16; i++ {
		inv.Gpus = append(inv.Gpus, &agentv1.GPU{Index: int32(i), Class: "h100-80g", MemoryMib: 81559})
	}
	c := &recordingConn{}
	h.conns["node04"] = c
	h.fleet.Connect(&agentv1.Hello{NodeId: "node04", Address: "127.0.0.1", Inventory: inv}, "node04", nil, false, c)
	h.heartbeat()
	h.rec.Pass()
	if n := len(h.live("big")); n != 1 {
		t.Fatalf("%d replicas once a node can hold one, want 1", n)
	}
	if why, _ := h.rec.NotPlaced("big"); why != "" {
		t.Errorf("NotPlaced = %q once placed", why)
	}
	if _, err := h.rt.Pick("big", ""); !errors.As(err, &nr) || !nr.Loading {
		t.Fatalf("request once placed: %v, want loading", err)
	}
	h.readyAll("big")
	h.rec.Pass()
	l, err := h.rt.Pick("big", "")
	if err != nil {
		t.Fatalf("request once ready: %v", err)
	}
	l.Done()
}

// TestOnDemandFailingIsNotLoading: a model loaded on demand whose replica
// failed is, while the next waits for its backoff, reported with the
// failure, not as loading; once the backoff ends the next is placed and it
// is loading again.
func TestOnDemandFailingIsNotLoading(t *testing.T) {
	h := newRouted(t, onDemand("od", 1, 5*time.Minute))
	h.rec.Pass()
	_, _ = h.rt.Pick("od", "")
	h.rec.Pass()
	reps := h.live("od")
	if len(reps) != 1 {
		t.Fatalf("%d replicas after the first request, want 1", len(reps))
	}
	s := reps[0].Shards[0]
	h.report(s.Node, &agentv1.StartShard{ShardId: s.ID, ReplicaId: reps[0].ID, Model: "od"}, agentv1.ShardState_SHARD_STATE_FAILED,
		func(st *agentv1.ShardStatus) { st.Error = "engine exited: out of memory" })
	h.rec.Pass()
	why, failed := h.rec.NotPlaced("od")
	if !strings.Contains(why, "out of memory") || !failed {
		t.Fatalf("NotPlaced = %q, %v during the backoff; want the failure", why, failed)
	}
	var nr *router.NotReadyError
	if _, err := h.rt.Pick("od", ""); !errors.As(err, &nr) || nr.Loading || !strings.Contains(nr.NotPlaced, "out of memory") {
		t.Fatalf("request during the backoff: %v, want not loading, naming the failure", err)
	}
	h.now = h.now.Add(2 * time.Second)
	h.rec.Pass()
	if n := len(h.live("od")); n != 1 {
		t.Fatalf("%d replicas after the backoff, want 1", n)
	}
	if _, err := h.rt.Pick("od", ""); !errors.As(err, &nr) || !nr.Loading {
		t.Fatalf("request once placed again: %v, want loading", err)
	}
}
