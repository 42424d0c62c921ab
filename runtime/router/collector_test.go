package router

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCollector(t *testing.T) {
	r := New()
	r.SetEndpoints("m", []Endpoint{ep("a", 5), ep("b", 0)})
	l, _ := r.Route("m", Request{Exclude: []string{"b"}})
	defer l.Done()
	for _, tg := range r.Targets() {
		if tg.ReplicaID == "b" {
			tg.MarkDown()
		} else {
			tg.SetLoad(EngineLoad{Known: true, Running: 3, Waiting: 2}, 0)
		}
	}
	want := `
# HELP llmgw_router_engine_requests Requests a replica's engine last reported running and waiting (absent when its engine publishes no metrics).
# TYPE llmgw_router_engine_requests gauge
llmgw_router_engine_requests{model="m",replica="a",state="running"} 3
llmgw_router_engine_requests{model="m",replica="a",state="waiting"} 2
# HELP llmgw_router_replica_up 1 while a ready replica takes requests, 0 while it is out of the routing table after a failed connection (passive health).
# TYPE llmgw_router_replica_up gauge
llmgw_router_replica_up{model="m",replica="a"} 1
llmgw_router_replica_up{model="m",replica="b"} 0
# HELP llmgw_router_replica_weight The weight the router divides a replica's load by: its profile's weight, at least 1.
# TYPE llmgw_router_replica_weight gauge
llmgw_router_replica_weight{model="m",replica="a"} 5
llmgw_router_replica_weight{model="m",replica="b"} 1
# HELP llmgw_router_requests_in_flight Requests this control plane has in flight on a replica.
# TYPE llmgw_router_requests_in_flight gauge
llmgw_router_requests_in_flight{model="m",replica="a"} 1
llmgw_router_requests_in_flight{model="m",replica="b"} 0
`
	if err := testutil.CollectAndCompare(r.Collector(), strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
