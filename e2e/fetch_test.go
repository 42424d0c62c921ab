package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

// slowMirror serves one file as the mirror does (Range, Content-Length,
// X-Llmgw-Sha256), 32 KiB every 40ms so that a fetch is seen in progress,
// and cuts its first connection after 300 KiB.
type slowMirror struct {
	body []byte
	mu   sync.Mutex
	gets int
	rng  []string
}

func (m *slowMirror) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/sim/v1/wedged.gguf" {
		http.Error(w, "mirror overloaded", http.StatusServiceUnavailable)
		return
	}
	if r.URL.Path != "/sim/v1/w.gguf" {
		http.NotFound(w, r)
		return
	}
	m.mu.Lock()
	m.gets++
	first := m.gets == 1
	if rg := r.Header.Get("Range"); rg != "" {
		m.rng = append(m.rng, rg)
	}
	m.mu.Unlock()
	sum := sha256.Sum256(m.body)
	w.Header().Set("X-Llmgw-Sha256", hex.EncodeToString(sum[:]))
	http.ServeContent(&throttled{ResponseWriter: w, cutAt: map[bool]int{true: 300 << 10, false: -1}[first]}, r, "", time.Time{}, bytes.NewReader(m.body))
}

type throttled struct {
	http.ResponseWriter
	sent, cutAt int
}

func (t *throttled) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		c := b[:min(len(b), 32<<10)]
		w, err := t.ResponseWriter.Write(c)
		n += w
		t.sent += w
		if err != nil {
			return n, err
		}
		t.ResponseWriter.(http.Flusher).Flush()
		if t.cutAt >= 0 && t.sent >= t.cutAt {
			panic(http.ErrAbortHandler)
		}
		b = b[len(c):]
		time.Sleep(40 * time.Millisecond)
	}
	return n, nil
}

