// Package llamacpp finds, for tests, the llama-server that build.sh beside
// it built (make tools-llamacpp).
package llamacpp

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// Server returns the llama-server to test against: LLMGW_LLAMA_SERVER, or
// the one build.sh cached. Without one the test is skipped on a developer's
// machine and fails under CI=true.
func Server(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("LLMGW_LLAMA_SERVER"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("LLMGW_LLAMA_SERVER: %v", err)
		}
		return p
	}
	_, file, _, _ := runtime.Caller(0)
	out, err := exec.Command("bash", filepath.Join(filepath.Dir(file), "build.sh"), "--cached").Output()
	if err == nil {
		return strings.TrimSpace(string(out))
	}
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatalf("no llama-server built (CI=true): run make tools-llamacpp: %v", err)
	}
	t.Skip("no llama-server built: run make tools-llamacpp (testkit/llamacpp/build.sh)")
	return ""
}
