package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	specv1 "github.com/llmgw/llmgw/api/specv1"
	"github.com/llmgw/llmgw/mirror"
	"github.com/llmgw/llmgw/sim/simhw"
	"github.com/llmgw/llmgw/testkit/testcluster"
	"github.com/llmgw/llmgw/testkit/weightsrv"
)

// TestOneCopyPerFabric: three nodes of one fabric that serve their caches
// to peers start three replicas of a new model at once; the mirror, by its
// own metrics, serves one copy of the weights: the first node fetches from
// it, the others follow that node's download (or copy its entry).
func TestOneCopyPerFabric(t *testing.T) {
	dir := t.TempDir()
	data := weightsrv.RandomBytes(3<<20, 51)
	file := filepath.Join(dir, "wide", "v1", "w.gguf")
	if err := os.MkdirAll(filepath.Dir(file), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, data, 0o640); err != nil {
		t.Fatal(err)
	}
	st, err := mirror.NewStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	metrics := mirror.NewMetrics()
	msrv := httptest.NewServer(mirror.BytesHandler(st, slog.New(slog.DiscardHandler), metrics))
	defer msrv.Close()
	source := msrv.URL + "/wide/v1/w.gguf"

	c := testcluster.New(t, binary, "10s", "")
	for _, id := range []string{"node01", "node02", "node03"} {
		c.StartAgent(testcluster.NodeSpec{ID: id, Fabrics: "peer_listen: 127.0.0.1:0\nfabrics: [{name: ib-a, adapters: [mlx5_0]}]", Adapters: []simhw.SimAdapter{active("mlx5_0")}})
	}
	mc := c.ManageClient()
	ctx := context.Background()
	testcluster.WaitNodesReady(t, mc, 3, 30*time.Second)
	whole := &specv1.Profile{Name: "x8", Engine: "sim", GpuClass: "h100-80g", Tp: 8, StartupTimeout: "1m"}
	if _, err := mc.CreateModel(ctx, &managev1.CreateModelRequest{Model: &managev1.Model{Name: "wide", Source: source, Scaling: &managev1.Scaling{Min: 3, Max: 3}, Profiles: []*specv1.Profile{whole}}}); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitReadyReplicas(t, mc, "wide", 3, 90*time.Second)
	if served := testcluster.MirrorServedBytes(t, metrics, "wide", "v1"); served != float64(len(data)) {
		t.Errorf("the mirror served %.0f bytes for three nodes of one fabric, want one copy (%d)", served, len(data))
	}
	fromPeer := 0
	for _, id := range []string{"node01", "node02", "node03"} {
		if strings.Contains(c.Nodes[id].Output(), `msg="fetch complete" component=fetch source=`+source+` from="peer node0`) {
			fromPeer++
		}
	}
	if fromPeer != 2 {
		t.Errorf("%d nodes took the weights from a peer, want 2", fromPeer)
	}
	for _, id := range []string{"node01", "node02", "node03"} {
		entries, _ := filepath.Glob(filepath.Join(c.NodeDirs[id], "state", "weights", "*", "w.gguf"))
		if len(entries) != 1 {
			t.Errorf("%s holds %v", id, entries)
			continue
		}
		if got, err := os.ReadFile(entries[0]); err != nil || len(got) != len(data) || string(got) != string(data) {
			t.Errorf("%s: its copy differs (%v)", id, err)
		}
	}
}

// TestFollowPeerStillFetching: two nodes of one fabric start a new model
// at once from a slow source. The node told of the other as a peer does
// not wait for that peer's download to end: half-way through the source's
// one copy, both nodes hold bytes of it (the second reads the first's
// partial file as it grows), both replicas come up, and the source served
// one copy.
func TestFollowPeerStillFetching(t *testing.T) {
	const size = 2 << 20
	m, origin := weightsrv.New(t)
	data := weightsrv.RandomBytes(size, 81)
	m.Files["slow/v1/w.gguf"] = data
	m.Rate = 1 << 20 // two seconds for one copy
	source := origin.URL + "/slow/v1/w.gguf"

	c := testcluster.New(t, binary, "10s", "")
	ids := []string{"node01", "node02"}
	for _, id := range ids {
		c.StartAgent(testcluster.NodeSpec{ID: id, Fabrics: "peer_listen: 127.0.0.1:0\nfabrics: [{name: ib-a, adapters: [mlx5_0]}]", Adapters: []simhw.SimAdapter{active("mlx5_0")}})
	}
	mc := c.ManageClient()
	ctx := context.Background()
	testcluster.WaitNodesReady(t, mc, 2, 30*time.Second)
	whole := &specv1.Profile{Name: "x8", Engine: "sim", GpuClass: "h100-80g", Tp: 8, StartupTimeout: "1m"}
	if _, err := mc.CreateModel(ctx, &managev1.CreateModelRequest{Model: &managev1.Model{Name: "slow", Source: source, Scaling: &managev1.Scaling{Min: 2, Max: 2}, Profiles: []*specv1.Profile{whole}}}); err != nil {
		t.Fatal(err)
	}
	// What each node holds of the file: its partial, or its entry.
	held := func(id string) int64 {
		var most int64
		for _, pat := range []string{".*.partial/.w.gguf.partial", ".*.partial/w.gguf", "*/w.gguf"} {
			ps, _ := filepath.Glob(filepath.Join(c.NodeDirs[id], "state", "weights", pat))
			for _, p := range ps {
				if st, err := os.Stat(p); err == nil {
					most = max(most, st.Size())
				}
			}
		}
		return most
	}
	testcluster.WaitFor(t, "the source half-way through its copy", 60*time.Second, func() (bool, string) {
		return m.Served() >= size/2, fmt.Sprint(m.Served(), " bytes served")
	})
	for _, id := range ids {
		if h := held(id); h < size/8 {
			t.Errorf("%s holds %d bytes with the source half-way (%d served): it waits for its peer's download to end rather than following it", id, h, m.Served())
		}
	}
	testcluster.WaitReadyReplicas(t, mc, "slow", 2, 90*time.Second)
	if n := m.Served(); n != size {
		t.Errorf("the source served %d bytes for two nodes of one fabric, want one copy (%d)", n, size)
	}
	fromPeer := 0
	for _, id := range ids {
		if strings.Contains(c.Nodes[id].Output(), `msg="fetch complete" component=fetch source=`+source+` from="peer node0`) {
			fromPeer++
		}
		entries, _ := filepath.Glob(filepath.Join(c.NodeDirs[id], "state", "weights", "*", "w.gguf"))
		if len(entries) != 1 {
			t.Errorf("%s holds %v", id, entries)
			continue
		}
		if got, err := os.ReadFile(entries[0]); err != nil || string(got) != string(data) {
			t.Errorf("%s: its copy differs (%v)", id, err)
		}
	}
	if fromPeer != 1 {
		t.Errorf("%d nodes took the weights from a peer, want 1", fromPeer)
	}
}
