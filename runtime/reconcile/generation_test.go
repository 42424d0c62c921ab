package reconcile

import (
	"context"
	"testing"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	specv1 "github.com/llmgw/llmgw/api/specv1"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/models"
	"github.com/llmgw/llmgw/spec"
)

// TestRollsOnlyItsOwnProfile: a running replica restarts only when what
// its own engine is built from changes. Adding a profile, editing another
// profile's args, and changing pricing, scaling.max, aliases and its own
// profile's weight, startup timeout and placement constraints start and
// stop nothing; editing its own profile's args replaces it, the
// replacement first. RequestRollout of a manual model names only the
// replica whose own profile changed.
func TestRollsOnlyItsOwnProfile(t *testing.T) {
	reg, err := models.New(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	h.rec.opts.Catalog = reg
	ctx := context.Background()
	m := chatModel()
	m.Scaling = spec.Scaling{Min: 1, Max: 1}
	// cpu is never chosen while h100 places (lower priority).
	m.Profiles[0].Priority = 10
	m.Profiles = append(m.Profiles, spec.Profile{Name: "cpu", Engine: "sim", Args: []string{"--decode-tps", "5"}})
	if _, err := reg.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	var node string
	var s *agentv1.StartShard
	for n, ss := range h.startsFor("sim-chat") {
		node, s = n, ss[0]
	}
	if s == nil || s.GetProfile().GetName() != "h100" {
		t.Fatalf("first placement = %v, want one replica of profile h100", s)
	}
	h.report(node, s, agentv1.ShardState_SHARD_STATE_READY, func(st *agentv1.ShardStatus) { st.Endpoint = "127.0.0.1:9410" })
	h.rec.Pass()
	starts := func() int {
		n := 0
		for _, ss := range h.startsFor("sim-chat") {
			n += len(ss)
		}
		return n
	}
	stale := func() bool {
		e, _ := reg.Get("sim-chat")
		rep := h.fleet.Replicas()[0]
		return e.Stale(rep.Profile.Name, rep.Generation)
	}

	for _, edit := range []struct {
		name string
		do   func(m *spec.Model)
	}{
		{"a profile added", func(m *spec.Model) {
			m.Profiles = append(m.Profiles, spec.Profile{Name: "l4", Engine: "sim", GPUClass: "l4-24g", TP: 1})
		}},
		{"another profile's args", func(m *spec.Model) { m.Profiles[1].Args = []string{"--decode-tps", "50"} }},
		{"another profile removed", func(m *spec.Model) { m.Profiles = append(m.Profiles[:1], m.Profiles[2:]...) }},
		{"pricing", func(m *spec.Model) { m.Pricing = &spec.Pricing{PromptPer1K: 0.5, CompletionPer1K: 1} }},
		{"scaling.max", func(m *spec.Model) { m.Scaling.Max = 1 }},
		{"aliases", func(m *spec.Model) { m.Aliases = []string{"chat", "talk"} }},
		{"its weight, startup timeout and placement constraints", func(m *spec.Model) {
			p := &m.Profiles[0]
			p.Weight, p.StartupTimeout, p.MinMemoryGB = 3, spec.Duration(60e9), 1
		}},
	} {
		edit.do(&m)
		if _, err := reg.Update(ctx, m); err != nil {
			t.Fatalf("%s: %v", edit.name, err)
		}
		h.rec.Pass()
		h.rec.Pass()
		if n, stops := starts(), h.conns[node].stops(); n != 1 || len(stops) != 0 || stale() {
			t.Fatalf("%s: %d shards started in all, stopped %v, replica stale %v; want the original alone, current", edit.name, n, stops, stale())
		}
	}
	if got := h.fleet.Replicas()[0].Profile; got.Weight != 3 || got.MinMemoryGB != 1 {
		t.Errorf("running replica's profile = %+v, want the catalog's weight 3 and min_memory_gb 1 followed", got)
	}

	// Its own profile's args: replaced, the replacement first.
	m.Profiles[0].Args = []string{"--new-flag"}
	if _, err := reg.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	if !stale() {
		t.Fatal("after an edit of its own profile's args the replica is not stale")
	}
	h.rec.Pass()
	if n := starts(); n != 2 {
		t.Fatalf("an edit of its own profile's args started %d shards in all, want a replacement", n)
	}
	if stops := h.conns[node].stops(); len(stops) != 0 {
		t.Fatalf("the original stopped before its replacement was ready: %v", stops)
	}
}

// TestManualRolloutNamesOnlyStaleReplicas: with two replicas on two
// profiles and rollout manual, editing one profile's args makes only its
// replica stale; RequestRollout names that one alone, and the rollout
// replaces it and leaves the other running.
func TestManualRolloutNamesOnlyStaleReplicas(t *testing.T) {
	reg, err := models.New(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	h.rec.opts.Catalog = reg
	ctx := context.Background()
	m := chatModel()
	m.Rollout = spec.RolloutManual
	m.Scaling = spec.Scaling{Min: 1, Max: 1}
	if _, err := reg.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	// A second profile, tried first, and a second replica: it takes the
	// new profile; the first replica stays on h100.
	m.Profiles = append(m.Profiles, spec.Profile{Name: "cpu", Engine: "sim", Priority: 5})
	m.Scaling = spec.Scaling{Min: 2, Max: 2}
	if _, err := reg.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	byProfile := map[string]string{}
	for node, ss := range h.startsFor("sim-chat") {
		for i, s := range ss {
			byProfile[s.GetProfile().GetName()] = s.GetReplicaId()
			h.report(node, s, agentv1.ShardState_SHARD_STATE_READY, func(st *agentv1.ShardStatus) { st.Endpoint = "127.0.0.1:" + itoa(9420+i) })
		}
	}
	if len(byProfile) != 2 {
		t.Fatalf("replicas by profile = %v, want one of h100 and one of cpu", byProfile)
	}
	h.rec.Pass()

	m.Profiles[1].Args = []string{"--decode-tps", "9"}
	e, err := reg.Update(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	got := h.rec.RequestRollout(e)
	if len(got) != 1 || got[0] != byProfile["cpu"] {
		t.Fatalf("RequestRollout named %v, want only the cpu replica %s", got, byProfile["cpu"])
	}
	for _, rep := range h.fleet.Replicas() {
		if rep.ID == byProfile["h100"] && e.Stale(rep.Profile.Name, rep.Generation) {
			t.Errorf("the h100 replica is stale after an edit of profile cpu")
		}
	}
}

// TestLegacyStampedReplicaIsCurrent: a replica placed by a control plane
// that stamped the whole model's hash (before generations were per
// replica) is adopted as current while the model is as it was: upgrading
// the control plane rolls nothing.
func TestLegacyStampedReplicaIsCurrent(t *testing.T) {
	chat := chatModel()
	chat.Scaling = spec.Scaling{Min: 1, Max: 1}
	h := newHarness(t, chat)
	chat.Normalize()
	h.fleet.Connect(&agentv1.Hello{NodeId: "node03", Address: "127.0.0.1", Inventory: inventory(""), Shards: []*agentv1.ShardStatus{{
		ShardId: "r-old-0", ReplicaId: "r-old", Model: "sim-chat", Profile: &specv1.Profile{Name: "h100", Nodes: 1},
		ModelGeneration: spec.LegacyGeneration(chat), State: agentv1.ShardState_SHARD_STATE_READY, Endpoint: "127.0.0.1:9200",
	}}}, "node03", nil, false, h.conns["node03"])
	h.rec.Pass()
	h.rec.Pass()
	if n := len(h.startsFor("sim-chat")); n != 0 {
		t.Fatalf("a replica stamped with the legacy generation of the same definition was replaced: %d started", n)
	}
	e, _ := h.rec.opts.Catalog.Get("sim-chat")
	if e.Stale("h100", spec.LegacyGeneration(chat)) {
		t.Error("legacy-stamped replica of an unchanged model is stale")
	}
	if !e.Stale("h100", "0123456789ab") {
		t.Error("a replica of an unknown generation is current")
	}
}

// TestLegacyStampedReplicaRestamped: a replica adopted with the legacy
// stamp of the current definition is restamped with its per-replica
// generation at the next pass, and its agent is told (Restamp), so that
// adding a profile and editing its own profile's gpu_class (which change
// the legacy hash, not its build) leave it serving, not stale; its own
// args then make it stale.
func TestLegacyStampedReplicaRestamped(t *testing.T) {
	ctx := context.Background()
	reg, err := models.New(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	h.rec.opts.Catalog = reg
	chat := chatModel()
	chat.Scaling = spec.Scaling{Min: 1, Max: 1}
	if _, err := reg.Create(ctx, chat); err != nil {
		t.Fatal(err)
	}
	chat.Normalize()
	h.fleet.Connect(&agentv1.Hello{NodeId: "node03", Address: "127.0.0.1", Inventory: inventory(""), Shards: []*agentv1.ShardStatus{{
		ShardId: "r-old-0", ReplicaId: "r-old", Model: "sim-chat", Profile: &specv1.Profile{Name: "h100", Nodes: 1},
		ModelGeneration: spec.LegacyGeneration(chat), State: agentv1.ShardState_SHARD_STATE_READY, Endpoint: "127.0.0.1:9200",
	}}}, "node03", nil, false, h.conns["node03"])
	h.rec.Pass()
	want := spec.ReplicaGeneration(chat, "h100")
	if reps := h.fleet.Replicas(); len(reps) != 1 || reps[0].Generation != want {
		t.Fatalf("replicas after a pass = %+v, want r-old restamped %s", reps, want)
	}
	var told []string
	for _, m := range h.conns["node03"].sent {
		if rs := m.GetRestamp(); rs != nil {
			told = append(told, rs.GetShardId()+"="+rs.GetReplicaGeneration())
		}
	}
	if len(told) != 1 || told[0] != "r-old-0="+want {
		t.Fatalf("restamps sent to node03 = %v, want r-old-0=%s", told, want)
	}

	chat.Profiles = append(chat.Profiles, spec.Profile{Name: "big", Engine: "sim", GPUClass: "h100-80g", TP: 2})
	chat.Profiles[0].GPUClass = ""
	e, err := reg.Update(ctx, chat)
	if err != nil {
		t.Fatal(err)
	}
	if spec.LegacyGeneration(e.Model) == spec.LegacyGeneration(chatModel()) {
		t.Fatal("the edit left the legacy hash as it was: it tests nothing")
	}
	h.rec.Pass()
	h.rec.Pass()
	if n, stops := len(h.startsFor("sim-chat")), h.conns["node03"].stops(); n != 0 || len(stops) != 0 {
		t.Fatalf("adding a profile and editing gpu_class replaced the restamped replica: %d started, stopped %v", n, stops)
	}
	if e.Stale("h100", want) {
		t.Error("the restamped replica is stale after an edit that keeps its build")
	}
	chat.Profiles[0].Args = []string{"--x"}
	if e, err = reg.Update(ctx, chat); err != nil {
		t.Fatal(err)
	}
	if !e.Stale("h100", want) {
		t.Error("the restamped replica is current after its own args changed")
	}
}

// TestManualRolloutGoesOnAfterUnrelatedEdit: a manual rollout of profile
// h100's args, asked for with two stale replicas, replaces both although a
// profile is added after the request (which changes the model's
// generation, not h100's); a further edit of h100's args holds the rest of
// the rollout until it is asked for again.
func TestManualRolloutGoesOnAfterUnrelatedEdit(t *testing.T) {
	reg, err := models.New(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	h.rec.opts.Catalog = reg
	ctx := context.Background()
	m := chatModel()
	m.Rollout = spec.RolloutManual
	m.Scaling = spec.Scaling{Min: 2, Max: 2}
	if _, err := reg.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	h.readyAll()
	h.rec.Pass()
	stale := func(e models.Entry) int {
		n := 0
		for _, rep := range h.fleet.Replicas() {
			if rep.Live() && e.Stale(rep.Profile.Name, rep.Generation) {
				n++
			}
		}
		return n
	}
	m.Profiles[0].Args = []string{"--decode-tps", "9"}
	e, err := reg.Update(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	if got := h.rec.RequestRollout(e); len(got) != 2 {
		t.Fatalf("RequestRollout named %v, want the two h100 replicas", got)
	}
	h.rec.Pass() // the first replacement
	m.Profiles = append(m.Profiles, spec.Profile{Name: "cpu", Engine: "sim", Priority: -1})
	if e, err = reg.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	for range 6 {
		h.readyAll()
		h.rec.Pass()
	}
	if n := stale(e); n != 0 {
		t.Fatalf("%d stale replicas left after a profile was added mid-rollout, want the rollout finished", n)
	}

	// Another edit of h100 after a new request's first replacement: the
	// rest waits for the next request.
	m.Profiles[0].Args = []string{"--decode-tps", "8"}
	if e, err = reg.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	h.rec.RequestRollout(e)
	h.rec.Pass()
	m.Profiles[0].Args = []string{"--decode-tps", "7"}
	if e, err = reg.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	for range 6 {
		h.readyAll()
		h.rec.Pass()
	}
	if n := stale(e); n == 0 {
		t.Fatal("an edit of h100 after the request was rolled out without being asked for")
	}
}

// TestPlacedReplicaCarriesBothStamps: a replica's StartShard carries the
// model's whole-model hash in model_generation, which a control plane of
// the earlier release that leads later compares with its own generation
// (so it finds the replica current and replaces nothing), and the
// per-replica hash in replica_generation; a replica adopted from shards
// reporting both is stamped with the per-replica one.
func TestPlacedReplicaCarriesBothStamps(t *testing.T) {
	chat := chatModel()
	chat.Scaling = spec.Scaling{Min: 1, Max: 1}
	h := newHarness(t, chat)
	chat.Normalize()
	h.rec.Pass()
	var starts []*agentv1.StartShard
	for _, ss := range h.startsFor("sim-chat") {
		starts = append(starts, ss...)
	}
	if len(starts) != 1 {
		t.Fatalf("%d shards started, want 1", len(starts))
	}
	if s := starts[0]; s.GetModelGeneration() != spec.LegacyGeneration(chat) || s.GetReplicaGeneration() != spec.ReplicaGeneration(chat, "h100") {
		t.Fatalf("StartShard stamps model %q replica %q, want %q (whole model) and %q (its build)",
			s.GetModelGeneration(), s.GetReplicaGeneration(), spec.LegacyGeneration(chat), spec.ReplicaGeneration(chat, "h100"))
	}

	f := fleet.New()
	f.Connect(&agentv1.Hello{NodeId: "node09", Inventory: inventory(""), Shards: []*agentv1.ShardStatus{{
		ShardId: "r-9-0", ReplicaId: "r-9", Model: "sim-chat", Profile: &specv1.Profile{Name: "h100", Nodes: 1},
		ModelGeneration: "whole", ReplicaGeneration: "own", State: agentv1.ShardState_SHARD_STATE_READY,
	}}}, "node09", nil, false, &recordingConn{})
	if reps := f.Replicas(); len(reps) != 1 || reps[0].Generation != "own" {
		t.Fatalf("adopted replicas = %+v, want r-9 stamped with its replica generation", reps)
	}
}

// TestMissedRestampSentAgain is the control-plane-first upgrade: the agent
// of an adopted legacy-stamped replica ignores the first Restamp (it is of
// the earlier release), is upgraded and reconnects still reporting no
// replica_generation, and is told again; once it reports the stamp, an
// edit that changes the whole-model hash followed by a control-plane
// restart leaves the replica serving. A pass whose agent has reported
// nothing new sends nothing again.
func TestMissedRestampSentAgain(t *testing.T) {
	ctx := context.Background()
	reg, err := models.New(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	h.rec.opts.Catalog = reg
	chat := chatModel()
	chat.Scaling = spec.Scaling{Min: 1, Max: 1}
	if _, err := reg.Create(ctx, chat); err != nil {
		t.Fatal(err)
	}
	chat.Normalize()
	want := spec.ReplicaGeneration(chat, "h100")
	hello := func(replicaGen string) *agentv1.Hello {
		return &agentv1.Hello{NodeId: "node03", Address: "127.0.0.1", Inventory: inventory(""), Shards: []*agentv1.ShardStatus{{
			ShardId: "r-old-0", ReplicaId: "r-old", Model: "sim-chat", Profile: &specv1.Profile{Name: "h100", Nodes: 1},
			ModelGeneration: spec.LegacyGeneration(chat), ReplicaGeneration: replicaGen,
			State: agentv1.ShardState_SHARD_STATE_READY, Endpoint: "127.0.0.1:9200",
		}}}
	}
	restamps := func(c *recordingConn) []string {
		c.mu.Lock()
		defer c.mu.Unlock()
		var told []string
		for _, m := range c.sent {
			if rs := m.GetRestamp(); rs != nil {
				told = append(told, rs.GetShardId()+"="+rs.GetReplicaGeneration())
			}
		}
		return told
	}
	h.fleet.Connect(hello(""), "node03", nil, false, h.conns["node03"])
	h.rec.Pass()
	h.rec.Pass()
	if told := restamps(h.conns["node03"]); len(told) != 1 || told[0] != "r-old-0="+want {
		t.Fatalf("restamps after two passes = %v, want r-old-0=%s once", told, want)
	}

	// The agent ignored it; upgraded, it reconnects from its state file.
	h.fleet.Connect(hello(""), "node03", nil, false, h.conns["node03"])
	h.rec.Pass()
	if told := restamps(h.conns["node03"]); len(told) != 2 || told[1] != "r-old-0="+want {
		t.Fatalf("restamps after the agent reconnected without the stamp = %v, want r-old-0=%s again", told, want)
	}
	// A status without it (an agent that still ignores it) is answered too.
	h.fleet.ApplyShardStatus("node03", &agentv1.ShardStatus{ShardId: "r-old-0", ReplicaId: "r-old", Model: "sim-chat", State: agentv1.ShardState_SHARD_STATE_READY})
	h.rec.Pass()
	if told := restamps(h.conns["node03"]); len(told) != 3 {
		t.Fatalf("restamps after a status without the stamp = %v, want a third", told)
	}
	// Now it has recorded it.
	h.fleet.Connect(hello(want), "node03", nil, false, h.conns["node03"])
	h.rec.Pass()
	if told := restamps(h.conns["node03"]); len(told) != 3 {
		t.Fatalf("restamps after the agent reported the stamp = %v, want no more", told)
	}

	chat.Profiles = append(chat.Profiles, spec.Profile{Name: "big", Engine: "sim", GPUClass: "h100-80g", TP: 2})
	e, err := reg.Update(ctx, chat)
	if err != nil {
		t.Fatal(err)
	}
	h.rec.Pass()
	if n := len(h.startsFor("sim-chat")); n != 0 {
		t.Fatalf("adding a profile started %d replicas", n)
	}

	// Control-plane restart: a fresh fleet and reconciler, the same agent.
	h2 := newHarness(t)
	h2.rec.opts.Catalog = reg
	h2.fleet.Connect(hello(want), "node03", nil, false, h2.conns["node03"])
	h2.rec.Pass()
	if n, stops := len(h2.startsFor("sim-chat")), h2.conns["node03"].stops(); n != 0 || len(stops) != 0 {
		t.Fatalf("after a control-plane restart: %d started, stopped %v", n, stops)
	}
	if reps := h2.fleet.Replicas(); len(reps) != 1 || reps[0].Generation != want || e.Stale("h100", reps[0].Generation) {
		t.Fatalf("replicas after a control-plane restart = %+v, want r-old current at %s", reps, want)
	}
	if told := restamps(h2.conns["node03"]); len(told) != 0 {
		t.Fatalf("restamps after a control-plane restart = %v, want none", told)
	}
}

// TestNoRestampOfStaleReplica: a replica adopted with a whole-model stamp
// of an earlier definition is stale: its agent is not told to record that
// stamp as a per-replica one (it reports none), and it is replaced.
func TestNoRestampOfStaleReplica(t *testing.T) {
	h := newHarness(t, chatModel())
	h.fleet.Connect(&agentv1.Hello{NodeId: "node03", Address: "127.0.0.1", Inventory: inventory(""), Shards: []*agentv1.ShardStatus{{
		ShardId: "r-old-0", ReplicaId: "r-old", Model: "sim-chat", Profile: &specv1.Profile{Name: "h100", Nodes: 1},
		ModelGeneration: "0123456789ab", State: agentv1.ShardState_SHARD_STATE_READY, Endpoint: "127.0.0.1:9200",
	}}}, "node03", nil, false, h.conns["node03"])
	h.rec.Pass()
	h.rec.Pass()
	for _, m := range h.conns["node03"].sent {
		if rs := m.GetRestamp(); rs != nil {
			t.Fatalf("restamp sent for a stale replica: %v", rs)
		}
	}
	if len(h.startsFor("sim-chat")) == 0 {
		t.Fatal("the stale replica is not being replaced")
	}
}
