package fleet

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/api/specv1"
	"github.com/llmgw/llmgw/spec"
)

type nopConn struct{}

func (nopConn) Send(*agentv1.ControlMessage) error { return nil }

func twoShardReplica() *Replica {
	return &Replica{ID: "r1", Model: "m", Profile: spec.Profile{Nodes: 2}, Shards: []*Shard{
		{ID: "r1-0", Rank: 0, Node: "n1", Sent: true},
		{ID: "r1-1", Rank: 1, Node: "n2", Sent: true},
	}}
}

func status(shard string, rank int32, st agentv1.ShardState) *agentv1.ShardStatus {
	return &agentv1.ShardStatus{ShardId: shard, ReplicaId: "r1", Model: "m", Rank: rank, State: st, Profile: &specv1.Profile{Name: "x2", Nodes: 2, Weight: 3}}
}

func replica(t *testing.T, f *Fleet, id string) Replica {
	t.Helper()
	for _, r := range f.Replicas() {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("replica %s not found", id)
	return Replica{}
}

func TestReplicaReadyOnlyWhenEveryShardIs(t *testing.T) {
	f := New()
	f.AddReplica(twoShardReplica())
	f.ApplyShardStatus("n1", status("r1-0", 0, agentv1.ShardState_SHARD_STATE_READY))
	if got := replica(t, f, "r1").State; got != ReplicaStarting {
		t.Fatalf("state with one of two shards ready = %s", got)
	}
	// Another node cannot speak for a shard that is not its own.
	f.ApplyShardStatus("n3", status("r1-1", 1, agentv1.ShardState_SHARD_STATE_READY))
	if got := replica(t, f, "r1").State; got != ReplicaStarting {
		t.Fatalf("state after a report from the wrong node = %s", got)
	}
	f.ApplyShardStatus("n2", status("r1-1", 1, agentv1.ShardState_SHARD_STATE_READY))
	if got := replica(t, f, "r1").State; got != ReplicaReady {
		t.Fatalf("state with both shards ready = %s", got)
	}
	f.ApplyShardStatus("n2", status("r1-1", 1, agentv1.ShardState_SHARD_STATE_FAILED))
	if r := replica(t, f, "r1"); r.State != ReplicaFailed || r.Error == "" {
		t.Fatalf("after a shard failed: %s %q", r.State, r.Error)
	}
}

func TestAdoptedReplicaShortOfShardsIsNotReady(t *testing.T) {
	f := New()
	// After a control-plane restart only one of two agents has reported.
	f.Connect(&agentv1.Hello{Shards: []*agentv1.ShardStatus{status("r1-0", 0, agentv1.ShardState_SHARD_STATE_READY)}}, "n1", nil, false, nopConn{})
	r := replica(t, f, "r1")
	if r.State == ReplicaReady || r.ShardsExpected() != 2 || !r.Adopted {
		t.Fatalf("adopted replica = %+v; want 2 expected shards and not ready", r)
	}
	if r.Profile.Name != "x2" || r.Profile.Weight != 3 {
		t.Fatalf("adopted replica's profile = %+v; want the one its agents echoed (x2, weight 3)", r.Profile)
	}
	f.Connect(&agentv1.Hello{Shards: []*agentv1.ShardStatus{status("r1-1", 1, agentv1.ShardState_SHARD_STATE_READY)}}, "n2", nil, false, nopConn{})
	if got := replica(t, f, "r1").State; got != ReplicaReady {
		t.Fatalf("state once both agents reported = %s", got)
	}
}

// Regression: an agent restarted without its engines must not leave its old
// replicas routed.
func TestReconnectWithoutShardFailsReplica(t *testing.T) {
	f := New()
	f.Connect(&agentv1.Hello{}, "n1", nil, false, nopConn{})
	f.AddReplica(&Replica{ID: "r1", Model: "m", Profile: spec.Profile{Nodes: 1}, Shards: []*Shard{{ID: "r1-0", Node: "n1", Sent: true}}})
	f.ApplyShardStatus("n1", &agentv1.ShardStatus{ShardId: "r1-0", ReplicaId: "r1", State: agentv1.ShardState_SHARD_STATE_READY})
	if got := replica(t, f, "r1").State; got != ReplicaReady {
		t.Fatalf("state = %s", got)
	}
	f.Connect(&agentv1.Hello{}, "n1", nil, false, nopConn{})
	if r := replica(t, f, "r1"); r.State != ReplicaFailed {
		t.Fatalf("replica of a shard the agent no longer reports is %s", r.State)
	}
}

func TestReconnectWithShardKeepsReplica(t *testing.T) {
	f := New()
	f.Connect(&agentv1.Hello{}, "n1", nil, false, nopConn{})
	f.AddReplica(&Replica{ID: "r1", Model: "m", Profile: spec.Profile{Nodes: 1}, Shards: []*Shard{{ID: "r1-0", Node: "n1", Sent: true}}})
	ready := &agentv1.ShardStatus{ShardId: "r1-0", ReplicaId: "r1", State: agentv1.ShardState_SHARD_STATE_READY, Profile: &specv1.Profile{Name: "p", Nodes: 1}}
	f.ApplyShardStatus("n1", ready)
	f.Connect(&agentv1.Hello{Shards: []*agentv1.ShardStatus{ready}}, "n1", nil, false, nopConn{})
	if got := replica(t, f, "r1").State; got != ReplicaReady {
		t.Fatalf("replica after a reconnect that kept its shard is %s", got)
	}
}

func TestNodeWarnings(t *testing.T) {
	f := New()
	inv := &agentv1.Inventory{
		GpuError: "GPU discovery failed: nvidia-smi not found",
		Fabrics:  []*agentv1.FabricVerdict{{Name: "ib-a", Problems: []string{"adapter mlx5_1 not found"}}},
		HasAvx2:  proto.Bool(false),
	}
	f.Connect(&agentv1.Hello{Inventory: inv}, "n1", nil, false, nopConn{})
	n, _ := f.Node("n1")
	for _, want := range []string{"GPU discovery failed", "fabric ib-a out of service: adapter mlx5_1 not found", "no AVX2"} {
		if !contains(n.Reason, want) {
			t.Errorf("reason %q lacks %q", n.Reason, want)
		}
	}
	if n.State != NodeReady {
		t.Fatalf("state = %s; warnings do not make a node unready", n.State)
	}
}

const libgomp = "llama-server cannot start: libgomp.so.1: cannot open shared object file: No such file or directory"

// A node reports why an engine cannot start, naming it, first in its
// reason; it stays ready for its other engines. AVX2 is warned about only
// when the node says it lacks it, not when it does not know.
func TestNodeEngineChecksAndAVX2(t *testing.T) {
	llamaFailed := &agentv1.EngineCheck{Engine: "llamacpp", Path: "/opt/llama.cpp/llama-server", Error: libgomp}
	simOK := &agentv1.EngineCheck{Engine: "sim", Path: "/usr/local/bin/llmgw", Ok: true, Version: "llmgw sim-engine version dev"}
	missing := &agentv1.EngineStatus{Engine: "llamacpp", Path: "/opt/llama.cpp/llama-server", Error: "stat: no such file"}
	tests := []struct {
		name     string
		inv      *agentv1.Inventory
		checks   []*agentv1.EngineCheck
		reason   string
		warnings []string
	}{
		{name: "all well", inv: &agentv1.Inventory{HasAvx2: proto.Bool(true)}, checks: []*agentv1.EngineCheck{simOK}},
		{name: "avx2 unknown (arm64, old agent)", inv: &agentv1.Inventory{}},
		{name: "no avx2", inv: &agentv1.Inventory{HasAvx2: proto.Bool(false)},
			reason: NoAVX2Warning, warnings: []string{NoAVX2Warning}},
		{name: "engine cannot start", inv: &agentv1.Inventory{HasAvx2: proto.Bool(true)}, checks: []*agentv1.EngineCheck{llamaFailed, simOK},
			reason: libgomp},
		{name: "failed check named once, before the warning", inv: &agentv1.Inventory{HasAvx2: proto.Bool(false), Engines: []*agentv1.EngineStatus{missing}},
			checks: []*agentv1.EngineCheck{llamaFailed}, reason: libgomp + "; " + NoAVX2Warning, warnings: []string{NoAVX2Warning}},
		{name: "failed without words", inv: &agentv1.Inventory{}, checks: []*agentv1.EngineCheck{{Engine: "vllm"}}, reason: "vllm cannot start"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := New()
			f.Connect(&agentv1.Hello{Inventory: tt.inv, EngineChecks: tt.checks}, "n1", nil, false, nopConn{})
			n, _ := f.Node("n1")
			if n.State != NodeReady || n.Reason != tt.reason || !slices.Equal(n.Warnings, tt.warnings) || len(n.EngineChecks) != len(tt.checks) {
				t.Fatalf("node = %s %q warnings %q checks %d; want ready %q warnings %q checks %d",
					n.State, n.Reason, n.Warnings, len(n.EngineChecks), tt.reason, tt.warnings, len(tt.checks))
			}
		})
	}
}

