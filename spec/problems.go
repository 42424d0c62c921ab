package spec

import (
	"strings"
)

// Problem is one thing wrong with a model definition, at a key path such as
// profiles[1].engine.
type Problem struct {
	Key string
	Msg string
}

// Problems is every problem found in a definition or a set of them. It is
// the error Validate and ValidateSet return.
type Problems []Problem

// Error lists the problems one per line as "key: message".
func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		if p.Key == "" {
			lines[i] = p.Msg
		} else {
			lines[i] = p.Key + ": " + p.Msg
		}
	}
	return strings.Join(lines, "\n")
}

// Within returns the problems with prefix put in front of every key, e.g.
// "models[2]" turns name into models[2].name.
func (ps Problems) Within(prefix string) Problems {
	out := make(Problems, len(ps))
	for i, p := range ps {
		out[i] = p
		switch {
		case p.Key == "":
			out[i].Key = prefix
		case strings.HasPrefix(p.Key, "["):
			out[i].Key = prefix + p.Key
		default:
			out[i].Key = prefix + "." + p.Key
		}
	}
	return out
}

// Prefixed returns an error listing the problems one per line, each line
// starting with prefix (typically a file name) and ": ".
func (ps Problems) Prefixed(prefix string) error {
	if len(ps) == 0 {
		return nil
	}
	lines := strings.Split(ps.Error(), "\n")
	for i := range lines {
		lines[i] = prefix + ": " + lines[i]
	}
	return prefixedError{msg: strings.Join(lines, "\n"), problems: ps}
}

type prefixedError struct {
	msg      string
	problems Problems
}

func (e prefixedError) Error() string { return e.msg }

// Unwrap gives errors.As access to the Problems.
func (e prefixedError) Unwrap() error { return e.problems }

func (ps *Problems) add(key, msg string) {
	*ps = append(*ps, Problem{Key: key, Msg: msg})
}

func (ps Problems) orNil() error {
	if len(ps) == 0 {
		return nil
	}
	return ps
}

// KeyWithin reports whether key is one of keys or lies within one of them
// (models[2].name is within models and models[2]), or one of keys lies
// within it.
func KeyWithin(key string, keys []string) bool {
	within := func(a, b string) bool {
		return a == b || strings.HasPrefix(a, b+".") || strings.HasPrefix(a, b+"[")
	}
	for _, k := range keys {
		top, _, _ := strings.Cut(k, "[")
		if within(key, k) || within(k, key) || within(key, top) {
			return true
		}
	}
	return false
}
