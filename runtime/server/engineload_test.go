package server

import (
	"testing"
	"time"

	"github.com/llmgw/llmgw/runtime/router"
)

// TestEngineLoads: the management API's engine loads are what the router
// last read from each replica's engine, by replica id; a replica whose
// engine said nothing has none.
func TestEngineLoads(t *testing.T) {
	s := &Server{Router: router.New()}
	s.Router.SetEndpoints("m", []router.Endpoint{{ReplicaID: "r1", URL: "http://10.0.0.1:8000"}, {ReplicaID: "r2", URL: "http://10.0.0.2:8000"}})
	for _, tg := range s.Router.Targets() {
		if tg.ReplicaID == "r1" {
			tg.SetLoad(router.EngineLoad{Known: true, Running: 4, Waiting: 1, KVUsage: 0.5, At: time.UnixMilli(1_700_000_000_123)}, 0)
		}
	}
	got := s.engineLoads()
	if l := got["r1"]; len(got) != 1 || l.GetRunning() != 4 || l.GetWaiting() != 1 || l.GetKvCacheUsage() != 0.5 || l.GetScrapedUnixMs() != 1_700_000_000_123 {
		t.Fatalf("engine loads %v, want r1 alone: running 4, waiting 1, KV 0.5, asked at 1700000000123", got)
	}
}
