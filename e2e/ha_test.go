package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/testkit/pgtest"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

// haModel streams at 100 tokens/s, so a request of 300 tokens is in flight
// for three seconds; two replicas.
const haModel = `  - name: sim-ha
    source: sim://ha
    context_length: 8192
    scaling: { min: 2, max: 2 }
    profiles:
      - { name: h100, engine: sim, gpu_class: h100-80g, tp: 1, startup_timeout: 1m, args: ["--decode-tps", "100"] }
`

// failoverBound is the stated bound: lease 6s, standby retry 1s, plus the
// time the new leader takes to read the store and start.
const failoverBound = 10 * time.Second

type haResult struct {
	status int
	body   string
	err    error
	start  time.Time
	end    time.Time
}

// haPost sends one chat request to base (…/v1), streaming or not, and
// reads the whole answer.
func haPost(ctx context.Context, base, key string, maxTokens int, stream bool) haResult {
	body := fmt.Sprintf(`{"model":"sim-ha","max_tokens":%d,"stream":%t,"messages":[{"role":"user","content":"tell me a long story"}]}`, maxTokens, stream)
	return haPostRaw(ctx, base, key, body, stream)
}

// haPostRaw sends body to base's chat completions and reads the whole
// answer.
func haPostRaw(ctx context.Context, base, key, body string, stream bool) haResult {
	return haPostFirst(ctx, base, key, body, stream, nil)
}

