//go:build !nvml

package discovery

import "testing"

// TestPortableTopologyUnknown: the portable build reads no topology and
// says it is unknown, never that there is no NVLink.
func TestPortableTopologyUnknown(t *testing.T) {
	gpus := []GPU{{Index: 0, UUID: "GPU-0"}, {Index: 1, UUID: "GPU-1"}}
	if note := ProbeTopology(gpus); note != TopologyUnknownPortable {
		t.Fatalf("note %q", note)
	}
	for _, g := range gpus {
		if g.NVLinkKnown || g.NVLinkPeers != nil {
			t.Errorf("GPU %d: known %v peers %v, want unknown", g.Index, g.NVLinkKnown, g.NVLinkPeers)
		}
	}
	if note := ProbeTopology(nil); note != "" {
		t.Errorf("no GPU: note %q", note)
	}
}
