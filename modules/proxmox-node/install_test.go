package proxmoxnode_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// installScript is the script the user-data writes and runs to install the
// llmgw binary.
const installScript = "files/install-llmgw"

// binaryServer serves body at /llmgw, and at /short only its first half, as
// the mirror or a release would.
func binaryServer(t *testing.T, body []byte) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/llmgw", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body) })
	mux.HandleFunc("/short", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body[:len(body)/2]) })
	mux.HandleFunc("/empty", func(http.ResponseWriter, *http.Request) {})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// runInstall runs install-llmgw (script) with args and returns its
// combined output and exit code.
func runInstall(t *testing.T, script string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(script, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return string(out), exit.ExitCode()
		}
		t.Fatalf("running %s: %v", script, err)
	}
	return string(out), 0
}

// leftovers lists the files of dir other than want.
func leftovers(t *testing.T, dir, want string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.Name() != want {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestInstallScript: the binary is installed only when its size and sha256
// match; a wrong checksum, a wrong size, a truncated or empty download and
// a failed download each fail with a message naming what was wrong, leave
// the installed binary (or its absence) as it was, and leave no partial
// file behind.
func TestInstallScript(t *testing.T) {
	body := bytes.Repeat([]byte("llmgw binary\x00\x7fELF"), 4096)
	sum, size := sha256Hex(body), strconv.Itoa(len(body))
	srv := binaryServer(t, body)
	previous := []byte("the llmgw that was installed before\n")

	tests := []struct {
		name      string
		path      string
		sha, size string
		existing  []byte // installed before the run; nil: none
		wantCode  int
		wantOut   string
	}{
		{name: "installs a matching download", path: "/llmgw", sha: sum, size: size, wantOut: "installed"},
		{name: "replaces an older binary", path: "/llmgw", sha: sum, size: size, existing: previous, wantOut: "installed"},
		{name: "already installed is left alone", path: "/missing", sha: sum, size: size, existing: body, wantOut: "already"},
		{name: "wrong sha256", path: "/llmgw", sha: strings.Repeat("ab", 32), size: size, existing: previous, wantCode: 1, wantOut: "has sha256 " + sum + ", want " + strings.Repeat("ab", 32)},
		{name: "wrong size", path: "/llmgw", sha: sum, size: strconv.Itoa(len(body) + 1), wantCode: 1, wantOut: "is " + size + " bytes, want " + strconv.Itoa(len(body)+1)},
		{name: "truncated download", path: "/short", sha: sum, size: size, existing: previous, wantCode: 1, wantOut: "is " + strconv.Itoa(len(body)/2) + " bytes, want " + size},
		{name: "empty download", path: "/empty", sha: sum, size: size, wantCode: 1, wantOut: "is 0 bytes, want " + size},
		{name: "download fails", path: "/missing", sha: sum, size: size, existing: previous, wantCode: 1, wantOut: "downloading " + srv.URL + "/missing: curl exited 22"},
		{name: "zero size refused", path: "/empty", sha: sha256Hex(nil), size: "0", wantCode: 1, wantOut: "size 0 is not a positive number"},
		{name: "malformed sha256 refused", path: "/llmgw", sha: "ABC", size: size, wantCode: 1, wantOut: "sha256 ABC is not 64 lowercase hex digits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "bin")
			dest := filepath.Join(dir, "llmgw")
			if tt.existing != nil {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(dest, tt.existing, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			out, code := runInstall(t, installScript, srv.URL+tt.path, tt.sha, tt.size, dest)
			if code != tt.wantCode || !strings.Contains(out, tt.wantOut) {
				t.Fatalf("exit %d, output %q; want exit %d and output containing %q", code, out, tt.wantCode, tt.wantOut)
			}
			got, err := os.ReadFile(dest)
			switch want := tt.existing; {
			case tt.wantCode == 0:
				if !bytes.Equal(got, body) {
					t.Errorf("%s holds %d bytes, want the %d served", dest, len(got), len(body))
				}
				if fi, err := os.Stat(dest); err != nil || fi.Mode().Perm() != 0o755 {
					t.Errorf("%s: mode %v, %v; want 0755", dest, fi.Mode(), err)
				}
			case want == nil:
				if !os.IsNotExist(err) {
					t.Errorf("%s exists after a refused install (%d bytes, %v)", dest, len(got), err)
				}
			case !bytes.Equal(got, want):
				t.Errorf("%s was changed by a refused install: %q", dest, got)
			}
			if _, err := os.Stat(dir); err == nil {
				if extra := leftovers(t, dir, "llmgw"); len(extra) > 0 {
					t.Errorf("files left beside %s: %v", dest, extra)
				}
			}
		})
	}
}

// TestAgentUnitIsTheExample: the unit the user-data installs is the
// repository's llmgw-agent.service, KillMode=process included.
func TestAgentUnitIsTheExample(t *testing.T) {
	mine, err := os.ReadFile("files/llmgw-agent.service")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("../../examples/deploy/systemd/llmgw-agent.service")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mine, example) {
		t.Errorf("files/llmgw-agent.service differs from examples/deploy/systemd/llmgw-agent.service: copy it again")
	}
	if !bytes.Contains(mine, []byte("\nKillMode=process\n")) {
		t.Errorf("the agent's unit lacks KillMode=process: engines would be stopped with the agent")
	}
}
