package ctl

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/testkit/manageapi"
)

const (
	loginAdmin    = "ada@example.com"
	loginAdminPW  = "correct horse battery"
	loginUser     = "bob@example.com"
	loginUserPW   = "another long password"
	loginTestTTL  = 3 * time.Hour
	loginHostName = "terraform"
)

// startLoginManage serves the real management service, with logins, over
// TLS; ada is an administrator and bob is not. It returns the ctl
// environment without a token, and a host admin token.
func startLoginManage(t *testing.T) (env map[string]string, hostToken string) {
	t.Helper()
	api := manageapi.Start(t, manageapi.Options{LoginTTL: loginTestTTL, TokenName: loginHostName, Users: []manageapi.User{
		{Email: loginAdmin, Password: loginAdminPW, Admin: true},
		{Email: loginUser, Password: loginUserPW},
	}})
	return map[string]string{EnvEndpoint: api.Addr, EnvCACert: api.CAFile}, api.AdminToken
}

// runCtlStdin runs the CLI with stdin and the real clock (login tokens
// expire by the store's clock).
func runCtlStdin(t *testing.T, env map[string]string, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	a := &app{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errOut, env: func(k string) string { return env[k] }, now: time.Now}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return a.run(ctx, args), out.String(), errOut.String()
}

// exported returns the value an `export NAME=value` line of out sets.
func exported(t *testing.T, out, name string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "export "+name+"="); ok {
			return strings.Trim(v, "'")
		}
	}
	t.Fatalf("no export of %s in:\n%s", name, out)
	return ""
}

func with(env map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for key, val := range env {
		if key != k {
			out[key] = val
		}
	}
	return out
}

func TestLoginUseLogout(t *testing.T) {
	env, _ := startLoginManage(t)
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte(loginAdminPW+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		stdin string
		args  []string
	}{
		{"password on stdin", loginAdminPW + "\r\n", []string{"login", "--email", loginAdmin, "--password", "-"}},
		{"password file", "", []string{"login", "--email", "ADA@example.com", "--password-file", pwFile}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := time.Now()
			code, out, errOut := runCtlStdin(t, env, tt.stdin, tt.args...)
			if code != exitOK {
				t.Fatalf("login: exit %d\n%s%s", code, out, errOut)
			}
			if strings.Contains(out+errOut, loginAdminPW) {
				t.Fatalf("login printed the password:\n%s%s", out, errOut)
			}
			if !strings.Contains(out, "# logged in as "+loginAdmin) || !strings.Contains(out, "(in 3h0m0s)") {
				t.Errorf("login output does not say who and for how long:\n%s", out)
			}
			expires := out[strings.Index(out, "expires ")+len("expires "):]
			at, err := time.Parse(time.RFC3339, expires[:strings.Index(expires, " ")])
			if err != nil || at.Before(before.Add(loginTestTTL).Truncate(time.Second)) || at.After(time.Now().Add(loginTestTTL)) {
				t.Errorf("expiry %v (%v), want about now + %s", at, err, loginTestTTL)
			}
			if strings.Contains(out, "export "+EnvEndpoint) {
				t.Errorf("login exported the endpoint the environment already has:\n%s", out)
			}
			tokEnv := with(env, EnvToken, exported(t, out, EnvToken))
			mustCtl(t, tokEnv, exitOK, "status")

			out, _ = mustCtl(t, tokEnv, exitOK, "logout")
			if !strings.Contains(out, "is revoked") || !strings.Contains(out, "unset "+EnvToken) {
				t.Errorf("logout said %q", out)
			}
			_, errOut = mustCtl(t, tokEnv, exitError, "status")
			if !strings.Contains(errOut, "not recognised") || !strings.Contains(errOut, "llmgw ctl login") {
				t.Errorf("status after logout said %q", errOut)
			}
		})
	}
}

