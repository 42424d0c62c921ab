package hostadmin

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUsersPromoteAsWritten is issue 18's `llmgw users promote EMAIL`:
// without -c it finds the installed server.yaml (here a stand-in for
// /etc/llmgw/server.yaml) when the current directory has none; with
// neither it says what to pass.
func TestUsersPromoteAsWritten(t *testing.T) {
	dir := t.TempDir()
	installed := filepath.Join(dir, "etc", "server.yaml")
	if err := os.MkdirAll(filepath.Dir(installed), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := "agent_tls: {ca: ca.pem, cert: s.pem, key: s-key.pem}\nauth:\n  store: " + filepath.Join(dir, "llmgw.db") + "\n"
	if err := os.WriteFile(installed, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir() // no server.yaml here
	t.Chdir(work)
	old := defaultConfigPaths
	t.Cleanup(func() { defaultConfigPaths = old })
	defaultConfigPaths = []string{"server.yaml", installed}

	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Users(context.Background(), args, IO{In: strings.NewReader(goodPassword + "\n"), Out: &out, Err: &errOut})
		return code, out.String(), errOut.String()
	}
	if code, _, errOut := run("create", "ada@example.com", "--password", "-"); code != 0 {
		t.Fatalf("users create: exit %d: %s", code, errOut)
	}
	if code, out, errOut := run("promote", "ada@example.com"); code != 0 || !strings.Contains(out, "ada@example.com") {
		t.Fatalf("users promote ada@example.com: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ := run("list")
	if code != 0 || !strings.Contains(out, "ada@example.com") || !strings.Contains(out, " true ") {
		t.Errorf("users list after promote: exit %d\n%s", code, out)
	}

	defaultConfigPaths = []string{"server.yaml", filepath.Join(dir, "nowhere", "server.yaml")}
	code, _, errOut := run("promote", "ada@example.com")
	if code == 0 || !strings.Contains(errOut, "pass -c with the control plane's server.yaml") {
		t.Errorf("users promote without any server.yaml: exit %d, %q", code, errOut)
	}
}
