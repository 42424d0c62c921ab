package tfacc

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestRequire runs a test that calls Require in a child process under each
// combination of CI and TF_ACC: it runs with TF_ACC, skips without it, and
// fails without it under CI=true.
func TestRequire(t *testing.T) {
	if os.Getenv("TFACC_CHILD") == "1" {
		Require(t)
		return
	}
	for _, tt := range []struct {
		ci, acc string
		want    string // in go test -v's output
	}{
		{"", "1", "--- PASS: TestRequire"},
		{"", "", "--- SKIP: TestRequire"},
		{"false", "", "--- SKIP: TestRequire"},
		{"true", "", "--- FAIL: TestRequire"},
		{"true", "1", "--- PASS: TestRequire"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestRequire$", "-test.v")
		cmd.Env = append(os.Environ(), "TFACC_CHILD=1", "CI="+tt.ci, "TF_ACC="+tt.acc)
		out, _ := cmd.CombinedOutput()
		if !strings.Contains(string(out), tt.want) {
			t.Errorf("CI=%q TF_ACC=%q: want %q in:\n%s", tt.ci, tt.acc, tt.want, out)
		}
		if tt.want == "--- FAIL: TestRequire" && !strings.Contains(string(out), "TF_ACC is not set") {
			t.Errorf("CI=%q TF_ACC=%q: the failure does not name TF_ACC:\n%s", tt.ci, tt.acc, out)
		}
	}
}
