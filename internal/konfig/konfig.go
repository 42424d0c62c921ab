// Package konfig loads llmgw's YAML configuration files strictly: a key the
// target struct does not declare, a value of the wrong type, a duration
// without a unit or a YAML syntax error is an error that names the file, the
// line when it is known, and the key. Environment variables override the file.
//
// The target struct describes the schema through `koanf` tags. Nested structs
// are sections, `koanf:",squash"` embeds a struct's keys at its parent's
// level, maps (labels, engines) accept any sub-key, and time.Duration fields
// and types implementing encoding.TextUnmarshaler are read from strings such
// as "30s".
//
// Defaults are whatever the target holds before loading: fill it with the
// defaults, then call Load; keys present in the file or the environment
// replace them.
package konfig

import (
	"encoding"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
)

// Load reads the YAML file at path into out, then applies environment
// overrides, then decodes the result into out, which must be a non-nil
// pointer to a struct holding the defaults.
//
// An empty path means no file: defaults and environment only. An empty
// envPrefix disables environment overrides. A variable named envPrefix +
// "AGENTS__GRACE" sets the key agents.grace: the prefix is removed, "__"
// separates nesting levels and the rest is lowercased. A variable whose key
// the schema does not know is an error naming the variable. For a list of
// scalars the value is split at commas.
//
// All problems found are returned together, one per line.
func Load(path, envPrefix string, out any) error {
	var data []byte
	if path != "" {
		b, err := file.Provider(path).ReadBytes()
		if err != nil {
			return fmt.Errorf("reading config file: %w", err)
		}
		data = b
	}
	var environ []string
	if envPrefix != "" {
		for _, kv := range os.Environ() {
			name, _, _ := strings.Cut(kv, "=")
			if !clientVariables[strings.TrimPrefix(name, envPrefix)] {
				environ = append(environ, kv)
			}
		}
	}
	return load(data, path, envPrefix, environ, out)
}

// clientVariables are the variables clients of a cluster export (as `llmgw
// dev` writes them): they share the prefix but configure no daemon, so a
// shell that has them set can still start one.
var clientVariables = map[string]bool{
	"BASE_URL": true, "API_KEY": true, "ENDPOINT": true, "TOKEN": true, "CA_CERT": true, "CA_KEY": true,
}

// Parse decodes YAML data into out with the same strictness as Load, without
// environment overrides. source names the data in errors (usually the file
// it came from).
func Parse(data []byte, source string, out any) error {
	return load(data, source, "", nil, out)
}

func load(data []byte, source, envPrefix string, environ []string, out any) error {
	rv := reflect.ValueOf(out)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("konfig: target must be a non-nil pointer to a struct, got %T", out)
	}
	schema := rv.Elem().Type()
	if source == "" {
		source = "config"
	}

	k := koanf.New(".")
	var problems []*Problem
	if data != nil {
		if err := k.Load(bytesProvider(data), yaml.Parser()); err != nil {
			return yamlError(source, err)
		}
		lines := yamlLines(data)
		c := checker{source: source, lines: lines}
		c.check(k.Raw(), schema, "")
		problems = append(problems, c.problems...)
	}

	if envPrefix != "" {
		envProblems := make([]*Problem, 0)
		p := env.Provider(".", env.Opt{
			Prefix:      envPrefix,
			EnvironFunc: func() []string { return environ },
			TransformFunc: func(name, value string) (string, any) {
				key := envKey(name, envPrefix)
				if key == "" {
					envProblems = append(envProblems, &Problem{Source: name, Msg: "names no key"})
					return "", nil
				}
				var v any = value
				if t, ok := typeAt(schema, key); ok && isScalarList(t) {
					v = splitList(value)
				}
				c := checker{source: name}
				c.check(nest(key, v), schema, "")
				if len(c.problems) > 0 {
					envProblems = append(envProblems, c.problems...)
					return "", nil
				}
				return key, v
			},
		})
		if err := k.Load(p, nil); err != nil {
			return fmt.Errorf("reading environment: %w", err)
		}
		problems = append(problems, envProblems...)
	}

	conf := koanf.UnmarshalConf{
		Tag: "koanf",
		DecoderConfig: &mapstructure.DecoderConfig{
			DecodeHook: mapstructure.ComposeDecodeHookFunc(
				mapstructure.StringToTimeDurationHookFunc(),
				mapstructure.TextUnmarshallerHookFunc(),
			),
			WeaklyTypedInput: true,
			ErrorUnused:      true,
			Squash:           true,
		},
	}
	if len(problems) > 0 {
		// Decode every other key, so that the caller can check values too
		// and report everything at once (Partial).
		for _, p := range problems {
			key := p.Key
			if p.drop != "" {
				key = p.drop
			}
			if top := topKey(key); top != "" {
				k.Delete(top)
			}
		}
		if err := k.UnmarshalWithConf("", out, conf); err != nil {
			return joinProblems(problems)
		}
		return partial{joinProblems(problems)}
	}
	if err := k.UnmarshalWithConf("", out, conf); err != nil {
		// The checker accepts only what decodes; reaching this is a bug in
		// the checker, but the message still names the source.
		return fmt.Errorf("%s: %w", source, err)
	}
	return nil
}

