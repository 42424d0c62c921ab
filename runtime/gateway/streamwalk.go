package gateway

import (
	"bytes"
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
	h, choices, ok, decided, _ = walkChunkSpans(data, buf, head)
	return h, choices, ok, decided
}

// carrierSpans counts, over a chunk's choices, the fields that can carry
// a token and are not null (text, and the delta's content, reasoning and
// tool calls), and holds where the last of them that is a string lies.
type carrierSpans struct {
	n          int
	start, end int // the string, quotes included; end 0 when none
}

// walkChunkSpans is walkChunk that also says where the chunk's token
// fields are, for a stream's chunkShape.
func walkChunkSpans(data []byte, buf []chunkChoice, head bool) (h chunkHead, choices []chunkChoice, ok, decided bool, spans carrierSpans) {
	if len(data) == 0 || data[0] != '{' {
		return h, buf, false, false, spans
	}
	if !validJSON(data) {
		return h, buf, false, true, spans // the decoder refuses it too
	}
	choices = buf
	_, good := walkNamed(data, 0, chunkKeys, func(bit, start int) (int, bool) {
		switch bit {
		case 0, 1, 3:
			if data[start] != '"' {
				return 0, false
			}
			end := skipString(data, start)
			if head {
				s, _ := jsonString(data[start:end])
				switch bit {
				case 0:
					h.id = s
				case 1:
					h.object = s
				default:
					h.model = s
				}
			}
			return end, true
		case 2:
			end := skipValue(data, start)
			n, err := strconv.ParseInt(string(data[start:end]), 10, 64)
			if err != nil {
				return 0, false
			}
			h.created = n
			return end, true
		default: // choices
			if data[start] != '[' {
				return 0, false
			}
			i := skipSpace(data, start+1)
			for data[i] != ']' {
				if data[i] != '{' {
					return 0, false
				}
				ch, e, good := walkChoice(data, i, &spans)
				if !good {
					return 0, false
				}
				choices = append(choices, ch)
				if i = skipSpace(data, e); data[i] == ',' {
					i = skipSpace(data, i+1)
				}
			}
			return i + 1, true
		}
	})
	if !good {
		return chunkHead{}, buf, false, false, carrierSpans{}
	}
	return h, choices, true, true, spans
}

// walkChoice reads the choice object at data[i] and returns the offset
// just past it; good is false when the walk cannot decide it.
func walkChoice(data []byte, i int, spans *carrierSpans) (ch chunkChoice, end int, good bool) {
	end, good = walkNamed(data, i, choiceKeys, func(bit, start int) (int, bool) {
		switch bit {
		case 0:
			end := skipValue(data, start)
			n, err := strconv.ParseInt(string(data[start:end]), 10, strconv.IntSize)
			if err != nil {
				return 0, false
			}
			ch.index = int(n)
			return end, true
		case 1, 3:
			if data[start] != '"' {
				return 0, false
			}
			end := skipString(data, start)
			// A JSON string is empty only when written "".
			if bit == 1 {
				ch.carries = ch.carries || end-start > 2
				spans.n, spans.start, spans.end = spans.n+1, start, end
			} else {
				ch.finished = end-start > 2
			}
			return end, true
		default: // delta
			if data[start] != '{' {
				return 0, false
			}
			carries, end, ok := walkDelta(data, start, spans)
			if !ok {
				return 0, false
			}
			ch.carries = ch.carries || carries
			return end, true
		}
	})
	return ch, end, good
}

// walkDelta reports whether the delta object at data[i] carries a token,
// and the offset just past it; ok is false when the walk cannot decide it.
func walkDelta(data []byte, i int, spans *carrierSpans) (carries bool, end int, ok bool) {
	end, ok = walkNamed(data, i, deltaKeys, func(bit, start int) (int, bool) {
		switch {
		case bit == 3:
			if data[start] != '[' {
				return 0, false
			}
			carries = carries || data[skipSpace(data, start+1)] != ']'
			spans.n++
			return 0, true
		case data[start] == '"':
			end := skipString(data, start)
			carries = carries || end-start > 2
			spans.n, spans.start, spans.end = spans.n+1, start, end
			return end, true
		default:
			return 0, false
		}
	})
	return carries, end, ok
}

