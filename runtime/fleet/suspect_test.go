package fleet

import (
	"testing"
	"time"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
)

// TestSuspectAndSilent: a node is suspect the moment its session ends,
// silent (its replicas to be replaced) once unheard for the bound, whether
// its session ended or it just went quiet, and neither once heard again.
func TestSuspectAndSilent(t *testing.T) {
	now := time.Unix(1000, 0)
	f := New()
	f.SetClock(func() time.Time { return now })
	hello := &agentv1.Hello{Inventory: &agentv1.Inventory{}}
	a := f.Connect(hello, "a", nil, false, nopConn{})
	f.Connect(hello, "b", nil, false, nopConn{})
	node := func(id string) Node { n, _ := f.Node(id); return n }

	f.Disconnect("a", a)
	if n := node("a"); !n.Suspect || n.Silent || n.SuspectReason != "agent session ended" || !n.SuspectSince.Equal(now) {
		t.Fatalf("after its session ended: %+v, want suspect at once, not silent", n)
	}
	now = now.Add(5 * time.Second)
	if got := f.ExpireSilent(6 * time.Second); len(got) != 0 {
		t.Fatalf("silent after 5s of a 6s bound: %v", got)
	}
	now = now.Add(2 * time.Second)
	f.Heartbeat("a", &agentv1.Heartbeat{}) // a late message of the old session: not a session
	got := f.ExpireSilent(6 * time.Second)
	if len(got) != 1 || got[0] != "b" {
		// a's late heartbeat counted as heard from; b, connected but quiet
		// for 7s, is silent.
		t.Fatalf("silent after 7s: %v, want b", got)
	}
	if n := node("b"); !n.Suspect || !n.Silent {
		t.Fatalf("b quiet for 7s: %+v, want suspect and silent", n)
	}
	f.Heartbeat("b", &agentv1.Heartbeat{})
	if n := node("b"); n.Suspect || n.Silent {
		t.Fatalf("b heard from again: %+v, want neither suspect nor silent", n)
	}
	now = now.Add(7 * time.Second)
	if got := f.ExpireSilent(6 * time.Second); len(got) != 2 {
		t.Fatalf("silent after 7 more quiet seconds: %v, want a and b", got)
	}
	f.Connect(hello, "a", nil, false, nopConn{})
	if n := node("a"); n.Suspect || n.Silent {
		t.Fatalf("a reconnected: %+v, want neither", n)
	}
}
