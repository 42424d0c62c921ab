package cliflags

import (
	"flag"
	"io"
	"slices"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		args     []string
		wantPos  []string
		wantJSON bool
	}{
		{args: []string{"m", "--json"}, wantPos: []string{"m"}, wantJSON: true},
		{args: []string{"--json", "m"}, wantPos: []string{"m"}, wantJSON: true},
		{args: []string{"a", "b"}, wantPos: []string{"a", "b"}},
		{args: []string{"a", "--", "--json"}, wantPos: []string{"a", "--json"}},
		{args: nil},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		asJSON := fs.Bool("json", false, "")
		pos, err := Parse(fs, tt.args)
		if err != nil || !slices.Equal(pos, tt.wantPos) || *asJSON != tt.wantJSON {
			t.Errorf("Parse(%q) = %q, json %v, %v", tt.args, pos, *asJSON, err)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if _, err := Parse(fs, []string{"a", "--nope"}); err == nil {
		t.Error("an unknown flag after a positional was accepted")
	}
}