// The keys the walks read, in the order of their bits.
var (
	chunkKeys  = []string{"id", "object", "created", "model", "choices"}
	choiceKeys = []string{"index", "text", "delta", "finish_reason"}
	deltaKeys  = []string{"content", "reasoning_content", "reasoning", "tool_calls"}
	usageKeys  = []string{"choices", "usage"}
)

// walkNamed walks the object at data[i] as walkObject does, calling f
// only for the keys among names (at most 64) whose value is not null,
// with the key's position in names; f returns what walkObject's f does.
// The walk cannot decide the object (ok false) at a key encoding/json
// might match to one of names though it is spelled otherwise (escaped,
// in other case), at one of names given twice, or when f stops it. It
// returns the offset just past the object.
func walkNamed(data []byte, i int, names []string, f func(bit, start int) (int, bool)) (end int, ok bool) {
	var seen uint64
	ok = true
	end = walkObject(data, i, func(key []byte, start int) (int, bool) {
		bit, name := keyBit(key, names...)
		if bit < 0 {
			return 0, true
		}
		if name == "" || seen&(1<<bit) != 0 {
			ok = false
			return 0, false
		}
		seen |= 1 << bit
		if data[start] == 'n' {
			return 0, true // null
		}
		e, more := f(bit, start)
		ok = ok && more
		return e, more
	})
	return end, ok
}

// walkObject calls f with each key (raw, without its quotes) of the valid
// JSON object at data[i] and the offset of its value. f returns the offset
// just past the value when it read it, 0 to have it skipped, and false to
// stop the walk. walkObject returns the offset just past the object (or
// -1 when f stopped it), so that no value is scanned twice.
func walkObject(data []byte, i int, f func(key []byte, start int) (int, bool)) int {
	for i = skipSpace(data, i+1); data[i] != '}'; {
		keyEnd := skipString(data, i)
		start := skipColon(data, keyEnd)
		end, more := f(data[i+1:keyEnd-1], start)
		if !more {
			return -1
		}
		if end == 0 {
			end = skipValue(data, start)
		}
		if i = skipSpace(data, end); data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
	return i + 1
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

// chunkShape is a stream's token chunk with its token cut out. An
// engine's token chunks differ in nothing but the token's string (vLLM,
// SGLang and the sim engine keep id, created and model for the whole
// stream), so a chunk that is the same prefix and suffix around one valid
// JSON string is the chunk the shape was learned from with another string
// in that place: the same JSON, the same keys, one choice that carries a
// token unless the string is empty. It reads so in a comparison of bytes
// and a scan of the string, where a walk reads the whole chunk twice
// (validJSON, walkChunk). FuzzChunkShapeAgrees holds the two to the same
// result.
type chunkShape struct {
	prefix, suffix []byte
	choice         chunkChoice
}

// learn makes the shape of data, which the walk read as choices with the
// token fields spans: a chunk of one choice whose one token field is a
// string. Any other chunk leaves the shape as it was.
func (s *chunkShape) learn(data []byte, choices []chunkChoice, spans carrierSpans) {
	if len(choices) != 1 || spans.n != 1 || spans.end == 0 {
		return
	}
	s.prefix = append(s.prefix[:0], data[:spans.start]...)
	s.suffix = append(s.suffix[:0], data[spans.end:]...)
	s.choice = choices[0]
}

// match reads data by the shape: its one choice, and whether data has
// the shape.
func (s *chunkShape) match(data []byte) (chunkChoice, bool) {
	p, q := len(s.prefix), len(s.suffix)
	if p == 0 || len(data) < p+q+2 || !bytes.HasPrefix(data, s.prefix) || !bytes.HasSuffix(data, s.suffix) {
		return chunkChoice{}, false
	}
	str := data[p : len(data)-q]
	if str[0] != '"' || stringEnd(str, 0) != len(str) {
		return chunkChoice{}, false
	}
	ch := s.choice
	ch.carries = len(str) > 2
	return ch, true
}
