package gateway

// validJSON reports whether data is one JSON value (RFC 8259) with
// nothing but whitespace around it: what encoding/json.Valid reports,
// nesting bound included, in one pass without the decoder's state
// machine (a few times faster; FuzzValidAgrees holds the two to the same
// answer). The walks of request bodies and stream chunks run only on data
// it accepts.
func validJSON(data []byte) bool {
	i := skipSpace(data, 0)
	// open holds whether each enclosing container is an object; its length
	// is the depth.
	var stack [64]bool
	open := stack[:0]
	for {
		// A value at data[i].
		if i >= len(data) {
			return false
		}
		switch c := data[i]; {
		case c == '{' || c == '[':
			if len(open) >= maxJSONDepth {
				return false
			}
			open = append(open, c == '{')
			i = skipSpace(data, i+1)
			if i < len(data) && data[i] == closer(c == '{') {
				open = open[:len(open)-1]
				i++
				break
			}
			if c == '{' {
				if i = objectKey(data, i); i < 0 {
					return false
				}
			}
			continue
		case c == '"':
			if i = stringEnd(data, i); i < 0 {
				return false
			}
		case c == '-' || c >= '0' && c <= '9':
			if i = numberEnd(data, i); i < 0 {
				return false
			}
		case c == 't':
			if i = literalEnd(data, i, "true"); i < 0 {
				return false
			}
		case c == 'f':
			if i = literalEnd(data, i, "false"); i < 0 {
				return false
			}
		case c == 'n':
			if i = literalEnd(data, i, "null"); i < 0 {
				return false
			}
		default:
			return false
		}
		// After a value: a comma and the next, or the container's end.
		for {
			i = skipSpace(data, i)
			if len(open) == 0 {
				return i == len(data)
			}
			if i >= len(data) {
				return false
			}
			obj := open[len(open)-1]
			if data[i] == ',' {
				i = skipSpace(data, i+1)
				if obj {
					if i = objectKey(data, i); i < 0 {
						return false
					}
				}
				break
			}
			if data[i] != closer(obj) {
				return false
			}
			open = open[:len(open)-1]
			i++
		}
	}
}

// maxJSONDepth is encoding/json's bound on nesting.
const maxJSONDepth = 10000

func closer(obj bool) byte {
	if obj {
		return '}'
	}
	return ']'
}

// objectKey reads a key and its colon at data[i]; it returns the offset of
// the value after them, or -1.
func objectKey(data []byte, i int) int {
	if i >= len(data) || data[i] != '"' {
		return -1
	}
	if i = stringEnd(data, i); i < 0 {
		return -1
	}
	i = skipSpace(data, i)
	if i >= len(data) || data[i] != ':' {
		return -1
	}
	return skipSpace(data, i+1)
}

// stringEnd returns the offset just past the string at data[i] (a quote),
// or -1 when it is not a valid JSON string.
func stringEnd(data []byte, i int) int {
	for i++; i < len(data); i++ {
		// Most of a string is bytes that need no look.
		for i < len(data) && !strSpecial[data[i]] {
			i++
		}
		if i == len(data) {
			break
		}
		switch c := data[i]; {
		case c == '"':
			return i + 1
		case c < 0x20:
			return -1
		case c == '\\':
			i++
			if i >= len(data) {
				return -1
			}
			switch data[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(data) {
					return -1
				}
				for _, h := range data[i+1 : i+5] {
					if (h < '0' || h > '9') && (h < 'a' || h > 'f') && (h < 'A' || h > 'F') {
						return -1
					}
				}
				i += 4
			default:
				return -1
			}
		}
	}
	return -1
}

// strSpecial marks the bytes a string's scan must stop at: its end, an
// escape, a control character.
var strSpecial = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// numberEnd returns the offset just past the number at data[i], or -1.
func numberEnd(data []byte, i int) int {
	if data[i] == '-' {
		i++
	}
	digits := func() bool {
		start := i
		for i < len(data) && data[i] >= '0' && data[i] <= '9' {
			i++
		}
		return i > start
	}
	switch {
	case i >= len(data):
		return -1
	case data[i] == '0':
		i++
	case !digits():
		return -1
	}
	if i < len(data) && data[i] == '.' {
		i++
		if !digits() {
			return -1
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if !digits() {
			return -1
		}
	}
	return i
}

// literalEnd returns the offset just past lit at data[i], or -1.
func literalEnd(data []byte, i int, lit string) int {
	if len(data)-i < len(lit) || string(data[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}
