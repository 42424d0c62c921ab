package router

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// prompt is a chat prompt's bytes: a shared system part and a conversation.
func prompt(system, conv string, turns int) []byte {
	var b strings.Builder
	b.WriteString(`[{"role":"system","content":"` + strings.Repeat(system+" ", 400) + `"}`)
	for i := range turns {
		fmt.Fprintf(&b, `,{"role":"user","content":"%s turn %d %s"}`, conv, i, strings.Repeat("words ", 100))
	}
	b.WriteString("]")
	return []byte(b.String())
}

func TestPrefixKey(t *testing.T) {
	a := PrefixKey(prompt("sys", "c1", 3))
	b := PrefixKey(prompt("sys", "c1", 4))
	if len(a) == 0 || len(b) <= len(a) {
		t.Fatalf("keys of %d and %d blocks, want the longer prompt to have more", len(a), len(b))
	}
	// The next turn repeats the conversation: every whole block of the
	// shorter prompt but the last (which ends where the turns differ)
	// is shared.
	for i := range len(a) - 1 {
		if a[i] != b[i] {
			t.Fatalf("block %d differs between two turns of one conversation", i)
		}
	}
	c := PrefixKey(prompt("other", "c1", 3))
	if c[0] == a[0] {
		t.Errorf("different system prompts share their first block")
	}
	if PrefixKey(make([]byte, KeyBlockBytes-1)) != nil {
		t.Errorf("a prompt shorter than a block has a key")
	}
	if n := len(PrefixKey(make([]byte, KeyBlockBytes*(KeyMaxBlocks+10)))); n != KeyMaxBlocks {
		t.Errorf("a long prompt has %d blocks, want the cap %d", n, KeyMaxBlocks)
	}
}

// TestPrefixAffinityKeepsConversations: each turn of a conversation goes to
// the replica that took its earlier turns, while the conversations, which
// share a long system prompt, spread over the replicas.
func TestPrefixAffinityKeepsConversations(t *testing.T) {
	r := New()
	r.SetEndpoints("m", []Endpoint{ep("a", 1), ep("b", 1), ep("c", 1), ep("d", 1)})
	home := map[string]string{}
	perReplica := map[string]int{}
	for turn := 1; turn <= 5; turn++ {
		for c := range 12 {
			conv := fmt.Sprintf("conv%d", c)
			l, err := r.Route("m", Request{Key: PrefixKey(prompt("shared", conv, turn))})
			if err != nil {
				t.Fatal(err)
			}
			got := l.Endpoint().ReplicaID
			l.Done()
			if turn == 1 {
				home[conv] = got
				perReplica[got]++
				continue
			}
			if got != home[conv] {
				t.Errorf("turn %d of %s went to %s, its earlier turns to %s", turn, conv, got, home[conv])
			}
		}
	}
	// The second conversation follows the first onto its replica (the
	// system prompt is not known as shared until two conversations
	// continued it); from then on new conversations spread.
	for _, id := range []string{"a", "b", "c", "d"} {
		if n := perReplica[id]; n < 2 || n > 4 {
			t.Errorf("conversations per replica = %v, want 3 each, give or take one", perReplica)
			break
		}
	}
}

// TestPrefixAffinityNeverOverloads: requests that all share one long
// prefix, held in flight, still spread: no replica carries more than the
// policy's bound over the least loaded (Ratio 1.5, Slack 4).
func TestPrefixAffinityNeverOverloads(t *testing.T) {
	r := New()
	r.SetEndpoints("m", []Endpoint{ep("a", 1), ep("b", 1), ep("c", 1), ep("d", 1)})
	key := PrefixKey(prompt("same", "same", 2))
	var held []Lease
	for i := range 200 {
		l, err := r.Route("m", Request{Key: key})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
		loads := inflight(r, "m")
		lo, hi := int64(1<<62), int64(0)
		for _, n := range loads {
			lo, hi = min(lo, n), max(hi, n)
		}
		if float64(hi) > float64(lo+1)*1.5+4 {
			t.Fatalf("after %d requests sharing one prefix: in flight %v, beyond the bound", i+1, loads)
		}
	}
	for _, l := range held {
		l.Done()
	}
}

