package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/testkit/pgtest"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

// lazyHAModel loads on demand and is stopped after 4 s unasked; it
// streams at 20 tokens/s, so a request of 160 tokens is in flight for 8 s,
// twice the idle timeout.
const lazyHAModel = `  - name: sim-lazy
    source: sim://lazy-ha
    scaling: { min: 0, max: 1, idle_timeout: 4s }
    profiles:
      - { name: h100, engine: sim, gpu_class: h100-80g, tp: 1, startup_timeout: 1m, args: ["--decode-tps", "20"] }
`

// scrape reads a metrics page.
func scrape(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// waitStandbyRoutes waits until the standby routes n replicas of model. A
// standby is ready once the leader has written its routes at all (with
// nothing running too) and follows their changes within half a second, so
// a test that has seen a replica ready on the leader waits for this before
// it sends requests through the standby.
func waitStandbyRoutes(t *testing.T, b *testcluster.ControlPlane, model string, n int) {
	t.Helper()
	testcluster.WaitFor(t, fmt.Sprintf("the standby to route to %d replicas of %s", n, model), 5*time.Second, func() (bool, string) {
		text, err := scrape(b.Metrics)
		if err != nil {
			return false, err.Error()
		}
		got := strings.Count(text, `llmgw_router_replica_up{model="`+model+`"`)
		return got == n, fmt.Sprintf("%d routed", got)
	})
}

// lazyBody is a chat request for sim-lazy of n tokens.
func lazyBody(n int, stream bool) string {
	return fmt.Sprintf(`{"model":"sim-lazy","max_tokens":%d,"stream":%t,"messages":[{"role":"user","content":"wake up"}]}`, n, stream)
}

// TestStandbyLoadsOnDemand runs two control planes on one PostgreSQL and
// sends every request for a model loaded on demand through the standby.
// The first request has the leader place a replica and is served through
// the standby within the cold-start wait. The leader does not stop the
// replica while requests through the standby keep coming, nor while one
// runs longer than the idle timeout, and stops it once it is idle. When
// the standby dies with a request in flight, what it reported ages out and
// the replica is stopped.
func TestStandbyLoadsOnDemand(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	c := testcluster.NewCluster(t, binary, testcluster.Options{Grace: "20s", Models: lazyHAModel, Store: dsn})
	b := c.AddControlPlane("cp-2")
	mc := c.ManageClient()
	c.StartAgent(testcluster.NodeSpec{ID: "node01", Servers: []string{c.AgentAddr, b.AgentAddr}})
	ctx := context.Background()

	// live returns the ids of sim-lazy's replicas running: starting, ready
	// or draining.
	live := func() ([]string, string) {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		rs, err := mc.ListReplicas(cctx, &managev1.ListReplicasRequest{Model: "sim-lazy"})
		if err != nil {
			return nil, err.Error()
		}
		var ids, states []string
		for _, r := range rs.GetReplicas() {
			states = append(states, r.GetId()+"="+r.GetState())
			if st := r.GetState(); st == "ready" || st == "starting" || st == "draining" { // running
				ids = append(ids, r.GetId())
			}
		}
		sort.Strings(ids)
		return ids, strings.Join(states, "; ")
	}
	testcluster.WaitFor(t, "node01 ready on the leader", 30*time.Second, func() (bool, string) {
		n, err := mc.GetNode(ctx, &managev1.GetNodeRequest{Id: "node01"})
		return err == nil && n.GetState() == "ready", "not yet"
	})
	testcluster.WaitFor(t, "the standby to be ready", 20*time.Second, func() (bool, string) {
		got := httpStatus(root(b.Client) + "/ready")
		return got == http.StatusOK, fmt.Sprint(got)
	})
	if ids, states := live(); len(ids) != 0 {
		t.Fatalf("replicas of a model nobody asked for: %s", states)
	}

	// The first request, through the standby, is served.
	start := time.Now()
	if r := haPostRaw(ctx, b.Client, c.APIKey, lazyBody(5, false), false); r.err != nil || r.status != http.StatusOK {
		t.Fatalf("first request for the on-demand model through the standby: %d %v %s", r.status, r.err, r.body)
	}
	t.Logf("first request through the standby answered after %s: placed by the leader, served through the standby", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(c.Server.Output(), "model asked for: placing a replica on demand") {
		t.Errorf("the leader did not log that the model was asked for:\n%s", testcluster.Tail(c.Server.Output(), 20))
	}
	first, states := live()
	if len(first) != 1 {
		t.Fatalf("replicas after the first request: %s; want one", states)
	}
	if text, err := scrape(b.Metrics); err != nil || !strings.Contains(text, `llmgw_router_replica_up{model="sim-lazy",replica="`+first[0]+`"} 1`) {
		t.Errorf("the standby's routes after it served the model do not hold %s (%v):\n%s", first[0], err, text)
	}

	// Requests through the standby every second for twice the idle
	// timeout: the leader keeps the replica.
	for i := range 8 {
		if r := haPostRaw(ctx, b.Client, c.APIKey, lazyBody(2, false), false); r.err != nil || r.status != http.StatusOK {
			t.Fatalf("request %d through the standby while the model is in use: %d %v %s", i, r.status, r.err, r.body)
		}
		if ids, states := live(); len(ids) != 1 || ids[0] != first[0] {
			t.Fatalf("after %d requests a second apart through the standby the replicas are %s; want %s kept", i+1, states, first[0])
		}
		time.Sleep(time.Second) // the pace of the requests
	}

	// One request through the standby runs for twice the idle timeout:
	// the replica stays while it runs and is stopped once it ended.
	long := make(chan haResult, 1)
	streaming := make(chan struct{})
	go func() {
		long <- haPostFirst(ctx, b.Client, c.APIKey, lazyBody(160, true), true, func() { close(streaming) })
	}()
	<-streaming
	var r haResult
	for done := false; !done; {
		select {
		case r = <-long:
			done = true
		case <-time.After(500 * time.Millisecond):
			if ids, states := live(); len(ids) != 1 || ids[0] != first[0] {
				t.Fatalf("with a request in flight through the standby the replicas are %s; want %s kept", states, first[0])
			}
		}
	}
	if r.err != nil || r.status != http.StatusOK {
		t.Fatalf("the long request through the standby: %d %v %s", r.status, r.err, testcluster.Tail(r.body, 3))
	}
	if ran := r.end.Sub(r.start); ran < 6*time.Second {
		t.Fatalf("the long request ran %s; want it longer than the idle timeout (4s) to mean anything", ran)
	}
	testcluster.WaitFor(t, "the idle replica stopped", 20*time.Second, func() (bool, string) {
		ids, states := live()
		return len(ids) == 0, states
	})
	t.Logf("replica stopped %s after the request through the standby ended", time.Since(r.end).Round(time.Millisecond))
	if !strings.Contains(c.Server.Output(), "idle for 4s (scaling.idle_timeout)") {
		t.Errorf("the leader did not log why it stopped the replica:\n%s", testcluster.Tail(c.Server.Output(), 20))
	}

	// The standby follows the leader's routes four times a second; a
	// request sent to it before it has dropped the stopped replica would
	// still try that replica (and get 502 upstream_error).
	testcluster.WaitFor(t, "the standby to drop the stopped replica from its routes", 5*time.Second, func() (bool, string) {
		text, err := scrape(b.Metrics)
		if err != nil {
			return false, err.Error()
		}
		return !strings.Contains(text, `llmgw_router_replica_up{model="sim-lazy"`), "still routed"
	})

	// Placed again through the standby; then the standby dies with a
	// request in flight: what it reported ages out (ha.lease, 6 s) and the
	// replica is stopped.
	if r := haPostRaw(ctx, b.Client, c.APIKey, lazyBody(2, false), false); r.err != nil || r.status != http.StatusOK {
		t.Fatalf("request placing the model again through the standby: %d %v %s", r.status, r.err, r.body)
	}
	again, states := live()
	if len(again) != 1 {
		t.Fatalf("replicas after asking again: %s; want one", states)
	}
	streaming = make(chan struct{})
	go func() {
		haPostFirst(ctx, b.Client, c.APIKey, lazyBody(1000, true), true, func() { close(streaming) })
	}()
	<-streaming
	// Past the idle timeout the request in flight still holds the
	// replica. The time is the subject: the request arrived before it
	// streamed, so after idle_timeout only the request in flight keeps the
	// model wanted; of the two leader passes completed after that, the
	// second began past the timeout and would have stopped the replica.
	time.Sleep(4 * time.Second) // scaling.idle_timeout
	c.AwaitPasses(t, 2, 30*time.Second)
	if ids, states := live(); len(ids) != 1 || ids[0] != again[0] {
		t.Fatalf("with a request in flight through the standby past the idle timeout the replicas are %s; want %s kept", states, again[0])
	}
	killed := time.Now()
	if err := syscall.Kill(b.Proc.Cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-b.Proc.Done
	testcluster.WaitFor(t, "the dead standby's replica stopped", 30*time.Second, func() (bool, string) {
		ids, states := live()
		return len(ids) == 0, states
	})
	t.Logf("replica stopped %s after the standby holding it was killed", time.Since(killed).Round(time.Millisecond))
}
