package probe

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/sim/simengine"
)

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func snapshotOf(r *router.Router, model, replica string) router.EndpointLoad {
	for _, l := range r.Snapshot()[model] {
		if l.ReplicaID == replica {
			return l
		}
	}
	return router.EndpointLoad{}
}

// TestDownReplicaReturnsWhenEngineAnswers: a replica the gateway took out
// of the table stays out while its address refuses connections or its
// engine does not answer /health with 200, and returns once it does.
func TestDownReplicaReturnsWhenEngineAnswers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + l.Addr().String()
	l.Close()
	eng, err := simengine.New(simengine.Config{ServedModelName: "m"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var alive atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !alive.Load() {
			http.Error(w, "loading", http.StatusServiceUnavailable)
			return
		}
		eng.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	rt := router.New()
	rt.SetEndpoints("m", []router.Endpoint{{ReplicaID: "gone", URL: refused}, {ReplicaID: "r", URL: srv.URL}})
	for range 2 {
		lease, err := rt.Pick("m", "")
		if err != nil {
			t.Fatal(err)
		}
		lease.Fail() // what the gateway does on connection refused
	}
	if _, err := rt.Pick("m", ""); err == nil {
		t.Fatal("failed replicas are still picked")
	}
	p := New(Options{Router: rt, Timeout: 200 * time.Millisecond})
	p.Once(t.Context())
	if !snapshotOf(rt, "m", "gone").Down || !snapshotOf(rt, "m", "r").Down {
		t.Fatal("a replica returned while its engine does not answer")
	}
	alive.Store(true)
	p.Once(t.Context())
	if snapshotOf(rt, "m", "r").Down {
		t.Fatal("the replica did not return after its engine answered /health")
	}
	if !snapshotOf(rt, "m", "gone").Down {
		t.Fatal("the replica at a refused address returned")
	}
	for range 4 {
		lease, err := rt.Pick("m", "")
		if err != nil || lease.Endpoint().ReplicaID != "r" {
			t.Fatalf("Pick after the replica returned: %v %q, want r", err, lease.Endpoint().ReplicaID)
		}
		lease.Done()
	}
}

// TestLoadFromEngineMetrics: the prober reads how many requests a sim
// engine runs and queues (vLLM's names) into the router.
func TestLoadFromEngineMetrics(t *testing.T) {
	eng, err := simengine.New(simengine.Config{ServedModelName: "m", MaxNumSeqs: 1, DecodeTokensPerSec: 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(eng.Handler())
	t.Cleanup(srv.Close)
	rt := router.New()
	rt.SetEndpoints("m", []router.Endpoint{{ReplicaID: "r", URL: srv.URL}})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for range 3 {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions",
				strings.NewReader(`{"model":"m","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	p := New(Options{Router: rt, LoadInterval: time.Millisecond, Interval: time.Millisecond})
	eventually(t, "engine load 1 running, 2 waiting", func() bool {
		p.Once(t.Context())
		e := snapshotOf(rt, "m", "r").Engine
		return e.Known && e.Running == 1 && e.Waiting == 2
	})
	e := snapshotOf(rt, "m", "r").Engine
	if e.KVUsage < 0 || e.KVUsage > 1 {
		t.Errorf("KV usage %v, want a fraction", e.KVUsage)
	}
}

func TestParseLoad(t *testing.T) {
	tests := []struct {
		name, text string
		want       router.EngineLoad
	}{
		{"vllm", "vllm:num_requests_running{model_name=\"m\"} 3\nvllm:num_requests_waiting{model_name=\"m\"} 4\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.5\n",
			router.EngineLoad{Known: true, Running: 3, Waiting: 4, KVUsage: 0.5}},
		{"sglang", "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 2\nsglang:num_queue_reqs 1\nsglang:token_usage 0.25\n",
			router.EngineLoad{Known: true, Running: 2, Waiting: 1, KVUsage: 0.25}},
		{"llama.cpp", "llamacpp:requests_processing 1\nllamacpp:requests_deferred 0\nllamacpp:kv_cache_usage_ratio 0.1\n",
			router.EngineLoad{Known: true, Running: 1, KVUsage: 0.1}},
		{"no kv", "vllm:num_requests_running 1\n", router.EngineLoad{Known: true, Running: 1, KVUsage: -1}},
		{"unknown engine", "process_cpu_seconds_total 1\n", router.EngineLoad{KVUsage: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseLoad(strings.NewReader(tt.text))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("ParseLoad = %+v, want %+v", got, tt.want)
			}
		})
	}
}