// TestPrefixAffinityWeighsEngineLoad: the replica holding a prefix is not
// chosen when its engine reports a queue well beyond another's.
func TestPrefixAffinityWeighsEngineLoad(t *testing.T) {
	r, key, owner := prefixHeld(t)
	for _, tg := range r.Targets() {
		if tg.ReplicaID == owner {
			tg.SetLoad(EngineLoad{Known: true, Running: 8, Waiting: 4, KVUsage: 0.9}, 0)
		}
	}
	l, _ := r.Route("m", Request{Key: key})
	if l.Endpoint().ReplicaID == owner {
		t.Errorf("went to %s, whose engine queues 12 requests, over an idle replica", owner)
	}
}

// TestNoSharedPrefixSpreadsLikeLeastLoaded: prompts that share nothing
// spread evenly, as without affinity.
func TestNoSharedPrefixSpreadsLikeLeastLoaded(t *testing.T) {
	r := New()
	r.SetEndpoints("m", []Endpoint{ep("a", 1), ep("b", 1), ep("c", 1), ep("d", 1)})
	var held []Lease
	for i := range 40 {
		l, err := r.Route("m", Request{Key: PrefixKey(prompt(fmt.Sprintf("unique%d", i), "x", 1))})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	for id, n := range inflight(r, "m") {
		if n != 10 {
			t.Errorf("%s carries %d of 40, want 10 (%v)", id, n, inflight(r, "m"))
		}
	}
	for _, l := range held {
		l.Done()
	}
}

func TestRoundRobinIgnoresLoad(t *testing.T) {
	r := New()
	r.SetModel("m", ModelConfig{Policy: RoundRobin{}})
	r.SetEndpoints("m", []Endpoint{ep("a", 1), ep("b", 1)})
	addLoad(t, r, "m", "a", 10)
	counts := map[string]int{}
	for range 10 {
		l, _ := r.Pick("m", "")
		counts[l.Endpoint().ReplicaID]++
		l.Done()
	}
	if counts["a"] != 5 || counts["b"] != 5 {
		t.Errorf("round-robin picks %v, want 5 each whatever the load", counts)
	}
}

func TestPolicyNames(t *testing.T) {
	for _, name := range ProfileNames() {
		if _, err := Policy(name); err != nil {
			t.Errorf("Policy(%q): %v", name, err)
		}
	}
	if _, err := Policy("fastest"); err == nil || !strings.Contains(err.Error(), "round-robin") {
		t.Errorf("Policy of an unknown name: %v, want an error listing the names", err)
	}
	if s, _ := Policy("chat"); s != (PrefixAffinity{}) {
		t.Errorf("the default profile chat selects %T, want PrefixAffinity", s)
	}
}

// TestFailedReplicaLeavesTable: Lease.Fail takes the replica out at once;
// excluded replicas are not picked; MarkUp returns it.
func TestFailedReplicaLeavesTable(t *testing.T) {
	r := New()
	r.SetEndpoints("m", []Endpoint{ep("a", 1), ep("b", 1)})
	l, _ := r.Pick("m", "")
	failed := l.Endpoint().ReplicaID
	l.Fail()
	for range 5 {
		l, err := r.Pick("m", "")
		if err != nil || l.Endpoint().ReplicaID == failed {
			t.Fatalf("Pick after %s failed: %v %q", failed, err, l.Endpoint().ReplicaID)
		}
		l.Done()
	}
	other := map[string]string{"a": "b", "b": "a"}[failed]
	_, err := r.Route("m", Request{Exclude: []string{other}})
	var nr *NotReadyError
	if !errors.As(err, &nr) || nr.Down != 1 || nr.Tried != 1 || !errors.Is(err, ErrNoReplica) {
		t.Fatalf("Route excluding the only replica up: %v, want NotReadyError with 1 down and 1 tried", err)
	}
	// Still down after the table changes.
	r.SetEndpoints("m", []Endpoint{ep("a", 1), ep("b", 2)})
	for _, tg := range r.Targets() {
		if tg.ReplicaID == failed {
			if !tg.Down {
				t.Fatal("a table change brought the failed replica back")
			}
			tg.MarkUp()
		}
	}
	if got := inflight(r, "m"); len(got) != 2 {
		t.Fatalf("snapshot %v", got)
	}
	seen := map[string]bool{}
	for range 6 {
		l, _ := r.Pick("m", "")
		seen[l.Endpoint().ReplicaID] = true
		l.Done()
	}
	if !seen[failed] {
		t.Errorf("%s not picked after MarkUp", failed)
	}
}

// TestPendingIsBounded: a request that found no replica of a model loaded
// on demand asks for one for PendingFor only, and not once the model is
// no longer loaded on demand: one nothing took must not place a replica
// much later (the model was deleted or fixed meanwhile, then made on
// demand again).
func TestPendingIsBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	r := New(WithClock(func() time.Time { return now }))
	r.SetModel("od", ModelConfig{OnDemand: true})
	_, _ = r.Pick("od", "")
	now = now.Add(PendingFor + time.Second)
	if r.Demand("od").Pending || r.TakePending("od") {
		t.Errorf("a request %s old still asks for a replica", PendingFor+time.Second)
	}
	now = now.Add(time.Hour)
	_, _ = r.Pick("od", "")
	r.SetModel("od", ModelConfig{}) // scaling.min raised to max
	r.SetModel("od", ModelConfig{OnDemand: true})
	if r.TakePending("od") {
		t.Error("a request made while the model was on demand still asks after it was not")
	}
	_, _ = r.Pick("od", "")
	now = now.Add(PendingFor)
	if !r.TakePending("od") {
		t.Errorf("a request %s old no longer asks for a replica", PendingFor)
	}
}

