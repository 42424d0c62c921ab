package apishape

import "encoding/json"

// admittedHistory is what of history a body may hold when admission
// counted maxBytes for it: the history whole when its messages (each
// with the comma before it in the body) take no more, which is so
// whenever the thread is as it was sized; else the oldest turns are
// left out (CapThread), then, when the last turn or the system
// messages alone still pass it, those too. It returns the history to
// send and how many turns it leaves out.
func admittedHistory(history []json.RawMessage, maxBytes int) ([]json.RawMessage, int) {
	if historyBytes(history) <= maxBytes {
		return history, 0
	}
	out := history
	if maxBytes > 0 {
		out = CapThread(history, maxBytes)
	}
	if historyBytes(out) > maxBytes {
		// The last turn alone passes: only system messages, oldest
		// left out first.
		var system []json.RawMessage
		for _, m := range out {
			if roleOf(m) == "system" {
				system = append(system, m)
			}
		}
		for len(system) > 0 && historyBytes(system) > maxBytes {
			system = system[1:]
		}
		out = system
	}
	return out, turnsOf(history) - turnsOf(out)
}

// AdmittedHistory is what of a thread's history a body sent with turn
// may hold when admission counted maxBytes for the history (its stored
// size, read before the thread itself: another turn stored between the
// two must not reach the engine unreserved). When the turn has system
// messages of its own they replace the thread's (MergeThread), so the
// thread's are not sent and take none of the size. It returns the history
// to send and how many turns it leaves out.
func AdmittedHistory(history, turn []json.RawMessage, maxBytes int) ([]json.RawMessage, int) {
	if hasSystem(turn) {
		history = withoutSystem(history)
	}
	return admittedHistory(history, maxBytes)
}

// hasSystem reports whether msgs hold a system message.
func hasSystem(msgs []json.RawMessage) bool {
	for _, m := range msgs {
		if roleOf(m) == "system" {
			return true
		}
	}
	return false
}

// withoutSystem is msgs without their system messages.
func withoutSystem(msgs []json.RawMessage) []json.RawMessage {
	out := make([]json.RawMessage, 0, len(msgs))
	for _, m := range msgs {
		if roleOf(m) != "system" {
			out = append(out, m)
		}
	}
	return out
}

// historyBytes is what msgs add to a body's messages: each message and
// a comma.
func historyBytes(msgs []json.RawMessage) int {
	n := 0
	for _, m := range msgs {
		n += len(m) + 1
	}
	return n
}

// turnsOf counts the turns of msgs as MergeThread and CapThread drop
// them: each starts at a user message, or at the first message that is
// not a system one.
func turnsOf(msgs []json.RawMessage) int {
	n := 0
	for _, m := range msgs {
		switch r := roleOf(m); {
		case r == "system":
		case r == "user" || n == 0:
			n++
		}
	}
	return n
}
