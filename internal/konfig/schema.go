package konfig

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agext/levenshtein"
)

// checker walks a raw configuration map beside the target type and records
// every unknown key and every value that would not decode.
//
// It is not yaml.v3's KnownFields nor mapstructure's ErrorUnused (kept only
// as a backstop in load): the first reads yaml tags, not koanf ones, and
// names Go types; the second says "has invalid keys: x" with no line; and
// neither checks LLMGW_ variables against the schema or suggests a near key.
type checker struct {
	source   string
	lines    map[string]int
	problems []*Problem
}

func (c *checker) add(key, format string, args ...any) {
	c.problems = append(c.problems, &Problem{Source: c.source, Line: c.lineOf(key), Key: key, Msg: fmt.Sprintf(format, args...)})
}

// lineOf returns the line of key, or of its nearest ancestor that has one.
func (c *checker) lineOf(key string) int {
	for key != "" {
		if l, ok := c.lines[key]; ok {
			return l
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			break
		}
		key = key[:i]
	}
	return 0
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// field is one key a struct accepts.
type field struct {
	name string
	typ  reflect.Type
}

// fieldsOf lists the keys of struct type t, with squashed embedded structs
// flattened into it.
func fieldsOf(t reflect.Type) map[string]field {
	out := map[string]field{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("koanf")
		name, opts, _ := strings.Cut(tag, ",")
		if tag == "-" {
			continue
		}
		ft := f.Type
		if (f.Anonymous || strings.Contains(opts, "squash")) && ft.Kind() == reflect.Struct && name == "" {
			for k, v := range fieldsOf(ft) {
				out[k] = v
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = field{name: name, typ: ft}
	}
	return out
}

// typeAt returns the type the dotted key addresses inside t.
func typeAt(t reflect.Type, key string) (reflect.Type, bool) {
	for _, seg := range strings.Split(key, ".") {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case isText(t) || isDuration(t):
			return nil, false
		case t.Kind() == reflect.Struct:
			f, ok := fieldsOf(t)[seg]
			if !ok {
				return nil, false
			}
			t = f.typ
		case t.Kind() == reflect.Map:
			t = t.Elem()
		default:
			return nil, false
		}
	}
	return t, true
}

// leafKeys lists the dotted keys below struct type t that hold values: the
// candidates for a "did you mean".
func leafKeys(t reflect.Type, prefix string, out *[]string) {
	for _, f := range fieldsOf(t) {
		ft := f.typ
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		key := join(prefix, f.name)
		if ft.Kind() == reflect.Struct && !isText(ft) {
			leafKeys(ft, key, out)
			continue
		}
		*out = append(*out, key)
	}
}

// flatKeys lists the dotted leaf keys of a raw value.
func flatKeys(v any, prefix string, out *[]string) {
	m, ok := asMap(v)
	if !ok || len(m) == 0 {
		*out = append(*out, prefix)
		return
	}
	for k, sub := range m {
		flatKeys(sub, join(prefix, k), out)
	}
}

func asMap(v any) (map[string]any, bool) {
	switch m := v.(type) {
	case map[string]any:
		return m, true
	case map[any]any:
		out := make(map[string]any, len(m))
		for k, v := range m {
			out[fmt.Sprint(k)] = v
		}
		return out, true
	}
	return nil, false
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// check verifies that v can be decoded into t; path names v.
func (c *checker) check(v any, t reflect.Type, path string) {
	if v == nil {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case isDuration(t):
		c.checkDuration(v, path)
		return
	case isText(t):
		s, ok := v.(string)
		if !ok {
			c.add(path, "expected a string, got %s", describe(v))
			return
		}
		if err := reflect.New(t).Interface().(interface{ UnmarshalText([]byte) error }).UnmarshalText([]byte(s)); err != nil {
			c.add(path, "%v", err)
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := asMap(v)
		if !ok {
			c.add(path, "expected a mapping of keys, got %s", describe(v))
			return
		}
		fields := fieldsOf(t)
		for _, k := range sortedKeys(m) {
			if f, ok := fields[k]; ok {
				c.check(m[k], f.typ, join(path, k))
				continue
			}
			c.unknown(t, path, k, m[k])
		}
	case reflect.Map:
		m, ok := asMap(v)
		if !ok {
			c.add(path, "expected a mapping of keys, got %s", describe(v))
			return
		}
		if t.Key().Kind() != reflect.String {
			c.add(path, "unsupported map key type %s", t.Key())
			return
		}
		for _, k := range sortedKeys(m) {
			c.check(m[k], t.Elem(), join(path, k))
		}
	case reflect.Slice, reflect.Array:
		list, ok := v.([]any)
		if !ok {
			if _, isMap := asMap(v); isMap || !isScalarList(t) {
				c.add(path, "expected a list, got %s", describe(v))
				return
			}
			// A single scalar is read as a list of one.
			c.check(v, t.Elem(), path)
			return
		}
		if t.Kind() == reflect.Array && len(list) > t.Len() {
			c.add(path, "at most %d entries, got %d", t.Len(), len(list))
		}
		for i, e := range list {
			c.check(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.String:
		switch v.(type) {
		case string, int, int64, uint64, float64:
		case bool:
			c.add(path, "expected a string, got %v (quote it if it is meant as text)", v)
		default:
			c.add(path, "expected a string, got %s", describe(v))
		}
	case reflect.Bool:
		switch x := v.(type) {
		case bool:
		case string:
			if _, err := strconv.ParseBool(x); err != nil {
				c.add(path, "cannot parse %q as true or false", x)
			}
		default:
			c.add(path, "expected true or false, got %s", describe(v))
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		c.checkInt(v, t, path)
	case reflect.Float32, reflect.Float64:
		switch x := v.(type) {
		case int, int64, uint64, float64:
		case string:
			if _, err := strconv.ParseFloat(x, 64); err != nil {
				c.add(path, "cannot parse %q as a number", x)
			}
		default:
			c.add(path, "expected a number, got %s", describe(v))
		}
	case reflect.Interface:
	default:
		c.add(path, "unsupported type %s", t)
	}
}

func (c *checker) checkDuration(v any, path string) {
	switch x := v.(type) {
	case string:
		if _, err := time.ParseDuration(x); err != nil {
			c.add(path, `cannot parse %q as a duration (write it like "30s", "5m" or "1h30m")`, x)
		}
	case int, int64, uint64:
		if fmt.Sprint(x) == "0" {
			return
		}
		c.add(path, `cannot parse %v as a duration: give it a unit, e.g. "%vs"`, x, x)
	default:
		c.add(path, `cannot parse %s as a duration (write it like "30s", "5m" or "1h30m")`, describe(v))
	}
}

func (c *checker) checkInt(v any, t reflect.Type, path string) {
	unsigned := t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uintptr
	var n float64
	switch x := v.(type) {
	case int:
		n = float64(x)
	case int64:
		n = float64(x)
	case uint64:
		n = float64(x)
	case float64:
		if x != math.Trunc(x) {
			c.add(path, "expected a whole number, got %v", x)
			return
		}
		n = x
	case string:
		i, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			c.add(path, "cannot parse %q as a whole number", x)
			return
		}
		n = float64(i)
	default:
		c.add(path, "expected a whole number, got %s", describe(v))
		return
	}
	if unsigned && n < 0 {
		c.add(path, "must not be negative, got %v", n)
		return
	}
	bits := t.Bits()
	if !unsigned && (n > math.Exp2(float64(bits-1))-1 || n < -math.Exp2(float64(bits-1))) ||
		unsigned && n > math.Exp2(float64(bits))-1 {
		c.add(path, "%v is out of range", v)
	}
}

// unknown records key k under struct type t (at path) as unknown, once for
// every leaf below it, with a suggestion when a known key is close.
func (c *checker) unknown(t reflect.Type, path, k string, v any) {
	var known []string
	leafKeys(t, "", &known)
	var leaves []string
	flatKeys(v, k, &leaves)
	sort.Strings(leaves)
	for _, rel := range leaves {
		full := join(path, rel)
		msg := fmt.Sprintf("unknown key %q", full)
		if s := suggest(rel, known); s != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", join(path, s))
		}
		c.problems = append(c.problems, &Problem{Source: c.source, Line: c.lineOf(full), Msg: msg, drop: join(path, k)})
	}
}

// suggest returns the known key closest to key, or "" when none is close
// enough to be a likely typo. A key at the wrong level (grace for
// agents.grace) is matched by its last segment.
func suggest(key string, known []string) string {
	best, bestDist := "", math.MaxInt
	for _, k := range known {
		d := levenshtein.Distance(key, k, nil)
		if d < bestDist || d == bestDist && k < best {
			best, bestDist = k, d
		}
	}
	if best != "" && bestDist <= max(1, len(key)/4) {
		return best
	}
	last := key[strings.LastIndex(key, ".")+1:]
	var match []string
	for _, k := range known {
		if k[strings.LastIndex(k, ".")+1:] == last {
			match = append(match, k)
		}
	}
	if len(match) == 1 {
		return match[0]
	}
	return ""
}

// describe renders a raw value for an error message.
func describe(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case []any:
		return "a list"
	case map[string]any, map[any]any:
		return "a mapping"
	case time.Time:
		return x.Format(time.RFC3339) + " (YAML reads it as a timestamp; quote it)"
	}
	return fmt.Sprint(v)
}
