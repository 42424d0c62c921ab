package manage

import (
	"context"
	"slices"
	"testing"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/spec"
)

// collectConn is an agent that answers CollectWeights as the agent does:
// every entry whose key is not kept is removed (unless a dry run).
type collectConn struct {
	f       *fleet.Fleet
	node    string
	entries []*agentv1.CacheEntry
	asked   chan *agentv1.CollectWeights
	silent  bool
}

func (c *collectConn) Send(m *agentv1.ControlMessage) error {
	cw := m.GetCollectWeights()
	if cw == nil {
		return nil
	}
	c.asked <- cw
	if c.silent {
		return nil
	}
	ans := &agentv1.WeightsCollected{RequestId: cw.GetRequestId(), Cache: &agentv1.WeightsCache{}}
	for _, e := range c.entries {
		if slices.Contains(cw.GetKeepKeys(), e.GetKey()) {
			ans.Cache.Entries = append(ans.Cache.Entries, e)
		} else {
			ans.Removed = append(ans.Removed, e)
		}
	}
	go c.f.ApplyWeightsCollected(c.node, ans)
	return nil
}

func cacheEntry(src string, size uint64) *agentv1.CacheEntry {
	return &agentv1.CacheEntry{Key: spec.WeightsKey(src), Source: src, SizeBytes: size}
}

// TestWeightsListAndCollect: an entry of a catalog model's source is kept
// and named with its model, one only a live shard uses is kept and named
// with the shard, the rest is collectable; CollectWeights sends each node
// exactly those keys to keep and reports what it deleted; a node that does
// not answer in time is listed with the error.
func TestWeightsListAndCollect(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	catalogSrc := "http://mirror:8081/cat/v1/w.gguf"
	m := apiModel("cat")
	m.Source = catalogSrc
	if _, err := s.CreateModel(ctx, &managev1.CreateModelRequest{Model: m}); err != nil {
		t.Fatal(err)
	}
	shardSrc, oldSrc := "http://mirror:8081/old/v1/w.gguf", "s3://bucket/gone/"
	f := s.opts.Fleet
	conn := &collectConn{f: f, node: "gpu01", asked: make(chan *agentv1.CollectWeights, 4),
		entries: []*agentv1.CacheEntry{cacheEntry(catalogSrc, 10), cacheEntry(shardSrc, 20), cacheEntry(oldSrc, 30)}}
	f.Connect(&agentv1.Hello{Inventory: &agentv1.Inventory{WeightsCache: &agentv1.WeightsCache{Entries: conn.entries, DiskFreeBytes: 5, DiskTotalBytes: 9}}}, "gpu01", nil, false, conn)
	// A replica of a model no longer in the catalog, still running there.
	f.Update(func(tx *fleet.Tx) {
		tx.Add(&fleet.Replica{ID: "r-old", Model: "old", State: fleet.ReplicaReady, Shards: []*fleet.Shard{{
			ID: "r-old-0", Node: "gpu01", State: agentv1.ShardState_SHARD_STATE_READY, Sent: true, Source: shardSrc,
		}}})
	})

	list, err := s.ListWeights(ctx, &managev1.ListWeightsRequest{Node: "gpu01"})
	if err != nil || len(list.GetNodes()) != 1 {
		t.Fatalf("ListWeights = %v, %v", list, err)
	}
	nw := list.GetNodes()[0]
	if !nw.GetReported() || nw.GetDiskFreeBytes() != 5 || len(nw.GetEntries()) != 3 {
		t.Fatalf("node weights %v", nw)
	}
	for _, e := range nw.GetEntries() {
		switch e.GetSource() {
		case catalogSrc:
			if e.GetCollectable() || !slices.Equal(e.GetModels(), []string{"cat"}) {
				t.Errorf("catalog entry %v", e)
			}
		case shardSrc:
			if e.GetCollectable() || !slices.Equal(e.GetShards(), []string{"r-old-0"}) {
				t.Errorf("shard's entry %v", e)
			}
		case oldSrc:
			if !e.GetCollectable() {
				t.Errorf("unused entry %v not collectable", e)
			}
		}
	}
	// node01 (from newService) reports no cache: unknown, not empty.
	all, _ := s.ListWeights(ctx, &managev1.ListWeightsRequest{})
	if len(all.GetNodes()) != 2 || all.GetNodes()[1].GetNode() != "node01" || all.GetNodes()[1].GetReported() {
		t.Fatalf("all nodes %v", all.GetNodes())
	}

	st, err := s.GetStatus(ctx, &managev1.GetStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var cat *managev1.ModelHoldings
	for _, h := range st.GetHoldings() {
		if h.GetModel() == "cat" {
			cat = h
		} else if h.GetModel() == "from-yaml" {
			t.Errorf("a sim:// model listed with holdings: %v", h)
		}
	}
	if cat == nil || len(cat.GetFabrics()) != 1 || cat.GetFabrics()[0].GetNodes() != 2 || cat.GetFabrics()[0].GetHolding() != 1 {
		t.Errorf("holdings %v: want cat held by 1 of the 2 nodes outside any fabric", st.GetHoldings())
	}

	resp, err := s.CollectWeights(ctx, &managev1.CollectWeightsRequest{Node: "gpu01"})
	if err != nil {
		t.Fatal(err)
	}
	asked := <-conn.asked
	wantKeep := []string{spec.WeightsKey(catalogSrc), spec.WeightsKey(shardSrc)}
	slices.Sort(wantKeep)
	if !slices.Equal(asked.GetKeepKeys(), wantKeep) || asked.GetDryRun() {
		t.Errorf("asked to keep %v (dry run %v), want %v", asked.GetKeepKeys(), asked.GetDryRun(), wantKeep)
	}
	got := resp.GetNodes()[0]
	if len(got.GetEntries()) != 1 || got.GetEntries()[0].GetSource() != oldSrc || len(got.GetErrors()) != 0 {
		t.Fatalf("collected %v", got)
	}
	if n, _ := f.Node("gpu01"); len(n.WeightsCache().GetEntries()) != 2 {
		t.Errorf("the cache the answer reported was not recorded: %v", n.WeightsCache())
	}

	conn.silent = true
	resp, err = s.CollectWeights(ctx, &managev1.CollectWeightsRequest{Node: "gpu01", TimeoutMs: 50})
	if err != nil || len(resp.GetNodes()[0].GetErrors()) != 1 {
		t.Fatalf("silent node: %v, %v", resp, err)
	}
	<-conn.asked
}
