package apishape

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestAdmittedHistory: what of a history a body may hold within the
// size admission counted.
func TestAdmittedHistory(t *testing.T) {
	sys := json.RawMessage(`{"role":"system","content":"s"}`)
	u1 := json.RawMessage(`{"role":"user","content":"1"}`)
	a1 := json.RawMessage(`{"role":"assistant","content":"a"}`)
	u2 := json.RawMessage(`{"role":"user","content":"` + strings.Repeat("2", 100) + `"}`)
	a2 := json.RawMessage(`{"role":"assistant","content":"b"}`)
	all := []json.RawMessage{sys, u1, a1, u2, a2}
	stored := len(`[`) + historyBytes(all) // the array as stored: brackets and commas
	for _, tt := range []struct {
		name    string
		max     int
		want    []json.RawMessage
		dropped int
	}{
		{"as sized", stored, all, 0},
		{"nothing sized", 0, nil, 2},
		{"the oldest turn left out", historyBytes([]json.RawMessage{sys, u2, a2}), []json.RawMessage{sys, u2, a2}, 1},
		{"the last turn passes alone", historyBytes([]json.RawMessage{sys, u1, a1}), []json.RawMessage{sys}, 2},
		{"the system message passes too", len(sys), nil, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, dropped := admittedHistory(all, tt.max)
			if historyBytes(got) > tt.max || dropped != tt.dropped || len(got) != len(tt.want) {
				t.Fatalf("admittedHistory(%d) = %s, %d dropped; want %s, %d", tt.max, got, dropped, tt.want, tt.dropped)
			}
			for i := range got {
				if !bytes.Equal(got[i], tt.want[i]) {
					t.Fatalf("admittedHistory(%d) = %s; want %s", tt.max, got, tt.want)
				}
			}
		})
	}
}

// TestAdmittedForTurnWithSystem: a turn with system messages of its own
// is sent none of the thread's (MergeThread), so they take none of the
// admitted size: the turns that fit without them are all sent.
func TestAdmittedForTurnWithSystem(t *testing.T) {
	sys := json.RawMessage(`{"role":"system","content":"` + strings.Repeat("s", 200) + `"}`)
	u1 := json.RawMessage(`{"role":"user","content":"1"}`)
	a1 := json.RawMessage(`{"role":"assistant","content":"a"}`)
	u2 := json.RawMessage(`{"role":"user","content":"2"}`)
	a2 := json.RawMessage(`{"role":"assistant","content":"b"}`)
	history := []json.RawMessage{sys, u1, a1, u2, a2}
	turn := []json.RawMessage{json.RawMessage(`{"role":"system","content":"new"}`), json.RawMessage(`{"role":"user","content":"3"}`)}
	max := historyBytes([]json.RawMessage{u1, a1, u2, a2})
	got, dropped := AdmittedHistory(history, turn, max)
	if dropped != 0 || len(got) != 4 || !bytes.Equal(got[0], u1) {
		t.Errorf("AdmittedHistory = %s, %d turns left out; want both turns, none left out", got, dropped)
	}
	// Without a system message of its own, the turn is sent the thread's.
	got, _ = AdmittedHistory(history, turn[1:], historyBytes(history))
	if len(got) != 5 {
		t.Errorf("a turn without a system message was sent %s; want the whole history", got)
	}
}
