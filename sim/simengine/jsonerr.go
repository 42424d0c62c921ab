package simengine

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// decodeError says what is wrong with JSON that did not decode into v, in
// the API's words: a value of the wrong type is "messages must be an array,
// got a string" with the field as param, never a Go type. prefix is the key
// v sits at ("tool_choice"), empty for a whole body. ok is false for other
// errors (syntax, size), which name no Go type and are reported as they are.
func decodeError(prefix string, v any, err error) (msg, param string, ok bool) {
	te, isType := errors.AsType[*json.UnmarshalTypeError](err)
	if !isType {
		return "", "", false
	}
	where, param := fieldPath(prefix, reflect.TypeOf(v), te)
	return fmt.Sprintf("%s must be %s, got %s", where, jsonKind(te.Type), gotValue(te.Value)), param, true
}

// fieldPath renders te.Field (a dotted path of JSON keys) for a person:
// messages[].role for the role of an element of messages. param is the
// path as the error's param: prefix and the keys, dotted.
func fieldPath(prefix string, root reflect.Type, te *json.UnmarshalTypeError) (where, param string) {
	var keys []string
	if prefix != "" {
		keys = append(keys, prefix)
	}
	if te.Field != "" {
		keys = append(keys, strings.Split(te.Field, ".")...)
	}
	param = strings.Join(keys, ".")
	if te.Field == "" {
		if prefix == "" {
			return "the request body", ""
		}
		return prefix, param
	}
	var b strings.Builder
	if prefix != "" {
		b.WriteString(prefix + ".")
	}
	t := deref(root)
	segs := strings.Split(te.Field, ".")
	for i, seg := range segs {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(seg)
		if t == nil || t.Kind() != reflect.Struct {
			t = nil
			continue
		}
		t = jsonField(t, seg)
		last := i == len(segs)-1
		// Into lists: every list between keys, and at the end a list whose
		// element is what failed.
		for t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && t != deref(te.Type) &&
			(!last || deref(t.Elem()) == deref(te.Type)) {
			b.WriteString("[]")
			t = deref(t.Elem())
		}
	}
	return b.String(), param
}

// jsonField is the type of t's field whose JSON key is key, nil when none.
func jsonField(t reflect.Type, key string) reflect.Type {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		if name == key {
			return deref(f.Type)
		}
	}
	return nil
}

func deref(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// jsonKind names the JSON type a Go type decodes from.
func jsonKind(t reflect.Type) string {
	switch deref(t).Kind() {
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "another type"
}

// gotValue names what encoding/json found: "string" is "a string", "number
// 1.5" (a number that does not fit) is the number itself.
func gotValue(v string) string {
	if n, ok := strings.CutPrefix(v, "number "); ok {
		return n
	}
	switch v {
	case "bool":
		return "a boolean"
	case "object", "array":
		return "an " + v
	}
	return "a " + v
}
