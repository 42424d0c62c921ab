package ctl

import (
	"strings"
	"testing"

	"github.com/llmgw/llmgw/api/managev1"
)

func TestScale(t *testing.T) {
	const coder = "qwen2.5-coder-3b-instruct" // scaling {min 1, max 1} in the fixture
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
		wantErr  string
		// want is the scaling sent with UpdateModel; nil when nothing was.
		want *managev1.Scaling
	}{
		{name: "count sets both bounds", args: []string{"scale", coder, "3"},
			wantOut: "scaled model " + coder + ": min 3, max 3 (3 replicas kept running); watch with llmgw ctl models\n", want: &managev1.Scaling{Min: 3, Max: 3}},
		{name: "zero with a max loads on demand", args: []string{"scale", coder, "0", "--max", "2"},
			wantOut: "scaled model " + coder + ": min 0, max 2 (loaded on demand); watch with llmgw ctl models\n", want: &managev1.Scaling{Min: 0, Max: 2}},
		{name: "--min as the seeds spell it", args: []string{"scale", coder, "--min", "1", "--max", "4"},
			wantOut: "scaled model " + coder + ": min 1, max 4 (more replicas under load); watch with llmgw ctl models\n", want: &managev1.Scaling{Min: 1, Max: 4}},
		{name: "max below min", args: []string{"scale", coder, "--min", "3", "--max", "2"}, wantCode: 1,
			wantErr: "llmgw ctl: scaling model " + coder + ": max 2 is below min 3\n"},
		{name: "model from server.yaml", args: []string{"scale", "llama-3.1-70b", "2"}, wantCode: 1,
			wantErr: "llmgw ctl: scaling model llama-3.1-70b: it is declared in server.yaml, which is read again on every start; change scaling there\n"},
		{name: "unknown model", args: []string{"scale", "nope", "2"}, wantCode: 1,
			wantErr: "llmgw ctl: getting model nope: model \"nope\" not found\n"},
		{name: "not a count", args: []string{"scale", coder, "many"}, wantCode: 2},
		{name: "no count", args: []string{"scale", coder}, wantCode: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := cannedManage()
			env := startServer(t, f)
			code, out, errOut := runCtl(t, env, tt.args...)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.wantCode, errOut)
			}
			if tt.wantCode == 0 && out != tt.wantOut {
				t.Errorf("stdout %q, want %q", out, tt.wantOut)
			}
			if tt.wantErr != "" && errOut != tt.wantErr {
				t.Errorf("stderr %q, want %q", errOut, tt.wantErr)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if tt.want == nil {
				if len(f.updated) != 0 {
					t.Errorf("updated %v, want nothing sent", f.updated)
				}
				return
			}
			if len(f.updated) != 1 {
				t.Fatalf("updated %d models, want 1", len(f.updated))
			}
			got := f.updated[0]
			if got.GetScaling().GetMin() != tt.want.Min || got.GetScaling().GetMax() != tt.want.Max {
				t.Errorf("scaling sent %v, want %v", got.GetScaling(), tt.want)
			}
			// Everything else of the definition is sent as it was.
			if got.GetSource() == "" || len(got.GetProfiles()) != 1 || got.GetRoutingProfile() != "chat" || got.GetOrigin() != "" {
				t.Errorf("definition sent %v, want the stored one with only scaling changed", got)
			}
		})
	}
}

// TestScaleCountIsExact: `scale MODEL N` on a model that scales up to 5
// runs N replicas, no more (max N too), and 0 stops it rather than make
// it load on demand.
func TestScaleCountIsExact(t *testing.T) {
	const coder = "qwen2.5-coder-3b-instruct"
	for _, c := range []struct {
		n        string
		min, max int32
		what     string
	}{{"2", 2, 2, "2 replicas kept running"}, {"0", 0, 0, "not running"}} {
		f := cannedManage()
		for _, m := range f.models {
			if m.GetName() == coder {
				m.Scaling = &managev1.Scaling{Min: 1, Max: 5}
			}
		}
		env := startServer(t, f)
		code, out, errOut := runCtl(t, env, "scale", coder, c.n)
		if code != 0 || !strings.Contains(out, "("+c.what+")") {
			t.Errorf("scale %s: exit %d, stdout %q, stderr %q", c.n, code, out, errOut)
		}
		f.mu.Lock()
		if len(f.updated) != 1 || f.updated[0].GetScaling().GetMin() != c.min || f.updated[0].GetScaling().GetMax() != c.max {
			t.Errorf("scale %s: updated %v, want min %d, max %d", c.n, f.updated, c.min, c.max)
		}
		f.mu.Unlock()
	}
}

// TestScaleIsCompareAndSet: ctl scale sends the revision it read, and an
// edit made in between (the stored revision moved) is not reverted: the
// command fails saying so and nothing is changed.
func TestScaleIsCompareAndSet(t *testing.T) {
	const coder = "qwen2.5-coder-3b-instruct"
	f := cannedManage()
	f.find(coder).Revision = 7
	env := startServer(t, f)
	if code, _, errOut := runCtl(t, env, "scale", coder, "2"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	f.mu.Lock()
	if len(f.ifRevisions) != 1 || f.ifRevisions[0] != 7 {
		t.Errorf("if_revision sent %v, want [7] (the revision read)", f.ifRevisions)
	}
	f.updated, f.ifRevisions = nil, nil
	f.mu.Unlock()

	// Someone else's edit lands between this command's read and its write.
	f.onGet = func(m *managev1.Model) { m.Revision = 8 }
	code, _, errOut := runCtl(t, env, "scale", coder, "3")
	if code != 1 || !strings.Contains(errOut, "it was changed by someone else while this command ran") || !strings.Contains(errOut, "read at revision 7 and is now at revision 8") {
		t.Fatalf("exit %d, stderr %q; want 1 and the conflict named", code, errOut)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.updated) != 0 {
		t.Errorf("updated %v, want nothing changed", f.updated)
	}
}
