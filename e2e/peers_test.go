package e2e

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
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
	testcluster.WaitFor(t, "three nodes ready", 30*time.Second, func() (bool, string) {
		ns, err := mc.ListNodes(ctx, &managev1.ListNodesRequest{})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, n := range ns.GetNodes() {
			if n.GetState() == "ready" {
				ready++
			}
		}
		return ready == 3, fmt.Sprint(ready, " ready")
	})
	whole := &specv1.Profile{Name: "x8", Engine: "sim", GpuClass: "h100-80g", Tp: 8, StartupTimeout: "1m"}
	if _, err := mc.CreateModel(ctx, &managev1.CreateModelRequest{Model: &managev1.Model{Name: "wide", Source: source, Scaling: &managev1.Scaling{Min: 3, Max: 3}, Profiles: []*specv1.Profile{whole}}}); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, "three replicas ready", 90*time.Second, func() (bool, string) {
		rs, err := mc.ListReplicas(ctx, &managev1.ListReplicasRequest{Model: "wide"})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		var states []string
		for _, r := range rs.GetReplicas() {
			states = append(states, r.GetState()+" "+r.GetError())
			if r.GetState() == "ready" {
				ready++
			}
		}
		return ready == 3, strings.Join(states, "; ")
	})
	if served := mirrorServedBytes(t, metrics, "wide", "v1"); served != float64(len(data)) {
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

func mirrorServedBytes(t *testing.T, m *mirror.Metrics, model, version string) float64 {
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	want := fmt.Sprintf(`llmgw_mirror_served_bytes_total{model=%q,version=%q} `, model, version)
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), want); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return 0
}