func TestLoginRefused(t *testing.T) {
	env, host := startLoginManage(t)
	tests := []struct {
		name  string
		env   map[string]string
		stdin string
		args  []string
		code  int
		want  []string
	}{
		{"wrong password", env, "not the password\n", []string{"login", "--email", loginAdmin, "--password", "-"}, exitError,
			[]string{"logging in as " + loginAdmin + ": wrong email or password"}},
		{"unknown email", env, loginAdminPW + "\n", []string{"login", "--email", "eve@example.com", "--password", "-"}, exitError,
			[]string{"wrong email or password"}},
		{"not an administrator", env, loginUserPW + "\n", []string{"login", "--email", loginUser, "--password", "-"}, exitError,
			[]string{"is not an administrator", "llmgw users promote " + loginUser}},
		{"password on the command line", env, "", []string{"login", "--email", loginAdmin, "--password", loginAdminPW}, exitUsage,
			[]string{`--password takes only "-"`, "process list"}},
		{"no password and no terminal", env, "", []string{"login", "--email", loginAdmin}, exitUsage,
			[]string{"stdin is not a terminal", "--password-file"}},
		{"empty password", env, "\n", []string{"login", "--email", loginAdmin, "--password", "-"}, exitError,
			[]string{"the password is empty"}},
		{"no email", env, "", []string{"login", "--password", "-"}, exitUsage, []string{"missing --email"}},
		{"missing password file", env, "", []string{"login", "--email", loginAdmin, "--password-file", filepath.Join(t.TempDir(), "nope")}, exitError,
			[]string{"reading --password-file"}},
		{"logout with a host token", with(env, EnvToken, host), "", []string{"logout"}, exitError,
			[]string{"did not come from llmgw ctl login", "control-plane host"}},
		{"logout without a token", env, "", []string{"logout"}, exitUsage, []string{"no admin token", "llmgw ctl login"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCtlStdin(t, tt.env, tt.stdin, tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, tt.code, out, errOut)
			}
			for _, w := range tt.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr does not say %q:\n%s", w, errOut)
				}
			}
			if strings.Contains(out, "export "+EnvToken) {
				t.Errorf("a refused login printed a token:\n%s", out)
			}
			if strings.Contains(errOut, "check "+EnvToken) {
				t.Errorf("a refused login blamed the admin token:\n%s", errOut)
			}
		})
	}
	mustCtl(t, with(env, EnvToken, host), exitOK, "status")
}

// Flags given in place of the environment are exported for the next
// command.
func TestLoginExportsFlags(t *testing.T) {
	env, _ := startLoginManage(t)
	code, out, errOut := runCtlStdin(t, nil, loginAdminPW+"\n", "login", "--email", loginAdmin, "--password", "-",
		"--endpoint", env[EnvEndpoint], "--ca-cert", env[EnvCACert])
	if code != exitOK {
		t.Fatalf("login: exit %d\n%s%s", code, out, errOut)
	}
	next := map[string]string{
		EnvEndpoint: exported(t, out, EnvEndpoint),
		EnvCACert:   exported(t, out, EnvCACert),
		EnvToken:    exported(t, out, EnvToken),
	}
	if next[EnvEndpoint] != env[EnvEndpoint] || next[EnvCACert] != env[EnvCACert] {
		t.Fatalf("exported %v, want the flags' values", next)
	}
	mustCtl(t, next, exitOK, "status")
}

func TestShellQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{"llmgwadm-abc234", "llmgwadm-abc234"},
		{"127.0.0.1:9090", "127.0.0.1:9090"},
		{"/tmp/my ca.pem", "'/tmp/my ca.pem'"},
		{"it's", `'it'\''s'`},
		{"", "''"},
	}
	for _, tt := range tests {
		if got := shellQuote(tt.in); got != tt.want {
			t.Errorf("shellQuote(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestReadLine(t *testing.T) {
	tests := []struct {
		in, want string
		err      bool
	}{
		{"pw\nrest", "pw", false},
		{"pw\r\n", "pw", false},
		{"no newline", "no newline", false},
		{"", "", false},
		{strings.Repeat("x", maxPasswordRead+10), "", true},
	}
	for _, tt := range tests {
		r := strings.NewReader(tt.in)
		got, err := readLine(r)
		if got != tt.want || (err != nil) != tt.err {
			t.Errorf("readLine(%.20q) = %q, %v", tt.in, got, err)
		}
		if tt.in == "pw\nrest" && r.Len() != len("rest") {
			t.Errorf("readLine consumed past the newline: %d bytes left", r.Len())
		}
	}
}
