package ctl

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/llmgw/llmgw/api/managev1"
)

func TestWeights(t *testing.T) {
	f := cannedManage()
	f.weights = []*managev1.NodeWeights{
		{Node: "node01", Reported: true, Connected: true, Fabric: "ib-a", DiskFreeBytes: 100 * gib, DiskTotalBytes: 400 * gib, Entries: []*managev1.WeightsEntry{
			{Key: "0a1b2c3d4e5f6071", Source: "http://mirror:8081/chat/v1/w.gguf", SizeBytes: 4 * gib, Models: []string{"chat"}, Shards: []string{"r-1-0"}},
			{Key: "ffee000011112222", Source: "hf:org/old@v1", SizeBytes: 512 << 20, Collectable: true},
		}},
		{Node: "node03", Connected: true},
	}
	code, out, errOut := runCtl(t, startServer(t, f), "weights")
	want := "NODE    KEY               SIZE     USED BY               SOURCE\n" +
		"node01  0a1b2c3d4e5f6071  4.0 GiB  chat,shards r-1-0     http://mirror:8081/chat/v1/w.gguf\n" +
		"node01  ffee000011112222  512 MiB  nothing: collectable  hf:org/old@v1\n" +
		"\n" +
		"node01: 2 entries, 4.5 GiB; 512 MiB could be freed (1 entry); disk 100 GiB free of 400 GiB\n" +
		"node03: cache not reported (its agent does not report one)\n"
	if code != 0 || out != want || errOut != "" {
		t.Fatalf("code %d\nstdout:\n%s\nwant:\n%s\nstderr: %s", code, out, want, errOut)
	}

	f.collected = []*managev1.NodeWeights{
		{Node: "node01", Reported: true, Entries: []*managev1.WeightsEntry{{Key: "ffee000011112222", Source: "hf:org/old@v1", SizeBytes: 512 << 20}}},
		{Node: "node02", Errors: []string{"not connected: nothing collected"}},
	}
	code, out, errOut = runCtl(t, startServer(t, f), "weights", "--collect", "--wait", "30s")
	wantOut := "node01: deleted ffee000011112222 (hf:org/old@v1, 512 MiB)\nnode01: deleted 1 entry, 512 MiB\nnode02: deleted 0 entries, 0 B\n"
	wantErr := "llmgw ctl: node node02: not connected: nothing collected\n"
	if code != 1 || out != wantOut || errOut != wantErr {
		t.Fatalf("code %d\nstdout:\n%s\nwant:\n%s\nstderr:\n%s\nwant:\n%s", code, out, wantOut, errOut, wantErr)
	}
	if len(f.collects) != 1 || !proto.Equal(f.collects[0], &managev1.CollectWeightsRequest{TimeoutMs: 30_000}) {
		t.Errorf("asked %v", f.collects)
	}

	f.collected = f.collected[:1]
	f.collected[0].Entries = append(f.collected[0].Entries,
		&managev1.WeightsEntry{Key: "0123456789abcdef", Source: "hf:org/gone@v2", SizeBytes: 3 << 20, Partial: true},
		&managev1.WeightsEntry{Key: "fedcba9876543210", SizeBytes: 1 << 10, Partial: true})
	code, out, _ = runCtl(t, startServer(t, f), "weights", "--collect", "--dry-run", "--node", "node01")
	if want := "node01: would delete ffee000011112222 (hf:org/old@v1, 512 MiB)\n" +
		"node01: would delete partial download 0123456789abcdef (hf:org/gone@v2, 3.0 MiB)\n" +
		"node01: would delete partial download fedcba9876543210 (source not recorded, 1.0 KiB)\n" +
		"node01: would delete 3 entries, 515 MiB\n"; code != 0 || out != want {
		t.Fatalf("dry run: code %d\n%s\nwant:\n%s", code, out, want)
	}
	if !proto.Equal(f.collects[1], &managev1.CollectWeightsRequest{Node: "node01", DryRun: true, TimeoutMs: 60_000}) {
		t.Errorf("asked %v", f.collects[1])
	}

	if code, _, errOut := runCtl(t, startServer(t, f), "weights", "--dry-run"); code != 2 || errOut == "" {
		t.Errorf("--dry-run alone: code %d, %q", code, errOut)
	}
}

// TestStatusHoldings: ctl status ends with, per model, how many nodes of
// each fabric hold its weights, so a model seeded into one fabric shows.
func TestStatusHoldings(t *testing.T) {
	f := cannedManage()
	f.status.Holdings = []*managev1.ModelHoldings{{Model: "coder", Source: "http://mirror:8081/coder/v1/w.gguf", Fabrics: []*managev1.FabricHolding{
		{Fabric: "", Nodes: 1, Holding: 0}, {Fabric: "ib-a", Nodes: 2, Holding: 2}, {Fabric: "ib-b", Nodes: 3, Holding: 0},
	}}}
	code, out, _ := runCtl(t, startServer(t, f), "status")
	want := "version:   0.4.0\nnodes:     2/3 ready, 1 lost\nmodels:    2\nreplicas:  1/2 ready\ngpus:      2/16 used\n\n" +
		"MODEL  NODES HOLDING ITS WEIGHTS, PER FABRIC\ncoder  no fabric 0/1 nodes, ib-a 2/2 nodes, ib-b 0/3 nodes\n"
	if code != 0 || out != want {
		t.Fatalf("code %d\n%s\nwant\n%s", code, out, want)
	}
}
