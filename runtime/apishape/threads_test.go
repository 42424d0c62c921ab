package apishape

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func msgs(specs ...string) []json.RawMessage {
	var out []json.RawMessage
	for _, s := range specs {
		role, content, _ := strings.Cut(s, ":")
		out = append(out, mustJSON(map[string]string{"role": role, "content": content}))
	}
	return out
}

func render(ms []json.RawMessage) string {
	var out []string
	for _, m := range ms {
		var v map[string]any
		_ = json.Unmarshal(m, &v)
		out = append(out, v["role"].(string)+":"+v["content"].(string))
	}
	return strings.Join(out, " ")
}

func TestMergeThread(t *testing.T) {
	history := msgs("system:be brief", "user:one", "assistant:1", "user:two", "tool:t", "assistant:2", "user:three", "assistant:3")
	one := EstimateTokens(msgs("user:one")[0]) // every message here is about this size
	tests := []struct {
		name    string
		history []json.RawMessage
		turn    []json.RawMessage
		budget  int
		want    string
		trimmed int
	}{
		{"no budget keeps all", history, msgs("user:four"), 0, "system:be brief user:one assistant:1 user:two tool:t assistant:2 user:three assistant:3 user:four", 0},
		{"fits", history, msgs("user:four"), 100 * one, "system:be brief user:one assistant:1 user:two tool:t assistant:2 user:three assistant:3 user:four", 0},
		{"oldest turn dropped, system kept", history, msgs("user:four"), 8 * one, "system:be brief user:two tool:t assistant:2 user:three assistant:3 user:four", 1},
		{"a turn goes whole, its tool answer too", history, msgs("user:four"), 6 * one, "system:be brief user:three assistant:3 user:four", 2},
		{"never the system nor the new turn", history, msgs("user:four", "user:five"), 1, "system:be brief user:four user:five", 3},
		{"a new system message replaces the history's", history, msgs("system:be long", "user:four"), 0, "user:one assistant:1 user:two tool:t assistant:2 user:three assistant:3 system:be long user:four", 0},
		{"no history", nil, msgs("user:hi"), 1, "user:hi", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, kept, trimmed := MergeThread(tt.history, tt.turn, tt.budget)
			if render(got) != tt.want || trimmed != tt.trimmed {
				t.Fatalf("got %q trimmed %d\nwant %q trimmed %d", render(got), trimmed, tt.want, tt.trimmed)
			}
			if len(kept)+len(tt.turn) != len(got) {
				t.Fatalf("kept %d of history, sent %d", len(kept), len(got))
			}
		})
	}
}

// TestMergeThreadCJK: a thread in Chinese (a token or more a character)
// is fitted within the budget counted in characters; a quarter of the
// bytes would count three quarters and keep a turn too many.
func TestMergeThreadCJK(t *testing.T) {
	long := strings.Repeat("我们今天讨论了模型的上下文长度", 20) // 300 characters
	history := msgs("user:"+long, "assistant:"+long)
	turn := msgs("user:" + long)
	const budget = 800
	sent, _, trimmed := MergeThread(history, turn, budget)
	chars := 0
	for _, m := range sent {
		chars += utf8.RuneCount(m)
	}
	if chars > budget || trimmed != 1 {
		t.Fatalf("sent %d messages, %d characters (%d turns trimmed) in a budget of %d tokens", len(sent), chars, trimmed, budget)
	}
	if got := EstimateTokens(msgs("user:" + strings.Repeat("x", 300))[0]); got < 100 || got > 120 {
		t.Fatalf("300 ASCII letters estimated %d tokens, want about a third of the bytes", got)
	}
}

