package ctl

import (
	"bytes"
	"testing"

	managev1 "github.com/llmgw/llmgw/api/managev1"
)

// TestReplicasFetching: a replica whose shards are fetching weights shows
// how far the least advanced one is and its rate; a stalled fetch shows
// stalled with the source and the last error, so the two never look alike.
func TestReplicasFetching(t *testing.T) {
	replicas := []*managev1.Replica{
		{Id: "r1", Model: "m", Profile: "cpu", State: "starting", ShardsExpected: 2, Shards: []*managev1.Shard{
			{Rank: 0, Node: "n1", State: "starting", Fetch: &managev1.ShardFetch{Source: "http://mirror/m/v/", BytesDone: 90e9, BytesTotal: 100e9, BytesPerSecond: 500e6}},
			{Rank: 1, Node: "n2", State: "starting", Fetch: &managev1.ShardFetch{Source: "http://mirror/m/v/", BytesDone: 41e9, BytesTotal: 100e9, BytesPerSecond: 380e6}},
		}},
		{Id: "r2", Model: "w", Profile: "cpu", State: "starting", ShardsExpected: 1, Shards: []*managev1.Shard{
			{Rank: 0, Node: "n3", State: "starting", Fetch: &managev1.ShardFetch{Source: "hf:o/r/f.gguf", BytesDone: 5, Stalled: true, LastError: "GET https://hub/o/r/resolve/main/f.gguf: 503 Service Unavailable"}},
		}},
	}
	var b bytes.Buffer
	if err := writeReplicas(&b, replicas, nil); err != nil {
		t.Fatal(err)
	}
	want := `REPLICA  MODEL  PROFILE  STATE                              SHARDS  NODES  RUN/WAIT/KV  ERROR
r1       m      cpu      fetching 41% 380 MB/s, 2m35s left  0/2     n1,n2  -            -
r2       w      cpu      stalled                            0/1     n3     -            stalled: hf:o/r/f.gguf: GET https://hub…

replica r2 (w): shard 0 on n3: fetch of hf:o/r/f.gguf stalled at 5 bytes (size not known yet); last error: GET https://hub/o/r/resolve/main/f.gguf: 503 Service Unavailable
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// TestReplicasStaleProfile: a live replica the control plane calls stale
// reads "ready (stale profile)", and so does one whose model_generation is
// not its model's (a control plane older than Replica.stale); a current one
// and a stopping stale one are unmarked.
func TestReplicasStaleProfile(t *testing.T) {
	replicas := []*managev1.Replica{
		{Id: "r1", Model: "m", Profile: "cpu", State: "ready", ShardsExpected: 1, ModelGeneration: "old", Stale: true, Shards: []*managev1.Shard{{Node: "n1", State: "ready"}}},
		{Id: "r2", Model: "m", Profile: "cpu", State: "ready", ShardsExpected: 1, ModelGeneration: "new", Shards: []*managev1.Shard{{Node: "n2", State: "ready"}}},
		{Id: "r3", Model: "m", Profile: "cpu", State: "stopping", ShardsExpected: 1, ModelGeneration: "old", Stale: true, Shards: []*managev1.Shard{{Node: "n3", State: "ready"}}},
		{Id: "r4", Model: "gone", Profile: "cpu", State: "ready", ShardsExpected: 1, ModelGeneration: "old", Shards: []*managev1.Shard{{Node: "n3", State: "ready"}}},
		// From a control plane older than Replica.stale: stale by its
		// generation only.
		{Id: "r5", Model: "m", Profile: "cpu", State: "ready", ShardsExpected: 1, ModelGeneration: "old", Shards: []*managev1.Shard{{Node: "n4", State: "ready"}}},
	}
	var b bytes.Buffer
	if err := writeReplicas(&b, replicas, map[string]string{"m": "new"}); err != nil {
		t.Fatal(err)
	}
	want := `REPLICA  MODEL  PROFILE  STATE                  SHARDS  NODES  RUN/WAIT/KV  ERROR
r1       m      cpu      ready (stale profile)  1/1     n1     -            -
r2       m      cpu      ready                  1/1     n2     -            -
r3       m      cpu      stopping               1/1     n3     -            -
r4       gone   cpu      ready                  1/1     n3     -            -
r5       m      cpu      ready (stale profile)  1/1     n4     -            -
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