// TestDemandAndWait: an on-demand model's request without a replica is
// demand; Wait returns once an endpoint is set.
func TestDemandAndWait(t *testing.T) {
	now := time.Unix(1000, 0)
	r := New(WithClock(func() time.Time { return now }))
	r.SetModel("od", ModelConfig{OnDemand: true})
	_, err := r.Pick("od", "")
	var nr *NotReadyError
	if !errors.As(err, &nr) || !nr.Loading {
		t.Fatalf("Pick of an on-demand model without replica: %v, want loading", err)
	}
	select {
	case <-r.Demanded():
	default:
		t.Fatal("no demand signalled")
	}
	d := r.Demand("od")
	if !d.Pending || !d.LastRequest.Equal(now) {
		t.Errorf("demand %+v, want pending at %v", d, now)
	}
	if !r.TakePending("od") || r.TakePending("od") || r.Demand("od").Pending {
		t.Error("TakePending did not report the pending demand once and clear it")
	}
	// A model that is not on demand is not pending.
	r.SetModel("fixed", ModelConfig{})
	_, _ = r.Pick("fixed", "")
	if r.TakePending("fixed") {
		t.Error("a model at min >= 1 became pending demand")
	}

	done := make(chan error, 1)
	go func() { done <- r.Wait(context.Background(), "od") }()
	deadline := time.Now().Add(5 * time.Second)
	for r.Demand("od").Waiting != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the waiter was not counted")
		}
		time.Sleep(time.Millisecond)
	}
	r.SetEndpoints("od", []Endpoint{ep("a", 3)})
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return after the model gained an endpoint")
	}
	// Its replica failing is not the model loading.
	for _, tg := range r.Targets() {
		tg.MarkDown()
	}
	if _, err := r.Pick("od", ""); !errors.As(err, &nr) || nr.Loading || nr.Down != 1 {
		t.Errorf("Pick with the only replica down: %v, want not loading, 1 down", err)
	}
	for _, tg := range r.Targets() {
		tg.MarkUp()
	}
	l, _ := r.Pick("od", "")
	d = r.Demand("od")
	if d.InFlight != 1 || d.Capacity != 3 || d.Load() != 1.0/3 {
		t.Errorf("demand %+v load %v, want 1 in flight over capacity 3", d, d.Load())
	}
	l.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := r.Wait(ctx, "none"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait for a model with no endpoint: %v, want the context's deadline", err)
	}
}

