package gateway

import (
	"encoding/json"
	"strconv"
	"strings"
)

// chunkHead is what the bound keeps of a stream's first chunk, for the
// chunks the gateway writes itself.
type chunkHead struct {
	id, object, model string
	created           int64
}

// chunkChoice is what the bound reads of one streamed choice.
type chunkChoice struct {
	index    int
	carries  bool // a generated token (text, content, reasoning or tool-call arguments)
	finished bool // a non-empty finish_reason
}

// decodeChunk reads a chunk's head and choices with encoding/json; ok is
// false when the decoder refuses the data.
func decodeChunk(data []byte, buf []chunkChoice) (chunkHead, []chunkChoice, bool) {
	var c streamChunk
	if json.Unmarshal(data, &c) != nil {
		return chunkHead{}, buf, false
	}
	for i := range c.Choices {
		ch := &c.Choices[i]
		buf = append(buf, chunkChoice{index: ch.Index, carries: ch.carries(), finished: ch.FinishReason != nil && *ch.FinishReason != ""})
	}
	return chunkHead{c.ID, c.Object, c.Model, c.Created}, buf, true
}

// walkChunk is decodeChunk for the chunks engines send, by a walk of the
// bytes instead of a decode: a valid JSON object whose keys are spelled
// as the decoder names them, each once, with values of the types it
// expects. decided is false for anything else, which decodeChunk reads;
// FuzzChunkAgrees holds the two to the same result. The head's strings
// are read only when head is set.
func walkChunk(data []byte, buf []chunkChoice, head bool) (h chunkHead, choices []chunkChoice, ok, decided bool) {
	if len(data) == 0 || data[0] != '{' {
		return h, buf, false, false
	}
	if !validJSON(data) {
		return h, buf, false, true // the decoder refuses it too
	}
	choices = buf
	var seen uint8
	fail := false
	walkObject(data, 0, func(key []byte, start, end int) bool {
		bit, name := keyBit(key, "id", "object", "created", "model", "choices")
		if bit < 0 {
			return true
		}
		if name == "" || seen&(1<<bit) != 0 {
			fail = true
			return false
		}
		seen |= 1 << bit
		v := data[start:end]
		switch bit {
		case 0, 1, 3:
			if v[0] == 'n' {
				return true
			}
			if v[0] != '"' {
				fail = true
				return false
			}
			if head {
				s, _ := jsonString(v)
				switch bit {
				case 0:
					h.id = s
				case 1:
					h.object = s
				default:
					h.model = s
				}
			}
		case 2:
			if v[0] == 'n' {
				return true
			}
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				fail = true
				return false
			}
			h.created = n
		case 4:
			if v[0] == 'n' {
				return true
			}
			if v[0] != '[' {
				fail = true
				return false
			}
			for i := skipSpace(data, start+1); data[i] != ']'; {
				if data[i] != '{' {
					fail = true
					return false
				}
				e := skipValue(data, i)
				ch, good := walkChoice(data, i)
				if !good {
					fail = true
					return false
				}
				choices = append(choices, ch)
				if i = skipSpace(data, e); data[i] == ',' {
					i = skipSpace(data, i+1)
				}
			}
		}
		return true
	})
	if fail {
		return chunkHead{}, buf, false, false
	}
	return h, choices, true, true
}

// walkChoice reads the choice object at data[i]; good is false when the
// walk cannot decide it.
func walkChoice(data []byte, i int) (ch chunkChoice, good bool) {
	var seen uint8
	good = true
	walkObject(data, i, func(key []byte, start, end int) bool {
		bit, name := keyBit(key, "index", "text", "delta", "finish_reason")
		if bit < 0 {
			return true
		}
		if name == "" || seen&(1<<bit) != 0 {
			good = false
			return false
		}
		seen |= 1 << bit
		v := data[start:end]
		switch bit {
		case 0:
			if v[0] == 'n' {
				return true
			}
			n, err := strconv.ParseInt(string(v), 10, strconv.IntSize)
			if err != nil {
				good = false
				return false
			}
			ch.index = int(n)
		case 1, 3:
			if v[0] == 'n' {
				return true
			}
			if v[0] != '"' {
				good = false
				return false
			}
			// A JSON string is empty only when written "".
			if bit == 1 {
				ch.carries = ch.carries || len(v) > 2
			} else {
				ch.finished = len(v) > 2
			}
		case 2:
			if v[0] == 'n' {
				return true
			}
			if v[0] != '{' {
				good = false
				return false
			}
			carries, ok := walkDelta(data, start)
			if !ok {
				good = false
				return false
			}
			ch.carries = ch.carries || carries
		}
		return true
	})
	return ch, good
}

// walkDelta reports whether the delta object at data[i] carries a token;
// ok is false when the walk cannot decide it.
func walkDelta(data []byte, i int) (carries, ok bool) {
	var seen uint8
	ok = true
	walkObject(data, i, func(key []byte, start, end int) bool {
		bit, name := keyBit(key, "content", "reasoning_content", "reasoning", "tool_calls")
		if bit < 0 {
			return true
		}
		if name == "" || seen&(1<<bit) != 0 {
			ok = false
			return false
		}
		seen |= 1 << bit
		v := data[start:end]
		switch {
		case v[0] == 'n':
		case bit == 3:
			if v[0] != '[' {
				ok = false
				return false
			}
			carries = carries || data[skipSpace(data, start+1)] != ']'
		case v[0] == '"':
			carries = carries || len(v) > 2
		default:
			ok = false
			return false
		}
		return true
	})
	return carries, ok
}

// walkObject calls f with each key (raw, without its quotes) of the valid
// JSON object at data[i] and the span of its value, until f returns false.
func walkObject(data []byte, i int, f func(key []byte, start, end int) bool) {
	for i = skipSpace(data, i+1); data[i] != '}'; {
		keyEnd := skipString(data, i)
		start := skipColon(data, keyEnd)
		end := skipValue(data, start)
		if !f(data[i+1:keyEnd-1], start, end) {
			return
		}
		if i = skipSpace(data, end); data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
}

// keyBit finds a raw key among names: its position and name when it is
// spelled as that name; the position and "" when encoding/json might still
// match it to one of them (escaped, not ASCII, or in other case); -1 when
// the decoder ignores it.
func keyBit(key []byte, names ...string) (int, string) {
	for _, c := range key {
		if c == '\\' || c >= 0x80 {
			return 0, ""
		}
	}
	for i, n := range names {
		if string(key) == n {
			return i, n
		}
		if len(key) == len(n) && strings.EqualFold(string(key), n) {
			return i, ""
		}
	}
	return -1, ""
}