// topKey is the part of a problem's key koanf can delete: up to the first
// list index ("models[2].name" → "models").
func topKey(key string) string {
	top, _, _ := strings.Cut(key, "[")
	return top
}

// partial is the error of a Load or Parse whose problems are each confined
// to a key: every other key was decoded into out.
type partial struct{ error }

func (p partial) Unwrap() error { return p.error }

// Partial reports whether err, from Load or Parse, lists problems of
// single keys only, with every other key decoded into out: a caller can then
// check the values it has too and report every problem at once, instead of
// the value problems only after the others are fixed. A YAML syntax error is
// not partial: nothing was decoded.
func Partial(err error) bool {
	var p partial
	return errors.As(err, &p)
}

// Problems returns the problems in err (from Load or Parse).
func Problems(err error) []*Problem {
	var out []*Problem
	var walk func(error)
	// It walks the tree of wrapped errors itself, to find every Problem
	// (errors.As finds only the first).
	walk = func(e error) {
		if p, ok := e.(*Problem); ok { //nolint:errorlint // the walk unwraps
			out = append(out, p)
			return
		}
		switch u := e.(type) { //nolint:errorlint // the walk unwraps
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			if x := u.Unwrap(); x != nil {
				walk(x)
			}
		}
	}
	walk(err)
	return out
}

// Problem is one thing wrong with a configuration: where it is (a file and
// line, or an environment variable), which key, and what is wrong.
type Problem struct {
	// Source is the file name or the environment variable.
	Source string
	// Line is the 1-based line in Source, or 0 when unknown.
	Line int
	// Key is the dotted key path, e.g. agents.grace or models[0].name.
	Key string
	// Msg says what is wrong.
	Msg string
	// drop is the key to leave out when decoding the rest (an unknown
	// key's subtree); Key when empty.
	drop string
}

// Error formats the problem as "source:line: key: msg".
func (p *Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.Source)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
	}
	b.WriteString(": ")
	if p.Key != "" {
		b.WriteString(p.Key)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// joinProblems orders problems by source and line and joins them; callers can
// get at each one with errors.As or the Unwrap() []error method.
func joinProblems(ps []*Problem) error {
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].Source != ps[j].Source {
			return ps[i].Source < ps[j].Source
		}
		return ps[i].Line < ps[j].Line
	})
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = p
	}
	return errors.Join(errs...)
}

// envKey turns PREFIX_AGENTS__GRACE into agents.grace.
func envKey(name, prefix string) string {
	rest := strings.TrimPrefix(name, prefix)
	if rest == "" {
		return ""
	}
	parts := strings.Split(strings.ToLower(rest), "__")
	for _, p := range parts {
		if p == "" {
			return ""
		}
	}
	return strings.Join(parts, ".")
}

// nest builds {a: {b: v}} from "a.b" and v.
func nest(key string, v any) map[string]any {
	parts := strings.Split(key, ".")
	m := map[string]any{parts[len(parts)-1]: v}
	for i := len(parts) - 2; i >= 0; i-- {
		m = map[string]any{parts[i]: m}
	}
	return m
}

func splitList(s string) []any {
	out := []any{}
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func isScalarList(t reflect.Type) bool {
	if t.Kind() != reflect.Slice {
		return false
	}
	e := t.Elem()
	for e.Kind() == reflect.Pointer {
		e = e.Elem()
	}
	switch e.Kind() {
	case reflect.Struct, reflect.Map, reflect.Slice, reflect.Interface:
		return isText(e)
	}
	return true
}

// bytesProvider is a koanf.Provider over bytes already read.
type bytesProvider []byte

func (b bytesProvider) ReadBytes() ([]byte, error) { return b, nil }
func (b bytesProvider) Read() (map[string]any, error) {
	return nil, errors.New("bytes provider needs a parser")
}

var (
	durationType        = reflect.TypeFor[time.Duration]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// isText reports whether values of t are decoded from strings through
// encoding.TextUnmarshaler.
func isText(t reflect.Type) bool {
	return t.Kind() != reflect.Interface && reflect.PointerTo(t).Implements(textUnmarshalerType)
}

// isDuration reports whether t is time.Duration or a type defined on it.
func isDuration(t reflect.Type) bool {
	return t == durationType || (t.Kind() == reflect.Int64 && t.ConvertibleTo(durationType) && t.Name() == "Duration")
}