// TestPrefixAffinityAvoidsFullKVCache: the replica holding a prefix is not
// chosen while its engine says its KV cache is full, even with a queue
// affinity would otherwise accept; it is while the cache has room, and
// when every replica is as full.
func TestPrefixAffinityAvoidsFullKVCache(t *testing.T) {
	for _, c := range []struct {
		name             string
		ownerKV, otherKV float64
		wantOwner        bool
	}{
		{"holder full", 0.97, 0.2, false},
		{"holder with room", 0.5, 0.2, true},
		{"both full", 0.99, 0.99, true},
	} {
		r, key, owner := prefixHeld(t)
		for _, tg := range r.Targets() {
			kv := c.otherKV
			if tg.ReplicaID == owner {
				kv = c.ownerKV
			}
			// The holder runs one request more: without affinity the
			// request would go to the other.
			tg.SetLoad(EngineLoad{Known: true, Running: map[bool]int64{true: 2, false: 1}[tg.ReplicaID == owner], KVUsage: kv}, 0)
		}
		l, err := r.Route("m", Request{Key: key})
		if err != nil {
			t.Fatal(err)
		}
		l.Done()
		if got := l.Endpoint().ReplicaID == owner; got != c.wantOwner {
			t.Errorf("%s (KV %.2f holder, %.2f other): went to %s, the prefix's holder %s; want the holder: %v",
				c.name, c.ownerKV, c.otherKV, l.Endpoint().ReplicaID, owner, c.wantOwner)
		}
	}
}

// TestNotPlacedIsNotLoading: a model loaded on demand that the reconciler
// says cannot be loaded now is not told loading; the request still counts
// as demand; a request waiting for it to load is released at once with
// why; and once it can be loaded again it is loading.
func TestNotPlacedIsNotLoading(t *testing.T) {
	r := New()
	r.SetModel("od", ModelConfig{OnDemand: true})
	done := make(chan error, 1)
	go func() { done <- r.Wait(t.Context(), "od") }()
	for r.Demand("od").Waiting != 1 {
		runtime.Gosched()
	}
	const why = "no node can hold profile gpu: node01: 8 free GPUs, needs 16"
	r.SetModel("od", ModelConfig{OnDemand: true, NotPlaced: why})
	var nr *NotReadyError
	if err := <-done; !errors.As(err, &nr) || nr.NotPlaced != why {
		t.Fatalf("Wait once the model cannot be placed: %v, want why", err)
	}
	_, err := r.Pick("od", "")
	if !errors.As(err, &nr) || nr.Loading || nr.NotPlaced != why || !strings.Contains(err.Error(), why) {
		t.Fatalf("Pick: %v, want not loading, saying why", err)
	}
	if !r.TakePending("od") {
		t.Error("a request for a model that cannot be placed is not demand")
	}
	select {
	case <-r.Demanded():
	default:
		t.Error("no demand signalled")
	}
	if err := r.Wait(t.Context(), "od"); !errors.As(err, &nr) || nr.NotPlaced != why {
		t.Errorf("Wait: %v, want why at once", err)
	}
	r.SetModel("od", ModelConfig{OnDemand: true})
	if _, err := r.Pick("od", ""); !errors.As(err, &nr) || !nr.Loading || nr.NotPlaced != "" {
		t.Errorf("Pick once it can be placed: %v, want loading", err)
	}
	// Not on demand: nothing is loaded, whatever the reason said.
	r.SetModel("od", ModelConfig{NotPlaced: why})
	if _, err := r.Pick("od", ""); !errors.As(err, &nr) || nr.Loading || nr.NotPlaced != "" {
		t.Errorf("Pick of a model not on demand: %v, want neither loading nor a reason", err)
	}
}

// prefixHeld is a router over replicas a and b of model m, one of which
// (owner) took a request with a useful prefix (key).
func prefixHeld(t *testing.T) (r *Router, key Key, owner string) {
	t.Helper()
	r = New()
	r.SetEndpoints("m", []Endpoint{ep("a", 1), ep("b", 1)})
	key = PrefixKey(prompt("s", "c", 3))
	l, err := r.Route("m", Request{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	l.Done()
	return r, key, l.Endpoint().ReplicaID
}