// TestFetchedWeightsServe: two replicas of a sim model whose source is a
// mirror URL, placed on one node, cost the mirror one download (plus the
// one resume its cut connection needs); ctl's data shows the fetch in
// progress; the engines are launched with the cache's local path (the
// shard records in the agent's state directory and the engine's own model
// card say so), and the model serves. A model whose file is missing fails
// with the source and the 404; one whose mirror answers 503 is reported
// stalled with the source and that answer, not failed.
func TestFetchedWeightsServe(t *testing.T) {
	m := &slowMirror{body: make([]byte, 2<<20)}
	r := rand.New(rand.NewPCG(4, 2))
	for i := range m.body {
		m.body[i] = byte(r.Uint32())
	}
	srv := httptest.NewServer(m)
	defer srv.Close()
	source := srv.URL + "/sim/v1/w.gguf"
	c := testcluster.New(t, binary, "10s", fmt.Sprintf(`  - name: fetched
    source: %s
    scaling: { min: 2, max: 2 }
    profiles:
      - { name: h100, engine: sim, gpu_class: h100-80g, tp: 1, startup_timeout: 1m }
  - name: missing
    source: %s/sim/v1/missing.gguf
    scaling: { min: 1, max: 1 }
    profiles:
      - { name: h100, engine: sim, gpu_class: h100-80g, tp: 1, startup_timeout: 1m }
  - name: wedged
    source: %s/sim/v1/wedged.gguf
    scaling: { min: 1, max: 1 }
    profiles:
      - { name: h100, engine: sim, gpu_class: h100-80g, tp: 1, startup_timeout: 1m }
`, source, srv.URL, srv.URL))
	c.StartAgent(testcluster.NodeSpec{ID: "node01", Fabrics: "fetch: { stall_after: 2s, give_up_after: 1h }\n"})
	mc := c.ManageClient()
	ctx := context.Background()

	var sawFetch *managev1.ShardFetch
	testcluster.WaitFor(t, "both replicas of fetched ready", 90*time.Second, func() (bool, string) {
		rs, err := mc.ListReplicas(ctx, &managev1.ListReplicasRequest{Model: "fetched"})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		var states []string
		for _, r := range rs.GetReplicas() {
			states = append(states, r.GetId()+"="+r.GetState())
			for _, s := range r.GetShards() {
				if f := s.GetFetch(); f != nil && f.GetBytesDone() > 0 && sawFetch == nil {
					sawFetch = f
				}
			}
			if r.GetState() == "ready" {
				ready++
			}
		}
		return ready == 2, strings.Join(states, "; ")
	})
	if sawFetch == nil {
		t.Error("no replica listing showed the fetch in progress")
	} else if sawFetch.GetSource() != source || sawFetch.GetBytesTotal() != int64(len(m.body)) {
		t.Errorf("fetch progress %v, want source %s and total %d", sawFetch, source, len(m.body))
	}
	m.mu.Lock()
	gets, ranges := m.gets, m.rng
	m.mu.Unlock()
	if gets != 2 || len(ranges) != 1 {
		t.Errorf("mirror saw %d requests (Range: %v) for two replicas on one node, want 2: one download, resumed once after its cut", gets, ranges)
	}

	stateDir := filepath.Join(c.NodeDirs["node01"], "state")
	records, _ := filepath.Glob(filepath.Join(stateDir, "*.json"))
	var paths []string
	for _, p := range records {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var rec struct {
			Spec struct {
				Model  string `json:"model"`
				Source string `json:"source"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if rec.Spec.Model == "fetched" {
			paths = append(paths, rec.Spec.Source)
		}
	}
	if len(paths) != 2 || paths[0] != paths[1] || !strings.HasPrefix(paths[0], filepath.Join(stateDir, "weights")+"/") {
		t.Fatalf("shard records give the engines %v, want one path under %s/weights", paths, stateDir)
	}
	if got, err := os.ReadFile(paths[0]); err != nil || !bytes.Equal(got, m.body) {
		t.Fatalf("%s is not the mirror's file (%v)", paths[0], err)
	}

	rs, err := mc.ListReplicas(ctx, &managev1.ListReplicasRequest{Model: "fetched"})
	if err != nil {
		t.Fatal(err)
	}
	endpoint := rs.GetReplicas()[0].GetShards()[0].GetEndpoint()
	resp, err := http.Get("http://" + endpoint + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var card struct {
		Data []struct {
			Root string `json:"root"`
		} `json:"data"`
	}
	err = json.NewDecoder(resp.Body).Decode(&card)
	resp.Body.Close()
	if err != nil || len(card.Data) != 1 || card.Data[0].Root != paths[0] {
		t.Errorf("the engine's model card %+v (%v), want --model %s", card, err, paths[0])
	}
	client := openai.NewClient(option.WithBaseURL(c.Client), option.WithAPIKey(c.APIKey), option.WithMaxRetries(0))
	if _, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    "fetched",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("weights fetched")},
	}); err != nil {
		t.Fatalf("request to the fetched model: %v", err)
	}

	testcluster.WaitFor(t, "missing fails with the source and the 404", 60*time.Second, func() (bool, string) {
		rs, err := mc.ListReplicas(ctx, &managev1.ListReplicasRequest{Model: "missing"})
		if err != nil {
			return false, err.Error()
		}
		var errs []string
		for _, r := range rs.GetReplicas() {
			for _, s := range r.GetShards() {
				if strings.Contains(s.GetError(), srv.URL+"/sim/v1/missing.gguf") && strings.Contains(s.GetError(), "404") {
					return true, ""
				}
				errs = append(errs, s.GetError())
			}
			errs = append(errs, r.GetState()+": "+r.GetError())
		}
		return false, strings.Join(errs, "; ")
	})

	testcluster.WaitFor(t, "wedged reported stalled with the 503", 60*time.Second, func() (bool, string) {
		rs, err := mc.ListReplicas(ctx, &managev1.ListReplicasRequest{Model: "wedged"})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, r := range rs.GetReplicas() {
			for _, s := range r.GetShards() {
				f := s.GetFetch()
				if f.GetStalled() && f.GetSource() == srv.URL+"/sim/v1/wedged.gguf" && strings.Contains(f.GetLastError(), "503") && r.GetState() == "starting" {
					return true, ""
				}
				seen = append(seen, fmt.Sprintf("%s %s %v", r.GetState(), s.GetState(), f))
			}
		}
		return false, strings.Join(seen, "; ")
	})
}