// TestCapThread: a thread past the bound loses its oldest turns, whole,
// never its system messages nor its last turn; one within it is kept
// as it is.
func TestCapThread(t *testing.T) {
	thread := msgs("system:be brief", "user:one", "assistant:1", "user:two", "tool:t", "assistant:2", "user:three", "assistant:3")
	size := func(ms []json.RawMessage) int { b, _ := json.Marshal(ms); return len(b) }
	whole := size(thread)
	if got := render(CapThread(thread, whole)); got != render(thread) {
		t.Fatalf("within the bound: %q", got)
	}
	if got := render(CapThread(thread, 0)); got != render(thread) {
		t.Fatalf("no bound: %q", got)
	}
	got := CapThread(thread, whole-1)
	if render(got) != "system:be brief user:two tool:t assistant:2 user:three assistant:3" || size(got) > whole-1 {
		t.Fatalf("one byte past the bound: %q", render(got))
	}
	if got := render(CapThread(thread, 10)); got != "system:be brief user:three assistant:3" {
		t.Fatalf("a bound below the last turn: %q", got)
	}
}

// TestEncodeThreadIsNoLongerThanCapThreadCounts: markup is stored as
// sent (not HTML-escaped), messages compacted.
func TestEncodeThreadIsNoLongerThanCapThreadCounts(t *testing.T) {
	thread := []json.RawMessage{json.RawMessage(`{"role": "user", "content": "<b>a & b</b>"}`), json.RawMessage(`{"role":"assistant","content":"<i>"}`)}
	got, err := EncodeThread(thread)
	want := `[{"role":"user","content":"<b>a & b</b>"},{"role":"assistant","content":"<i>"}]`
	if err != nil || string(got) != want {
		t.Fatalf("EncodeThread = %s, %v; want %s", got, err, want)
	}
}

// TestWithoutLastTurn: a thread loses its last turn only when it ends
// with the turn given (as JSON values: the client's spacing and key
// order do not count) and an answer after it.
func TestWithoutLastTurn(t *testing.T) {
	stored := msgs("system:be brief", "user:one", "assistant:1", "user:two", "tool:t", "assistant:2")
	for _, tt := range []struct {
		name string
		msgs []json.RawMessage
		turn []json.RawMessage
		want string
		ok   bool
	}{
		{"the last turn", stored, msgs("user:two", "tool:t"), "system:be brief user:one assistant:1", true},
		{"spaced otherwise", stored, []json.RawMessage{json.RawMessage(`{ "role": "user", "content": "two" }`), json.RawMessage(` {"role":"tool","content":"t"}`)},
			"system:be brief user:one assistant:1", true},
		// Put back, the turn makes the same thread: only its answer is
		// new.
		{"its last messages", stored, msgs("tool:t"), "system:be brief user:one assistant:1 user:two", true},
		{"an answer of its own", stored, msgs("tool:t", "assistant:2"), "", false},
		{"another turn", stored, msgs("user:one", "tool:t"), "", false},
		{"an earlier turn", stored, msgs("user:one"), "", false},
		{"no answer after it", stored[:5], msgs("user:two", "tool:t"), "", false},
		{"longer than the thread", stored[:2], msgs("system:be brief", "user:one"), "", false},
		{"no turn", stored, nil, "", false},
		{"a system message of its own", append(msgs("user:one", "assistant:1"), msgs("system:new", "user:two", "assistant:2")...),
			msgs("system:new", "user:two"), "user:one assistant:1", true},
	} {
		got, ok := WithoutLastTurn(tt.msgs, tt.turn)
		if ok != tt.ok || ok && render(got) != tt.want || !ok && len(got) != len(tt.msgs) {
			t.Errorf("%s: %q, %v; want %q, %v", tt.name, render(got), ok, tt.want, tt.ok)
		}
	}
	// What it returns is a thread of its own: appending to it leaves the
	// stored one whole.
	got, _ := WithoutLastTurn(stored, msgs("user:two", "tool:t"))
	_ = append(got, msgs("user:x")...)
	if render(stored[3:4]) != "user:two" {
		t.Fatalf("appending to what WithoutLastTurn returned changed the thread: %s", render(stored))
	}
}