// Engine checks the agent sends later replace the ones from its hello, and
// the control plane can ask for them again.
func TestApplyEngineChecks(t *testing.T) {
	f := New()
	c := &recConn{}
	f.Connect(&agentv1.Hello{Inventory: &agentv1.Inventory{}, EngineChecks: []*agentv1.EngineCheck{{Engine: "sim", Ok: true}}}, "n1", nil, false, c)
	<-f.Changed()
	f.ApplyEngineChecks("n1", []*agentv1.EngineCheck{{Engine: "llamacpp", Error: libgomp}, {Engine: "sim", Ok: true}})
	select {
	case <-f.Changed():
	default:
		t.Error("new engine checks did not signal a change")
	}
	n, _ := f.Node("n1")
	if n.Reason != libgomp || len(n.EngineChecks) != 2 {
		t.Fatalf("after a failed check: reason %q, %d checks", n.Reason, len(n.EngineChecks))
	}
	f.ApplyEngineChecks("n1", []*agentv1.EngineCheck{{Engine: "llamacpp", Ok: true}, {Engine: "sim", Ok: true}})
	if n, _ := f.Node("n1"); n.Reason != "" {
		t.Fatalf("after the engine was fixed: reason %q", n.Reason)
	}
	f.ApplyEngineChecks("gone", nil) // an unknown node is ignored
	if err := f.CheckEngines("n1"); err != nil || len(c.sent) != 1 || c.sent[0].GetCheckEngines() == nil {
		t.Fatalf("CheckEngines: %v, sent %v", err, c.sent)
	}
	if err := f.CheckEngines("gone"); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("CheckEngines(gone) = %v, want ErrNotConnected", err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

type recConn struct{ sent []*agentv1.ControlMessage }

func (c *recConn) Send(m *agentv1.ControlMessage) error {
	c.sent = append(c.sent, m)
	return nil
}

// Regression: a declaration stored while an agent's session was between its
// store lookup and its registration was lost.
func TestDeclarationBeforeRegistrationIsApplied(t *testing.T) {
	f := New()
	decl := &agentv1.Declaration{Labels: map[string]string{"from": "control-plane"}}
	if err := f.Declare("n1", decl); err != nil {
		t.Fatal(err)
	}
	c := &recConn{}
	f.Connect(&agentv1.Hello{}, "n1", nil, false, c) // the session read no declaration
	n, _ := f.Node("n1")
	if !n.Declared || n.Declaration.GetLabels()["from"] != "control-plane" {
		t.Fatalf("node = %+v; want the pending declaration applied", n)
	}
	if len(c.sent) != 1 || c.sent[0].GetDeclaration().GetLabels()["from"] != "control-plane" {
		t.Fatalf("sent = %v; want the declaration sent to the agent", c.sent)
	}
}

// RequestEngineChecks' channel closes when the node's next checks arrive,
// or when its session ends before they do; never before either.
func TestRequestEngineChecks(t *testing.T) {
	tests := []struct {
		name string
		// then is what happens after the request.
		then      func(f *Fleet, connID uint64)
		connected bool
		wantOK    bool // the node's llamacpp check after then
	}{
		{"checks arrive", func(f *Fleet, _ uint64) {
			f.ApplyEngineChecks("n1", []*agentv1.EngineCheck{{Engine: "llamacpp", Ok: true}})
		}, true, true},
		{"session ends", func(f *Fleet, id uint64) { f.Disconnect("n1", id) }, false, false},
		{"identity revoked", func(f *Fleet, _ uint64) { f.Forget("n1", "revoked") }, false, false},
		{"agent reconnects", func(f *Fleet, _ uint64) {
			f.Connect(&agentv1.Hello{Inventory: &agentv1.Inventory{}, EngineChecks: []*agentv1.EngineCheck{{Engine: "llamacpp", Ok: true}}}, "n1", nil, false, &recConn{})
		}, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := New()
			c := &recConn{}
			id := f.Connect(&agentv1.Hello{Inventory: &agentv1.Inventory{}, EngineChecks: []*agentv1.EngineCheck{{Engine: "llamacpp", Error: libgomp}}}, "n1", nil, false, c)
			done, err := f.RequestEngineChecks("n1")
			if err != nil || len(c.sent) != 1 || c.sent[0].GetCheckEngines() == nil {
				t.Fatalf("RequestEngineChecks: %v, sent %v", err, c.sent)
			}
			f.Heartbeat("n1", &agentv1.Heartbeat{})
			select {
			case <-done:
				t.Fatal("released before the checks arrived")
			default:
			}
			tt.then(f, id)
			select {
			case <-done:
			default:
				t.Fatal("not released")
			}
			n, ok := f.Node("n1")
			if ok && n.Connected != tt.connected {
				t.Errorf("node connected %v, want %v", n.Connected, tt.connected)
			}
			if got := ok && len(n.EngineChecks) == 1 && n.EngineChecks[0].GetOk(); got != tt.wantOK {
				t.Errorf("llamacpp ok = %v, want %v (%v)", got, tt.wantOK, n.EngineChecks)
			}
		})
	}
	if _, err := New().RequestEngineChecks("gone"); !errors.Is(err, ErrNotConnected) {
		t.Errorf("RequestEngineChecks(gone) = %v, want ErrNotConnected", err)
	}
}

// A heartbeat's GPU readings replace the node's, memory used among them: an
// unknown reading becomes absent, and a heartbeat without readings keeps
// the last ones.
func TestHeartbeatGPUReadings(t *testing.T) {
	gpu := func(used *uint64) []*agentv1.GPU {
		return []*agentv1.GPU{{Index: 0, Uuid: "GPU-0", Class: "h100-80g", MemoryMib: 81559, MemoryUsedMib: used}}
	}
	f := New()
	f.Connect(&agentv1.Hello{Inventory: &agentv1.Inventory{Gpus: gpu(proto.Uint64(1))}}, "n1", nil, false, nopConn{})
	steps := []struct {
		name string
		hb   *agentv1.Heartbeat
		want any
	}{
		{"an engine loaded", &agentv1.Heartbeat{Gpus: gpu(proto.Uint64(78802))}, uint64(78802)},
		{"no readings this time", &agentv1.Heartbeat{}, uint64(78802)},
		{"driver stopped reporting it", &agentv1.Heartbeat{Gpus: gpu(nil)}, "absent"},
	}
	for _, st := range steps {
		f.Heartbeat("n1", st.hb)
		n, _ := f.Node("n1")
		gpus := n.Inventory.GetGpus()
		if len(gpus) != 1 {
			t.Fatalf("after %s: %d GPUs, want 1", st.name, len(gpus))
		}
		var got any = "absent"
		if gpus[0].MemoryUsedMib != nil {
			got = gpus[0].GetMemoryUsedMib()
		}
		if got != st.want {
			t.Fatalf("after %s: memory used = %v, want %v", st.name, got, st.want)
		}
	}
}

// ConnectedSince is the start of the latest session: a heartbeat does not
// move it, a disconnect keeps it, a new session replaces it.
func TestConnectedSince(t *testing.T) {
	f := New()
	clock := time.UnixMilli(1_000_000)
	f.now = func() time.Time { return clock }
	hello := &agentv1.Hello{Inventory: &agentv1.Inventory{}}
	id := f.Connect(hello, "n1", nil, false, &recConn{})
	steps := []struct {
		name string
		do   func()
		want time.Time
	}{
		{"first session", func() {}, time.UnixMilli(1_000_000)},
		{"heartbeat", func() { clock = clock.Add(time.Second); f.Heartbeat("n1", &agentv1.Heartbeat{}) }, time.UnixMilli(1_000_000)},
		{"disconnect", func() { clock = clock.Add(time.Second); f.Disconnect("n1", id) }, time.UnixMilli(1_000_000)},
		{"new session", func() { clock = clock.Add(time.Second); f.Connect(hello, "n1", nil, false, &recConn{}) }, time.UnixMilli(1_003_000)},
	}
	for _, s := range steps {
		s.do()
		n, _ := f.Node("n1")
		if !n.ConnectedSince.Equal(s.want) {
			t.Errorf("%s: ConnectedSince = %v, want %v", s.name, n.ConnectedSince, s.want)
		}
	}
}

// endConn records why the control plane ended its session.
type endConn struct {
	nopConn
	superseded []string
}

func (c *endConn) Supersede(reason string) { c.superseded = append(c.superseded, reason) }

// Regression (issue 16, twin agents): a second agent with a node's identity
// took the node's session without ending the first, the first's heartbeats
// kept the node fresh, and the twin's hello failed the node's replicas. One
// live session per node: a second is refused while the first is heard from,
// replaces it once it is silent, and only the current session's reports and
// disconnect count.
func TestOneLiveSessionPerNode(t *testing.T) {
	f := New()
	start := time.UnixMilli(1_000_000)
	clock := start
	f.now = func() time.Time { return clock }
	const bound = 6 * time.Second
	ready := status("r1-0", 0, agentv1.ShardState_SHARD_STATE_READY)
	f.AddReplica(&Replica{ID: "r1", Model: "m", Profile: spec.Profile{Nodes: 1}, Shards: []*Shard{{ID: "r1-0", Node: "n1", Sent: true}}})
	first := &endConn{}
	a, err := f.Open("n1", Opening{Hello: &agentv1.Hello{Version: "first", Inventory: &agentv1.Inventory{}, Shards: []*agentv1.ShardStatus{ready}}, Conn: first, Peer: "10.0.0.1:4000"}, bound)
	if err != nil {
		t.Fatal(err)
	}
	check := func(step, version string, connected bool, lastSeen time.Time) {
		t.Helper()
		n, _ := f.Node("n1")
		if n.Version != version || n.Connected != connected || !n.LastSeen.Equal(lastSeen) {
			t.Fatalf("%s: version %q connected %v last seen %v; want %q %v %v", step, n.Version, n.Connected, n.LastSeen.Sub(start), version, connected, lastSeen.Sub(start))
		}
		if r := replica(t, f, "r1"); r.State != ReplicaReady {
			t.Fatalf("%s: replica %s (%s), want ready", step, r.State, r.Error)
		}
	}
	check("first session", "first", true, start)

	// A twin while the first is live: refused, naming the live session, and
	// nothing of its hello (no shards) is taken.
	clock = start.Add(time.Second)
	twin := &endConn{}
	_, err = f.Open("n1", Opening{Hello: &agentv1.Hello{Version: "twin", Inventory: &agentv1.Inventory{}}, Conn: twin, Peer: "10.0.0.9:5000"}, bound)
	var conflict *SessionConflict
	if !errors.As(err, &conflict) {
		t.Fatalf("second session while the first is live: err = %v, want a SessionConflict", err)
	}
	if conflict.Node != "n1" || conflict.Peer != "10.0.0.1:4000" || !conflict.Since.Equal(start) || conflict.Silent != time.Second {
		t.Fatalf("conflict = %+v", conflict)
	}
	for _, want := range []string{"n1", "10.0.0.1:4000", start.UTC().Format(time.RFC3339)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	check("twin refused", "first", true, start)

	clock = start.Add(5 * time.Second)
	if !a.Heartbeat(&agentv1.Heartbeat{}) {
		t.Fatal("the current session's heartbeat was refused")
	}
	check("heartbeat", "first", true, clock)

	// The first goes silent past the bound (its agent restarted behind a
	// half-open connection): a new session replaces it and ends it.
	clock = start.Add(12 * time.Second)
	b, err := f.Open("n1", Opening{Hello: &agentv1.Hello{Version: "second", Inventory: &agentv1.Inventory{}, Shards: []*agentv1.ShardStatus{ready}}, Conn: &endConn{}, Peer: "10.0.0.1:4001"}, bound)
	if err != nil {
		t.Fatalf("a session replacing one silent for 7s: %v", err)
	}
	if b.Replaced == nil || b.Replaced.Peer != "10.0.0.1:4000" || b.Replaced.Silent != 7*time.Second {
		t.Fatalf("Replaced = %+v", b.Replaced)
	}
	if len(first.superseded) != 1 || !strings.Contains(first.superseded[0], "10.0.0.1:4001") {
		t.Fatalf("the replaced session was not ended: %q", first.superseded)
	}
	replacedAt := clock
	check("replaced", "second", true, replacedAt)

	// The stale session's reports and its disconnect change nothing.
	clock = start.Add(13 * time.Second)
	if a.Heartbeat(&agentv1.Heartbeat{}) {
		t.Error("a stale session's heartbeat was taken")
	}
	if a.ShardStatus(status("r1-0", 0, agentv1.ShardState_SHARD_STATE_FAILED)) {
		t.Error("a stale session's shard status was taken")
	}
	if a.EngineChecks([]*agentv1.EngineCheck{{Engine: "sim", Error: "broken"}}) {
		t.Error("a stale session's engine checks were taken")
	}
	a.Close()
	check("stale session reports and ends", "second", true, replacedAt)
	if err := f.CheckEngines("n1"); err != nil {
		t.Fatalf("check-engines after the stale session ended: %v", err)
	}

	if !b.Heartbeat(&agentv1.Heartbeat{}) {
		t.Fatal("the current session's heartbeat was refused")
	}
	check("current heartbeat", "second", true, clock)

	// Once the current session ends, the next is taken at once.
	b.Close()
	check("current session ends", "second", false, clock)
	if _, err := f.Open("n1", Opening{Hello: &agentv1.Hello{Version: "third", Inventory: &agentv1.Inventory{}, Shards: []*agentv1.ShardStatus{ready}}, Conn: &endConn{}}, bound); err != nil {
		t.Fatalf("a session after the last one ended: %v", err)
	}
	check("next session", "third", true, clock)
}

// TestShardFetchProgress: a shard's fetch progress is kept while its node
// reports one and dropped when it reports none; the replica's fetch
// activity moves only when bytes moved or the fetch ended, so a stalled
// fetch does not keep a replica's start from being timed.
func TestShardFetchProgress(t *testing.T) {
	f := New()
	clock := time.Unix(1000, 0)
	f.now = func() time.Time { return clock }
	f.AddReplica(twoShardReplica())
	fetching := func(done int64, stalled bool) *agentv1.ShardStatus {
		st := status("r1-0", 0, agentv1.ShardState_SHARD_STATE_STARTING)
		st.Fetch = &agentv1.FetchProgress{Source: "http://m/v/w.gguf", BytesDone: done, BytesTotal: 100, BytesPerSecond: 10, Stalled: stalled, LastError: "GET: 503"}
		return st
	}
	f.ApplyShardStatus("n1", fetching(10, false))
	r := replica(t, f, "r1")
	if fp := r.Shards[0].Fetch; fp.GetBytesDone() != 10 || fp.GetSource() != "http://m/v/w.gguf" || !r.FetchActivity.Equal(clock) {
		t.Fatalf("after progress: fetch %v, activity %v", fp, r.FetchActivity)
	}
	clock = clock.Add(time.Minute)
	f.ApplyShardStatus("n1", fetching(10, true))
	r = replica(t, f, "r1")
	if !r.Shards[0].Fetch.GetStalled() || !r.FetchActivity.Equal(time.Unix(1000, 0)) {
		t.Fatalf("a stalled report moved the activity to %v (fetch %v)", r.FetchActivity, r.Shards[0].Fetch)
	}
	clock = clock.Add(time.Minute)
	f.ApplyShardStatus("n1", status("r1-0", 0, agentv1.ShardState_SHARD_STATE_STARTING))
	r = replica(t, f, "r1")
	if r.Shards[0].Fetch != nil || !r.FetchActivity.Equal(clock) {
		t.Fatalf("after the fetch ended: fetch %v, activity %v", r.Shards[0].Fetch, r.FetchActivity)
	}
}

// TestModelReplicas: only the named model's replicas, sorted by id, as
// copies the caller may change.
func TestModelReplicas(t *testing.T) {
	f := New()
	for _, r := range []*Replica{
		{ID: "r3", Model: "a", Profile: spec.Profile{Nodes: 1}, Shards: []*Shard{{ID: "r3-0", Node: "n1", GPUs: []int{0}}}},
		{ID: "r1", Model: "a", Profile: spec.Profile{Nodes: 1}, Shards: []*Shard{{ID: "r1-0", Node: "n1", GPUs: []int{1}}}},
		{ID: "r2", Model: "b", Profile: spec.Profile{Nodes: 1}, Shards: []*Shard{{ID: "r2-0", Node: "n2"}}},
	} {
		f.AddReplica(r)
	}
	got := f.ModelReplicas("a")
	if len(got) != 2 || got[0].ID != "r1" || got[1].ID != "r3" {
		t.Fatalf("ModelReplicas(a) = %+v, want r1 and r3", got)
	}
	got[0].Shards[0].GPUs[0] = 7
	if again := f.ModelReplicas("a"); again[0].Shards[0].GPUs[0] != 1 {
		t.Fatalf("changing a returned replica changed the fleet's: GPUs %v", again[0].Shards[0].GPUs)
	}
	if got := f.ModelReplicas("none"); len(got) != 0 {
		t.Fatalf("ModelReplicas(none) = %+v, want none", got)
	}
}

// TestTxModelReplicasFollowsEveryChange: the index by model the reconciler
// reads once per catalog entry says what a walk of every replica says,
// through each way a replica enters or leaves the fleet (placed, added in
// a pass, adopted from an agent's Hello, removed).
func TestTxModelReplicasFollowsEveryChange(t *testing.T) {
	f := New()
	check := func(when string) {
		t.Helper()
		want, got := map[string][]string{}, map[string][]string{}
		models := []string{"a", "b", "m", "none"}
		f.Read(func(tx *Tx) {
			for _, r := range tx.Replicas() {
				want[r.Model] = append(want[r.Model], r.ID)
			}
			for _, model := range models {
				for _, r := range tx.ModelReplicas(model) {
					got[model] = append(got[model], r.ID)
				}
			}
		})
		for _, model := range models {
			var copies []string
			for _, r := range f.ModelReplicas(model) {
				copies = append(copies, r.ID)
			}
			if !slices.Equal(got[model], want[model]) || !slices.Equal(copies, want[model]) {
				t.Fatalf("%s: ModelReplicas(%s) = %v (copies %v), every replica of it = %v", when, model, got[model], copies, want[model])
			}
		}
	}
	f.AddReplica(&Replica{ID: "r3", Model: "a", Profile: spec.Profile{Nodes: 1}})
	f.AddReplica(&Replica{ID: "r2", Model: "b", Profile: spec.Profile{Nodes: 1}})
	check("placed")
	f.Update(func(tx *Tx) {
		tx.Add(&Replica{ID: "r0", Model: "a", Profile: spec.Profile{Nodes: 1}})
		tx.Add(&Replica{ID: "r4", Model: "a", Profile: spec.Profile{Nodes: 1}})
	})
	check("added in a pass")
	f.Connect(&agentv1.Hello{Shards: []*agentv1.ShardStatus{status("r1-0", 0, agentv1.ShardState_SHARD_STATE_READY)}}, "n1", nil, false, nopConn{})
	check("adopted")
	f.Update(func(tx *Tx) {
		for _, r := range tx.ModelReplicas("a") {
			if r.ID != "r3" {
				tx.Remove(r)
			}
		}
		for _, r := range tx.ModelReplicas("b") {
			tx.Remove(r)
		}
	})
	check("removed")
	f.Read(func(tx *Tx) {
		if got := tx.ModelReplicas("a"); len(got) != 1 || got[0].ID != "r3" {
			t.Fatalf("after removals ModelReplicas(a) = %v, want r3 alone", got)
		}
		if _, ok := f.byModel["b"]; ok {
			t.Fatal("a model whose replicas all left keeps an entry in the index")
		}
	})
}