// haPostFirst is haPostRaw that calls first, once, when the answer's first
// line has arrived (or the request ended without one).
func haPostFirst(ctx context.Context, base, key, body string, stream bool, first func()) haResult {
	var once sync.Once
	signal := func() {
		if first != nil {
			once.Do(first)
		}
	}
	defer signal()
	r := haResult{start: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/chat/completions", strings.NewReader(body))
	if err != nil {
		r.err = err
		return r
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.err, r.end = err, time.Now()
		return r
	}
	defer resp.Body.Close()
	r.status = resp.StatusCode
	if stream {
		var b strings.Builder
		sc := bufio.NewScanner(resp.Body)
		done := false
		for sc.Scan() {
			signal()
			b.WriteString(sc.Text())
			b.WriteByte('\n')
			if sc.Text() == "data: [DONE]" {
				done = true
			}
		}
		r.body = b.String()
		if err := sc.Err(); err != nil {
			r.err = err
		} else if r.status == http.StatusOK && !done {
			r.err = fmt.Errorf("stream ended without [DONE]")
		}
	} else {
		b, err := io.ReadAll(resp.Body)
		r.body, r.err = string(b), err
	}
	r.end = time.Now()
	return r
}

func httpStatus(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func root(base string) string { return strings.TrimSuffix(base, "/v1") }

func haStatus(t *testing.T, mc managev1.ManageServiceClient) (*managev1.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return mc.GetStatus(ctx, &managev1.GetStatusRequest{})
}

// replicaSet returns the serving replicas of sim-ha, by id, with the nodes
// of their shards.
func replicaSet(t *testing.T, mc managev1.ManageServiceClient) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	resp, err := mc.ListReplicas(ctx, &managev1.ListReplicasRequest{})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, r := range resp.GetReplicas() {
		if r.GetModel() == "sim-ha" && r.GetState() == "ready" {
			var nodes []string
			for _, s := range r.GetShards() {
				nodes = append(nodes, s.GetNode())
			}
			out[r.GetId()] = strings.Join(nodes, ",")
		}
	}
	return out, nil
}

// TestTwoControlPlanesFailover runs two control planes on one PostgreSQL,
// each its own process. The standby serves the client API from the
// leader's routes, answers /ready, relays the management API, and sends
// agents to the leader. Then the leader is killed with SIGKILL while
// requests stream through the standby: the standby leads within the bound,
// adopts the same replicas (same ids, same engine processes), and not one
// request through it fails.
func TestTwoControlPlanesFailover(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	c := testcluster.NewCluster(t, binary, testcluster.Options{Grace: "20s", Models: haModel, Store: dsn})
	b := c.AddControlPlane("cp-2")
	ma, mb := c.ManageClient(), b.ManageClient()
	// node01 knows only the leader's address first; node02 only the
	// standby's, which sends it to the leader.
	n1 := c.StartAgent(testcluster.NodeSpec{ID: "node01", Servers: []string{c.AgentAddr, b.AgentAddr}})
	n2 := c.StartAgent(testcluster.NodeSpec{ID: "node02", Servers: []string{b.AgentAddr, c.AgentAddr}})

	testcluster.WaitFor(t, "two ready replicas, both nodes on the leader", 60*time.Second, func() (bool, string) {
		reps, err := replicaSet(t, ma)
		if err != nil {
			return false, err.Error()
		}
		st, err := haStatus(t, ma)
		if err != nil {
			return false, err.Error()
		}
		return len(reps) == 2 && st.GetNodesReady() == 2, fmt.Sprintf("replicas %v, nodes ready %d", reps, st.GetNodesReady())
	})
	if !strings.Contains(n2.Output(), "dialling the leader") {
		t.Errorf("node02 was not sent from the standby to the leader; its log:\n%s", testcluster.Tail(n2.Output(), 20))
	}

	// The standby: alive, ready once it follows the routes, serving.
	if got := httpStatus(root(b.Client) + "/health"); got != http.StatusOK {
		t.Fatalf("standby /health = %d", got)
	}
	testcluster.WaitFor(t, "the standby to be ready", 20*time.Second, func() (bool, string) {
		got := httpStatus(root(b.Client) + "/ready")
		return got == http.StatusOK, fmt.Sprint(got)
	})
	waitStandbyRoutes(t, b, "sim-ha", 2)
	if r := haPost(context.Background(), b.Client, c.APIKey, 5, false); r.status != http.StatusOK || r.err != nil {
		t.Fatalf("request through the standby: %d %v %s", r.status, r.err, r.body)
	}
	// ctl status through the standby: relayed to the leader, which names
	// itself and the standby.
	st, err := haStatus(t, mb)
	if err != nil {
		t.Fatalf("GetStatus through the standby: %v", err)
	}
	ha := st.GetHa()
	roles := map[string]string{}
	for _, cp := range ha.GetControlPlanes() {
		roles[cp.GetName()] = cp.GetRole()
	}
	if ha.GetLeader() != "cp-1" || ha.GetAnsweredBy() != "cp-1" || roles["cp-1"] != "leader" || roles["cp-2"] != "standby" || ha.GetToken() < 1 ||
		ha.GetLeaseExpiresUnixMs() <= ha.GetLeaseAcquiredUnixMs() || ha.GetLeaseTtlMs() != 6000 {
		t.Fatalf("HA status through the standby = %v", ha)
	}
	before, err := replicaSet(t, ma)
	if err != nil {
		t.Fatal(err)
	}
	pidsBefore := map[string][]int{
		"node01": testcluster.EngineChildren(t, n1.Cmd.Process.Pid, "sim-ha"),
		"node02": testcluster.EngineChildren(t, n2.Cmd.Process.Pid, "sim-ha"),
	}
	if len(pidsBefore["node01"])+len(pidsBefore["node02"]) != 2 {
		t.Fatalf("engine processes before = %v, want 2", pidsBefore)
	}

	// Load through the standby: four clients in a loop, streaming and
	// not, plus long streams started just before the kill.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var results []haResult
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := haPost(context.Background(), b.Client, c.APIKey, 20, i%2 == 0)
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}
		}()
	}
	long := make(chan haResult, 4)
	streaming := make(chan struct{}, 4)
	longBody := `{"model":"sim-ha","max_tokens":300,"stream":true,"messages":[{"role":"user","content":"tell me a long story"}]}`
	for range 4 {
		go func() {
			long <- haPostFirst(context.Background(), b.Client, c.APIKey, longBody, true, func() { streaming <- struct{}{} })
		}()
	}
	// The kill comes once every long stream has its first line.
	for range 4 {
		select {
		case <-streaming:
		case <-time.After(30 * time.Second):
			t.Fatal("the long streams did not start within 30s")
		}
	}

	killed := time.Now()
	if err := syscall.Kill(c.Server.Cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.Server.Done
	var elected time.Duration
	testcluster.WaitFor(t, "cp-2 to lead", 2*failoverBound, func() (bool, string) {
		st, err := haStatus(t, mb)
		if err != nil {
			return false, err.Error()
		}
		if st.GetHa().GetLeader() == "cp-2" && st.GetHa().GetAnsweredBy() == "cp-2" {
			elected = time.Since(killed)
			return true, ""
		}
		return false, fmt.Sprint(st.GetHa())
	})
	t.Logf("new leader %s after the SIGKILL", elected.Round(10*time.Millisecond))
	if elected > failoverBound {
		t.Errorf("cp-2 led %s after the leader was killed; the stated bound is %s", elected, failoverBound)
	}
	var after map[string]string
	testcluster.WaitFor(t, "both nodes and replicas back on cp-2", 30*time.Second, func() (bool, string) {
		st, err := haStatus(t, mb)
		if err != nil {
			return false, err.Error()
		}
		after, err = replicaSet(t, mb)
		if err != nil {
			return false, err.Error()
		}
		return st.GetNodesReady() == 2 && len(after) == 2, fmt.Sprintf("nodes ready %d, replicas %v", st.GetNodesReady(), after)
	})
	adopted := time.Since(killed)
	t.Logf("replicas adopted %s after the SIGKILL", adopted.Round(10*time.Millisecond))
	close(stop)
	wg.Wait()
	for range 4 {
		r := <-long
		if r.err != nil || r.status != http.StatusOK {
			t.Errorf("a stream in flight through the standby during the failover: %d %v %s", r.status, r.err, testcluster.Tail(r.body, 3))
		} else if !r.start.Before(killed) || !r.end.After(killed) {
			t.Errorf("stream ran %v to %v, not across the kill at %v", r.start, r.end, killed)
		}
	}

	if !mapsEqual(before, after) {
		t.Errorf("replicas before the failover %v, after %v: want the same ids on the same nodes", before, after)
	}
	for node, p := range pidsBefore {
		agent := n1
		if node == "node02" {
			agent = n2
		}
		if got := testcluster.EngineChildren(t, agent.Cmd.Process.Pid, "sim-ha"); !slices.Equal(got, p) {
			t.Errorf("engines of %s: %v before, %v after: a replica was restarted", node, p, got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var failed, across int
	for _, r := range results {
		if r.err != nil || r.status != http.StatusOK {
			failed++
			if failed <= 3 {
				t.Errorf("request through the survivor failed: %d %v %s", r.status, r.err, testcluster.Tail(r.body, 3))
			}
		}
		if r.start.Before(killed.Add(elected)) && r.end.After(killed) {
			across++
		}
	}
	t.Logf("%d requests through the survivor, %d failed, %d ran during the election", len(results), failed, across)
	if len(results) < 20 || across == 0 {
		t.Errorf("load too light to mean anything: %d requests, %d during the election", len(results), across)
	}
	// The survivor still serves and is ready as the leader.
	if got := httpStatus(root(b.Client) + "/ready"); got != http.StatusOK {
		t.Errorf("new leader /ready = %d", got)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestTerraformAgainstEitherControlPlane applies a catalog through the
// standby's management API (relayed to the leader): the model rolls out,
// its key works on the standby's client API, and a plan against either
// control plane finds nothing to change.
func TestTerraformAgainstEitherControlPlane(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	c := testcluster.NewCluster(t, binary, testcluster.Options{Grace: "20s", Store: dsn})
	b := c.AddControlPlane("cp-2")
	c.StartAgent(testcluster.NodeSpec{ID: "node01", Servers: []string{b.AgentAddr, c.AgentAddr}})
	tf := testcluster.NewTerraform(t, c)
	tf.Env = append(tf.Env, "LLMGW_ENDPOINT="+b.Manage) // the last value of a variable wins
	mainTF := `terraform {
  required_providers {
    llmgw = { source = "llmgw/llmgw" }
  }
}

resource "llmgw_model" "sim" {
  name             = "sim-tf"
  source           = "sim://tf"
  context_length   = 4096
  scaling          = { min = 1, max = 1 }
  profiles         = [{ name = "h100", engine = "sim", gpu_class = "h100-80g", tp = 1, startup_timeout = "1m" }]
  wait_for_rollout = true
  rollout_timeout  = "90s"
}

resource "llmgw_project" "team" {
  name           = "team"
  allowed_models = [llmgw_model.sim.name]
}

resource "llmgw_api_key" "ci" {
  project = llmgw_project.team.name
  name    = "ci"
}

output "key" {
  value     = llmgw_api_key.ci.secret
  sensitive = true
}
`
	if err := os.WriteFile(filepath.Join(tf.Dir, "main.tf"), []byte(mainTF), 0o600); err != nil {
		t.Fatal(err)
	}
	tf.Run(0, "init", "-input=false")
	tf.Run(0, "apply", "-input=false", "-auto-approve")
	out, _ := tf.Run(0, "output", "-raw", "key")
	key := strings.TrimSpace(out)
	c.AddSecret(key)
	testcluster.WaitFor(t, "the new model through the standby's client API", 30*time.Second, func() (bool, string) {
		body := `{"model":"sim-tf","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
		req, _ := http.NewRequest(http.MethodPost, b.Client+"/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		rb, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("%d %s", resp.StatusCode, rb)
	})
	tf.Run(0, "plan", "-input=false", "-detailed-exitcode")
	tf.Env = append(tf.Env, "LLMGW_ENDPOINT="+c.Manage)
	tf.Run(0, "plan", "-input=false", "-detailed-exitcode")
}
