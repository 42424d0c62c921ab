package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/spec"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

// llmgwCmd runs the llmgw binary with stdin and the environment the
// operator's shell would have (any LLMGW_* of the test's own environment
// left out), and returns its exit code and combined output.
func llmgwCmd(t *testing.T, env []string, stdin string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LLMGW_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("running llmgw %s: %v", strings.Join(args, " "), err)
		}
		code = ee.ExitCode()
	}
	return code, string(out)
}

// An administrator made on the control-plane host logs in with email and
// password, manages the cluster with the token, and loses it on demotion;
// neither the password nor the token is ever logged.
func TestLoginEndToEnd(t *testing.T) {
	c := testcluster.NewWithAuth(t, binary, "10s", "  []\n", "  login_ttl: 1h\n")
	var b [8]byte
	_, _ = rand.Read(b[:])
	password := "e2e-password-" + hex.EncodeToString(b[:])
	wrong := "e2e-wrong-" + hex.EncodeToString(b[:])
	c.AddSecret(password)
	c.AddSecret(wrong)
	const email = "ada@example.com"
	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	mustRun := func(env []string, stdin string, args ...string) string {
		t.Helper()
		code, out := llmgwCmd(t, env, stdin, args...)
		if code != 0 {
			t.Fatalf("llmgw %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
		return out
	}
	// On the control-plane host, while the server runs.
	mustRun(nil, "", "users", "create", email, "--password-file", pwFile, "-c", c.CfgPath)
	conn := []string{"LLMGW_ENDPOINT=" + c.Manage, "LLMGW_CA_CERT=" + filepath.Join(c.PKIDir, "ca.pem")}

	code, out := llmgwCmd(t, conn, password+"\n", "ctl", "login", "--email", email, "--password", "-")
	if code != 1 || !strings.Contains(out, "is not an administrator") || !strings.Contains(out, "llmgw users promote "+email) {
		t.Fatalf("login before promotion: exit %d\n%s", code, out)
	}
	mustRun(nil, "", "users", "promote", email, "-c", c.CfgPath)

	code, out = llmgwCmd(t, conn, wrong+"\n", "ctl", "login", "--email", email, "--password", "-")
	if code != 1 || !strings.Contains(out, "wrong email or password") {
		t.Fatalf("login with a wrong password: exit %d\n%s", code, out)
	}

	out = mustRun(conn, password+"\n", "ctl", "login", "--email", email, "--password", "-")
	var token string
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "export LLMGW_TOKEN="); ok {
			token = v
		}
	}
	if !spec.IsAdminToken(token) || !strings.Contains(out, "# logged in as "+email) || !strings.Contains(out, "(in 1h0m0s)") {
		t.Fatalf("login said:\n%s", out)
	}
	c.AddSecret(token)
	withToken := append([]string{"LLMGW_TOKEN=" + token}, conn...)

	// A management call that changes something, and one that reads it.
	mustRun(withToken, "", "ctl", "projects", "create", "team-login", "--rpm", "30")
	if out := mustRun(withToken, "", "ctl", "projects"); !strings.Contains(out, "team-login") {
		t.Fatalf("projects with the login's token:\n%s", out)
	}

	out = mustRun(nil, "", "users", "demote", email, "-c", c.CfgPath)
	if !strings.Contains(out, "login tokens are revoked") {
		t.Errorf("demote said:\n%s", out)
	}
	code, out = llmgwCmd(t, withToken, "", "ctl", "status")
	if code != 1 || !strings.Contains(out, "not recognised") {
		t.Fatalf("status after demotion: exit %d\n%s", code, out)
	}

	// The control plane recorded the refusals and the login, by email and
	// address.
	testcluster.WaitFor(t, "the logins in the control plane's log", 10*time.Second, func() (bool, string) {
		log := c.Server.Output()
		for _, want := range []string{"login refused", "email=" + email, "remote=127.0.0.1", "reason=\"wrong email or password\"",
			"reason=\"not an administrator\"", "administrator logged in"} {
			if !strings.Contains(log, want) {
				return false, "no " + want
			}
		}
		return true, ""
	})
}
