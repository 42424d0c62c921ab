package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	specv1 "github.com/llmgw/llmgw/api/specv1"
	"github.com/llmgw/llmgw/sim/simhw"
	"github.com/llmgw/llmgw/spec"
	"github.com/llmgw/llmgw/testkit/testcluster"
	"github.com/llmgw/llmgw/testkit/weightsrv"
)

// seedEntry leaves in a node's weights cache what an earlier fetch of
// source would have: the file under the source's key, with its record.
func seedEntry(t *testing.T, weightsDir, source string, data []byte) string {
	t.Helper()
	dir := filepath.Join(weightsDir, spec.WeightsKey(source))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "w.gguf"), data, 0o640); err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(map[string]any{"source": source, "files": []map[string]any{{"path": "w.gguf", "size": len(data)}}, "fetched": time.Now().UTC()})
	if err := os.WriteFile(filepath.Join(dir, ".complete"), rec, 0o640); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestWeightsPlacementFetchAheadAndCollect: the agents report what their
// caches hold; a new model is placed on the node that already holds its
// weights (explain-placement says so) although another sorts first; a
// two-node replica's worker starts fetching while rank 0 still waits for
// its own bytes; llmgw ctl weights lists every node's cache with what could
// be freed, and --collect deletes exactly the entries no catalog model and
// no live shard uses, never an operator's files, and, once a model is
// removed and its replica gone, its weights too.
func TestWeightsPlacementFetchAheadAndCollect(t *testing.T) {
	ws, srv := weightsrv.New(t)
	nearData, bigData, oldData := weightsrv.RandomBytes(200<<10, 1), weightsrv.RandomBytes(300<<10, 2), []byte("weights of a model long gone")
	ws.Files["near/v1/w.gguf"] = nearData
	ws.Files["big/v1/w.gguf"] = bigData
	nearSrc, bigSrc, oldSrc := srv.URL+"/near/v1/w.gguf", srv.URL+"/big/v1/", srv.URL+"/old/v1/w.gguf"

	c := testcluster.New(t, binary, "10s", "")
	w1 := filepath.Join(c.Dir, "nodes", "node01", "state", "weights")
	w2 := filepath.Join(c.Dir, "nodes", "node02", "state", "weights")
	oldDir := seedEntry(t, w1, oldSrc, oldData)
	nearDir := seedEntry(t, w2, nearSrc, nearData)
	// An operator's files beside the cache's entries: never llmgw's to delete.
	operator := []string{filepath.Join(w1, "notes.txt"), filepath.Join(w1, "my-model", "x.gguf"), filepath.Join(w1, "0123456789abcdef", "y.gguf")}
	for _, p := range operator {
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("mine"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"node01", "node02"} {
		c.StartAgent(testcluster.NodeSpec{ID: id, Fabrics: "fabrics: [{name: ib-a, adapters: [mlx5_0]}]", Adapters: []simhw.SimAdapter{active("mlx5_0")}})
	}
	mc := c.ManageClient()
	ctx := context.Background()
	weightsOf := func() map[string]*managev1.NodeWeights {
		out := map[string]*managev1.NodeWeights{}
		resp, err := mc.ListWeights(ctx, &managev1.ListWeightsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range resp.GetNodes() {
			out[n.GetNode()] = n
		}
		return out
	}
	testcluster.WaitFor(t, "both caches reported", 30*time.Second, func() (bool, string) {
		w := weightsOf()
		return len(w["node01"].GetEntries()) == 1 && len(w["node02"].GetEntries()) == 1, ""
	})

	// Placement: node01 sorts first, node02 holds the weights.
	profile := &specv1.Profile{Name: "h100", Engine: "sim", GpuClass: "h100-80g", Tp: 1, StartupTimeout: "1m"}
	if _, err := mc.CreateModel(ctx, &managev1.CreateModelRequest{Model: &managev1.Model{Name: "near", Source: nearSrc, Scaling: &managev1.Scaling{Min: 1, Max: 1}, Profiles: []*specv1.Profile{profile}}}); err != nil {
		t.Fatal(err)
	}
	waitReady := func(model string) *managev1.Replica {
		var rep *managev1.Replica
		testcluster.WaitFor(t, model+" ready", 90*time.Second, func() (bool, string) {
			rs, err := mc.ListReplicas(ctx, &managev1.ListReplicasRequest{Model: model})
			if err != nil {
				return false, err.Error()
			}
			var states []string
			for _, r := range rs.GetReplicas() {
				states = append(states, r.GetState()+" "+r.GetError())
				if r.GetState() == "ready" {
					rep = r
					return true, ""
				}
			}
			return false, strings.Join(states, "; ")
		})
		return rep
	}
	if rep := waitReady("near"); rep.GetShards()[0].GetNode() != "node02" {
		t.Errorf("near placed on %s, want node02, which holds its weights", rep.GetShards()[0].GetNode())
	}
	if n := ws.Count("near/v1/w.gguf"); n != 1 {
		t.Errorf("near's file was asked for %d times, want once (the control plane's source check): node02 held it", n)
	}
	ex, err := mc.ExplainPlacement(ctx, &managev1.ExplainPlacementRequest{Model: "near"})
	if err != nil {
		t.Fatal(err)
	}
	var holds []string
	for _, p := range ex.GetProfiles() {
		for _, v := range p.GetNodes() {
			if v.GetReason() == "holds the weights" {
				holds = append(holds, v.GetNode())
			}
		}
	}
	if !slices.Equal(holds, []string{"node02"}) {
		t.Errorf("explain-placement says %v hold the weights, want node02:\n%v", holds, ex)
	}

	// A two-node replica: the worker fetches while rank 0 is still held.
	ws.Mu.Lock()
	hold := make(chan struct{})
	ws.Hold = hold
	ws.Mu.Unlock()
	two := &specv1.Profile{Name: "x2", Engine: "sim", GpuClass: "h100-80g", Tp: 4, Nodes: 2, StartupTimeout: "1m"}
	go func() {
		// The source check asks the held manifest too, and waits out its timeout.
		_, err := mc.CreateModel(ctx, &managev1.CreateModelRequest{Model: &managev1.Model{Name: "big", Source: bigSrc, Scaling: &managev1.Scaling{Min: 1, Max: 1}, Profiles: []*specv1.Profile{two}}})
		if err != nil {
			t.Errorf("creating big: %v", err)
		}
	}()
	testcluster.WaitFor(t, "both nodes fetching big while held", 30*time.Second, func() (bool, string) {
		return ws.Count("big/v1/") == 3, "manifest requests: control plane's check, rank 0's node, the worker's node"
	})
	ws.Mu.Lock()
	ws.Hold = nil
	ws.Mu.Unlock()
	close(hold)
	waitReady("big")
	if n := ws.Count("big/v1/w.gguf"); n != 2 {
		t.Errorf("big's file fetched %d times, want once per node", n)
	}

	// What could be freed: old on node01 only.
	ctlEnv := append(os.Environ(), "LLMGW_ENDPOINT="+c.Manage, "LLMGW_TOKEN="+c.Token, "LLMGW_CA_CERT="+filepath.Join(c.PKIDir, "ca.pem"))
	cmd := exec.Command(binary, "ctl", "weights")
	cmd.Env = ctlEnv
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ctl weights: %v\n%s", err, out)
	}
	for _, want := range []string{"node01: 2 entries", "could be freed (1 entry)", "node02: 2 entries", "0 B could be freed (0 entries)"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("ctl weights does not say %q:\n%s", want, out)
		}
	}
	collectable := 0
	for line := range strings.Lines(string(out)) {
		if strings.Contains(line, "collectable") {
			collectable++
			if !strings.HasPrefix(line, "node01 ") || !strings.Contains(line, oldSrc) {
				t.Errorf("collectable: %s", line)
			}
		}
	}
	if collectable != 1 {
		t.Errorf("%d lines collectable, want old's on node01:\n%s", collectable, out)
	}
	cmd = exec.Command(binary, "ctl", "weights", "--collect")
	cmd.Env = ctlEnv
	out, err = cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ctl weights --collect: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "node01: deleted "+spec.WeightsKey(oldSrc)) || !strings.Contains(string(out), "node02: deleted 0 entries") {
		t.Errorf("ctl weights --collect:\n%s", out)
	}
	if _, err := os.Stat(oldDir); !os.IsNotExist(err) {
		t.Errorf("old's entry still there: %v", err)
	}
	for _, p := range append(operator, filepath.Join(nearDir, "w.gguf"), filepath.Join(w1, spec.WeightsKey(bigSrc)), filepath.Join(w2, spec.WeightsKey(bigSrc))) {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s is gone: %v", p, err)
		}
	}

	// near leaves the catalog; once its replica is gone its weights go too.
	if _, err := mc.DeleteModel(ctx, &managev1.DeleteModelRequest{Name: "near"}); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, "near's replica gone", 30*time.Second, func() (bool, string) {
		rs, err := mc.ListReplicas(ctx, &managev1.ListReplicasRequest{Model: "near"})
		if err != nil {
			return false, err.Error()
		}
		for _, r := range rs.GetReplicas() {
			if r.GetState() != "failed" {
				return false, r.GetState()
			}
		}
		return true, ""
	})
	resp, err := mc.CollectWeights(ctx, &managev1.CollectWeightsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range resp.GetNodes() {
		var keys []string
		for _, e := range n.GetEntries() {
			keys = append(keys, e.GetKey())
		}
		want := []string(nil)
		if n.GetNode() == "node02" {
			want = []string{spec.WeightsKey(nearSrc)}
		}
		if !slices.Equal(keys, want) || len(n.GetErrors()) != 0 {
			t.Errorf("%s: collected %v (errors %v), want %v", n.GetNode(), keys, n.GetErrors(), want)
		}
	}
	if _, err := os.Stat(nearDir); !os.IsNotExist(err) {
		t.Errorf("near's entry still there: %v", err)
	}
}
