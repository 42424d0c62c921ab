package router

import (
	"fmt"
	"testing"
)

// TestPrefixBitsReusedClean: replicas come and go over a model's lifetime
// (far more than 64 of them); each new one gets a bit no live replica
// holds, and inherits no prefix a gone replica took.
func TestPrefixBitsReusedClean(t *testing.T) {
	r := New()
	key := PrefixKey(prompt("sys", "conv", 3))
	for i := range 200 {
		id := fmt.Sprintf("r%d", i)
		r.SetEndpoints("m", []Endpoint{ep("keep", 1), ep(id, 1)})
		ms := (*r.models.Load())["m"]
		if m := ms.index.lookup(key); m.depth > 0 {
			var bit uint64
			for _, u := range (*r.table.Load())["m"].upstreams {
				if u.ep.ReplicaID == id {
					bit = u.st.bit
				}
			}
			if m.holders&bit != 0 {
				t.Fatalf("replica %s (new) already holds the prefix a gone replica took (holders %b, its bit %b)", id, m.holders, bit)
			}
		}
		// The replica takes the conversation, then leaves.
		ms.index.record(key, bitOf(t, r, id))
		r.SetEndpoints("m", []Endpoint{ep("keep", 1)})
	}
	keepBit := bitOf(t, r, "keep")
	ms := (*r.models.Load())["m"]
	if got := ms.bitUsers[0] + ms.bitUsers[1]; got != 1 || keepBit != 1 {
		t.Errorf("after 200 replicas came and went: bit users %v, keep's bit %b; want only keep's bit in use", ms.bitUsers[:2], keepBit)
	}
}

func bitOf(t *testing.T, r *Router, id string) uint64 {
	t.Helper()
	for _, u := range (*r.table.Load())["m"].upstreams {
		if u.ep.ReplicaID == id {
			return u.st.bit
		}
	}
	t.Fatalf("no endpoint %s", id)
	return 0
}
