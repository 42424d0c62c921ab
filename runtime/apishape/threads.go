package apishape

import (
	"bytes"
	"encoding/json"
	"reflect"
	"unicode/utf8"
)

// EstimateTokens is the token estimate of a message used to fit a
// thread into a model's context, meant to be high, since a thread fitted
// too loosely is refused by the engine on every turn: a third of its
// ASCII bytes (English runs near four bytes a token, code near three)
// and one and a half tokens for every other character (Chinese, Japanese
// or Korean runs near one a character, some tokenizers more), rounded
// up. A quarter of the bytes, request.EstimatePromptTokens' rule, counts
// a CJK character as three quarters of a token.
func EstimateTokens(msg json.RawMessage) int {
	ascii, other := 0, 0
	for _, r := range string(msg) {
		if r < utf8.RuneSelf {
			ascii++
		} else {
			other++
		}
	}
	return (ascii+2)/3 + (3*other+1)/2
}

func roleOf(msg json.RawMessage) string {
	var m struct {
		Role string `json:"role"`
	}
	_ = json.Unmarshal(msg, &m)
	return m.Role
}

// MergeThread puts a thread's history before the turn a client just sent
// and, when budget (in estimated tokens, 0 for none) is passed, drops the
// oldest turns of the history until the whole fits. A turn starts at a
// user message and runs to the next one, so a tool call is never kept
// without its answer. System messages are never dropped, and neither is
// the new turn; when the new turn has a system message of its own, the
// history's are left out (the new one replaces them). It returns the
// messages to send, the history kept (to store after the answer), and
// how many turns were dropped.
func MergeThread(history, turn []json.RawMessage, budget int) (msgs, kept []json.RawMessage, trimmed int) {
	turnHasSystem := hasSystem(turn)
	type span struct{ start, end int }
	var system []json.RawMessage
	var rest []json.RawMessage
	for _, m := range history {
		if roleOf(m) == "system" {
			if !turnHasSystem {
				system = append(system, m)
			}
			continue
		}
		rest = append(rest, m)
	}
	// The turns of the rest of the history.
	var turns []span
	for i, m := range rest {
		if i == 0 || roleOf(m) == "user" {
			turns = append(turns, span{i, i})
		}
		turns[len(turns)-1].end = i + 1
	}
	size := 0
	for _, group := range [][]json.RawMessage{system, rest, turn} {
		for _, m := range group {
			size += EstimateTokens(m)
		}
	}
	first := 0 // index into rest of the oldest message kept
	for budget > 0 && size > budget && trimmed < len(turns) {
		t := turns[trimmed]
		for _, m := range rest[t.start:t.end] {
			size -= EstimateTokens(m)
		}
		first = t.end
		trimmed++
	}
	kept = append(append(kept, system...), rest[first:]...)
	msgs = append(append([]json.RawMessage(nil), kept...), turn...)
	return msgs, kept, trimmed
}

// AppendTurn is a thread after a turn whose answer came while another
// turn of the same thread was stored: what is stored now, then the turn
// and its answer. A turn with a system message of its own replaces the
// stored ones, as in MergeThread.
func AppendTurn(stored, turn []json.RawMessage, answer json.RawMessage) []json.RawMessage {
	if hasSystem(turn) {
		stored = withoutSystem(stored)
	}
	out := make([]json.RawMessage, 0, len(stored)+len(turn)+1)
	return append(append(append(out, stored...), turn...), answer)
}

// WithoutLastTurn returns a thread without its last turn when it ends
// with turn (the same messages, as JSON values: spacing and the order
// of keys do not count) and one answer after it (an assistant
// message): what a request sent again after its first attempt was
// stored finds. The turn and an answer put back after what it returns
// make the thread it was, but for the answer. Else it returns msgs and
// false.
func WithoutLastTurn(msgs, turn []json.RawMessage) ([]json.RawMessage, bool) {
	start := len(msgs) - len(turn) - 1
	if len(turn) == 0 || start < 0 || roleOf(msgs[len(msgs)-1]) != "assistant" {
		return msgs, false
	}
	for i, m := range turn {
		var a, b any
		if json.Unmarshal(m, &a) != nil || json.Unmarshal(msgs[start+i], &b) != nil || !reflect.DeepEqual(a, b) {
			return msgs, false
		}
	}
	return msgs[:start:start], true
}

// EncodeThread is the JSON array of a thread's messages to store, each
// compacted and none HTML-escaped (json.Marshal would write each '<',
// '>' and '&' as six bytes), so it is never longer than CapThread
// counts.
func EncodeThread(msgs []json.RawMessage) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(msgs); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// CapThread bounds a thread to be stored: while its JSON array would
// pass maxBytes (0 for no bound) its oldest turns are dropped, as
// MergeThread drops them (a user message to the next, system messages
// never); the last turn is always kept.
func CapThread(msgs []json.RawMessage, maxBytes int) []json.RawMessage {
	// The array's brackets, its messages and the commas between them.
	size := 1
	for _, m := range msgs {
		size += len(m) + 1
	}
	if maxBytes <= 0 || size <= maxBytes {
		return msgs
	}
	// The start of each turn: a user message (or the first message
	// that is not a system one).
	var starts []int
	for i, m := range msgs {
		r := roleOf(m)
		if r == "system" {
			continue
		}
		if r == "user" || len(starts) == 0 {
			starts = append(starts, i)
		}
	}
	drop := make([]bool, len(msgs))
	for t := 0; t+1 < len(starts) && size > maxBytes; t++ {
		for i := starts[t]; i < starts[t+1]; i++ {
			if roleOf(msgs[i]) != "system" {
				drop[i] = true
				size -= len(msgs[i]) + 1
			}
		}
	}
	out := make([]json.RawMessage, 0, len(msgs))
	for i, m := range msgs {
		if !drop[i] {
			out = append(out, m)
		}
	}
	return out
}
