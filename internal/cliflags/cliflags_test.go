package cliflags

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		args      []string
		wantPos   []string
		wantJSON  bool
		wantModel string
	}{
		{args: []string{"m", "--json"}, wantPos: []string{"m"}, wantJSON: true},
		{args: []string{"--json", "m"}, wantPos: []string{"m"}, wantJSON: true},
		{args: []string{"a", "b"}, wantPos: []string{"a", "b"}},
		{args: []string{"a", "--", "--json"}, wantPos: []string{"a", "--json"}},
		{args: []string{"a", "--model", "x", "b", "--json"}, wantPos: []string{"a", "b"}, wantJSON: true, wantModel: "x"},
		{args: nil},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		asJSON := fs.Bool("json", false, "")
		model := fs.String("model", "", "")
		pos, err := Parse(fs, tt.args)
		if err != nil || !slices.Equal(pos, tt.wantPos) || *asJSON != tt.wantJSON || *model != tt.wantModel {
			t.Errorf("Parse(%q) = %q, json %v, model %q, %v", tt.args, pos, *asJSON, *model, err)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if _, err := Parse(fs, []string{"a", "--nope"}); err == nil {
		t.Error("an unknown flag after a positional was accepted")
	}
}

func TestNewUsageAndExitCode(t *testing.T) {
	var out strings.Builder
	fs := New("serve", "llmgw serve [-c FILE]", &out)
	fs.String("c", "server.yaml", "configuration file")
	_, err := Parse(fs, []string{"-h"})
	if code := ExitCode(err); code != 0 {
		t.Errorf("-h: exit code %d, want 0", code)
	}
	want := "usage: llmgw serve [-c FILE]\n\nflags:\n  -c string\n    \tconfiguration file (default \"server.yaml\")\n"
	if out.String() != want {
		t.Errorf("-h printed\n%s\nwant\n%s", out.String(), want)
	}
	out.Reset()
	_, err = Parse(fs, []string{"--nope"})
	if code := ExitCode(err); code != 2 {
		t.Errorf("--nope: exit code %d, want 2", code)
	}
	if !strings.HasPrefix(out.String(), "flag provided but not defined: -nope\nusage: llmgw serve") {
		t.Errorf("--nope printed\n%s", out.String())
	}
}

func TestParseNoArgs(t *testing.T) {
	var out strings.Builder
	fs := New("llmgw serve", "llmgw serve", &out)
	v := fs.Bool("v", false, "verbose")
	if err := ParseNoArgs(fs, []string{"-v"}); err != nil || !*v {
		t.Errorf("ParseNoArgs(-v) = %v, v %v", err, *v)
	}
	err := ParseNoArgs(fs, []string{"extra", "-v"})
	if err == nil || ExitCode(err) != 2 || !strings.HasPrefix(out.String(), "llmgw serve: unexpected argument \"extra\"\nusage: llmgw serve") {
		t.Errorf("ParseNoArgs(extra) = %v, printed\n%s", err, out.String())
	}
}

func TestParseN(t *testing.T) {
	var out strings.Builder
	fs := New("llmgw keys revoke", "llmgw keys revoke ID", &out)
	if pos, err := ParseN(fs, []string{"k1"}, 1, "the key id"); err != nil || !slices.Equal(pos, []string{"k1"}) {
		t.Errorf("ParseN(k1) = %q, %v", pos, err)
	}
	for args, want := range map[string]string{"": "llmgw keys revoke: missing the key id\nusage: llmgw keys revoke ID", "a b": "llmgw keys revoke: unexpected argument \"b\"\nusage: llmgw keys revoke ID"} {
		out.Reset()
		_, err := ParseN(fs, strings.Fields(args), 1, "the key id")
		if err == nil || ExitCode(err) != 2 || !strings.HasPrefix(out.String(), want) {
			t.Errorf("ParseN(%q) = %v, printed\n%s", args, err, out.String())
		}
	}
}

func TestParseRange(t *testing.T) {
	var out strings.Builder
	fs := New("llmgw ctl scale", "llmgw ctl scale MODEL [N]", &out)
	for args, want := range map[string][]string{"m": {"m"}, "m 2": {"m", "2"}} {
		if pos, err := ParseRange(fs, strings.Fields(args), 1, 2, "the model name"); err != nil || !slices.Equal(pos, want) {
			t.Errorf("ParseRange(%q) = %q, %v; want %q", args, pos, err, want)
		}
	}
	for args, want := range map[string]string{
		"":      "llmgw ctl scale: missing the model name\nusage: llmgw ctl scale MODEL [N]\n",
		"m 2 3": "llmgw ctl scale: unexpected argument \"3\"\nusage: llmgw ctl scale MODEL [N]\n",
	} {
		out.Reset()
		_, err := ParseRange(fs, strings.Fields(args), 1, 2, "the model name")
		if err == nil || ExitCode(err) != 2 || out.String() != want {
			t.Errorf("ParseRange(%q) = %v, printed %q; want %q", args, err, out.String(), want)
		}
	}
}

// TestUsageErrorf: bad input found after parsing is reported as a bad
// flag is: the message after the command's name, the usage with the
// flags, exit 2.
func TestUsageErrorf(t *testing.T) {
	var out strings.Builder
	fs := New("llmgw keys create", "llmgw keys create --name N", &out)
	fs.String("name", "", "a name")
	err := UsageErrorf(fs, "%s is required", "--name")
	want := "llmgw keys create: --name is required\nusage: llmgw keys create --name N\n\nflags:\n  -name string\n    \ta name\n"
	if err == nil || err.Error() != "--name is required" || ExitCode(err) != 2 || out.String() != want {
		t.Errorf("UsageErrorf = %v (exit %d), printed %q; want %q", err, ExitCode(err), out.String(), want)
	}
}

// TestRequired: every empty required flag is named, in the order given,
// in one usage error; none missing is no error and prints nothing.
func TestRequired(t *testing.T) {
	for args, want := range map[string]string{
		"":                      "--model and --version are required",
		"--version v":           "--model is required",
		"--model m":             "--version is required",
		"--model m --version v": "",
	} {
		var out strings.Builder
		fs := New("llmgw mirror fetch", "llmgw mirror fetch --model M --version V", &out)
		fs.String("model", "", "model name")
		fs.String("version", "", "version name")
		fs.String("dir", "/srv/models", "the weights directory")
		if err := ParseNoArgs(fs, strings.Fields(args)); err != nil {
			t.Fatal(err)
		}
		err := Required(fs, "model", "version")
		if want == "" {
			if err != nil || out.Len() > 0 {
				t.Errorf("%q: Required = %v, printed %q; want nil and nothing", args, err, out.String())
			}
			continue
		}
		first := "llmgw mirror fetch: " + want + "\nusage: llmgw mirror fetch --model M --version V\n"
		if err == nil || err.Error() != want || ExitCode(err) != 2 || !strings.HasPrefix(out.String(), first) {
			t.Errorf("%q: Required = %v, printed %q; want %q first", args, err, out.String(), first)
		}
	}
	fs := New("t", "t", io.Discard)
	for _, name := range []string{"a", "b", "c"} {
		fs.String(name, "", "")
	}
	if err := Required(fs, "a", "b", "c"); err == nil || err.Error() != "--a, --b and --c are required" {
		t.Errorf("Required(a, b, c) = %v; want all three named", err)
	}
	// A name that is not a string flag is the caller's mistake, named.
	fs.Int("n", 0, "")
	for _, name := range []string{"nope", "n"} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "--"+name) {
					t.Errorf("Required(%s) recovered %v; want a panic naming --%s", name, r, name)
				}
			}()
			_ = Required(fs, name)
		}()
	}
}
