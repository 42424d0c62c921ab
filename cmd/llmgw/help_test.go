package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestMain runs the llmgw command itself when the test binary is started
// again by llmgw (below), so the tests see its real exit code and output.
func TestMain(m *testing.M) {
	if os.Getenv("LLMGW_HELP_TEST_MAIN") == "1" {
		main()
	}
	os.Exit(m.Run())
}

// llmgw runs `llmgw args...` in a child process and returns its exit code
// and what it printed on stdout and stderr together.
func llmgw(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "LLMGW_HELP_TEST_MAIN=1")
	cmd.Dir = t.TempDir() // no server.yaml: nothing may be read
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), out.String()
	}
	if err != nil {
		t.Fatalf("running llmgw %q: %v", args, err)
	}
	return 0, out.String()
}

// Every command answers -h and --help with its usage line and its flags
// with their defaults, exit 0, and an unknown flag with the error and the
// usage, exit 2. (sim-engine -h once printed only "flag: help requested"
// and exited 1; server, agent, dev and mirror serve exited 2.)
func TestEveryCommandHelp(t *testing.T) {
	commands := []struct {
		args     []string
		usage    string // the usage line starts with this
		someFlag string // one flag as PrintDefaults lists it
	}{
		{[]string{"server"}, "usage: llmgw server", `-c string`},
		{[]string{"agent"}, "usage: llmgw agent", `-stop-engines-on-exit`},
		{[]string{"sim-engine"}, "usage: llmgw sim-engine", `(default 8192)`},
		{[]string{"dev"}, "usage: llmgw dev", `-port-base int`},
		{[]string{"mirror", "serve"}, "usage: llmgw mirror serve", `(default ":8081")`},
		{[]string{"mirror", "fetch"}, "usage: llmgw mirror fetch", `-model string`},
		{[]string{"keys", "create"}, "usage: llmgw keys create", `-expires duration`},
		{[]string{"keys", "list"}, "usage: llmgw keys list", `-json`},
		{[]string{"keys", "revoke"}, "usage: llmgw keys revoke ID", `-c string`},
		{[]string{"keys", "admin-token"}, "usage: llmgw keys admin-token", `-name string`},
		{[]string{"keys", "move-store"}, "usage: llmgw keys move-store", `-from string`},
		{[]string{"keys", "threads"}, "usage: llmgw keys threads", `-project string`},
		{[]string{"keys", "memory"}, "usage: llmgw keys memory", `-retain-hours int`},
		{[]string{"users", "create"}, "usage: llmgw users create EMAIL", `-password-file string`},
		{[]string{"users", "list"}, "usage: llmgw users list", `-json`},
		{[]string{"users", "promote"}, "usage: llmgw users promote", `-c string`},
		{[]string{"users", "demote"}, "usage: llmgw users demote", `-c string`},
		{[]string{"ctl", "status"}, "usage: llmgw ctl status", `(default 10s)`},
		{[]string{"ctl", "cert", "init-ca"}, "usage: llmgw ctl cert init-ca", `-dir string`},
	}
	for _, c := range commands {
		name := strings.Join(c.args, " ")
		for _, h := range []string{"-h", "--help"} {
			t.Run(name+" "+h, func(t *testing.T) {
				code, out := llmgw(t, append(append([]string{}, c.args...), h)...)
				if code != 0 {
					t.Errorf("exit %d, want 0:\n%s", code, out)
				}
				if !strings.HasPrefix(out, c.usage) || !strings.Contains(out, "\nflags:\n") || !strings.Contains(out, c.someFlag) {
					t.Errorf("want the usage line %q and the flags (%q among them):\n%s", c.usage, c.someFlag, out)
				}
			})
		}
		t.Run(name+" unknown flag", func(t *testing.T) {
			code, out := llmgw(t, append(append([]string{}, c.args...), "--no-such-flag")...)
			if code != 2 {
				t.Errorf("exit %d, want 2:\n%s", code, out)
			}
			if !strings.HasPrefix(out, "flag provided but not defined: -no-such-flag\n"+c.usage) || !strings.Contains(out, c.someFlag) {
				t.Errorf("want the error, then the usage and the flags:\n%s", out)
			}
		})
	}
}

// The command groups answer -h with the commands in them, exit 0; no
// command at all or an unknown one is a usage error, exit 2.
func TestEveryGroupHelp(t *testing.T) {
	for _, group := range [][]string{nil, {"mirror"}, {"keys"}, {"users"}, {"ctl"}} {
		usage := "usage: " + strings.Join(append([]string{"llmgw"}, group...), " ") + " <"
		for _, h := range []string{"-h", "--help", "help"} {
			code, out := llmgw(t, append(append([]string{}, group...), h)...)
			if code != 0 || !strings.Contains(out, usage) {
				t.Errorf("llmgw %q %s: exit %d, want 0 and %q:\n%s", group, h, code, usage, out)
			}
		}
		for _, args := range [][]string{group, append(append([]string{}, group...), "frobnicate")} {
			code, out := llmgw(t, args...)
			if code != 2 || !strings.Contains(out, usage) {
				t.Errorf("llmgw %q: exit %d, want 2 and %q:\n%s", args, code, usage, out)
			}
			if len(args) > len(group) && !strings.Contains(out, `unknown command "frobnicate"`) {
				t.Errorf("llmgw %q does not name the unknown command:\n%s", args, out)
			}
		}
	}
}

// The table above names every command llmgw's usage lists.
func TestEveryCommandHelpCoversTheUsage(t *testing.T) {
	_, out := llmgw(t, "help")
	src, err := os.ReadFile("help_test.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^  ([a-z][a-z-]*) `).FindAllStringSubmatch(out, -1) {
		if m[1] != "version" && !strings.Contains(string(src), `{"`+m[1]+`"`) {
			t.Errorf("llmgw %s is in the usage but not in TestEveryCommandHelp", m[1])
		}
	}
}

// A missing or extra argument is a usage error too: the command, the
// error, the usage, exit 2, and nothing read (no server.yaml is needed to
// say so).
func TestWrongArgumentCount(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"keys", "revoke"}, "llmgw keys revoke: missing the key id\nusage: llmgw keys revoke ID"},
		{[]string{"keys", "list", "extra"}, "llmgw keys list: unexpected argument \"extra\"\nusage: llmgw keys list"},
		{[]string{"users", "promote"}, "llmgw users promote: missing the user\nusage: llmgw users promote"},
		{[]string{"users", "demote", "a", "b"}, "llmgw users demote: unexpected argument \"b\"\nusage: llmgw users demote"},
		{[]string{"server", "extra"}, "llmgw server: unexpected argument \"extra\"\nusage: llmgw server"},
		{[]string{"mirror", "fetch", "--model", "m", "--version", "v"}, "llmgw mirror fetch: missing the SOURCE\nusage: llmgw mirror fetch"},
		{[]string{"sim-engine", "--served-model-name", "m", "extra"}, "llmgw sim-engine: unexpected argument \"extra\"\nusage: llmgw sim-engine"},
	} {
		code, out := llmgw(t, tt.args...)
		if code != 2 || !strings.HasPrefix(out, tt.want) {
			t.Errorf("llmgw %q: exit %d, want 2 and %q first:\n%s", tt.args, code, tt.want, out)
		}
	}
}

// A required flag missing is a usage error as a bad flag is: the command,
// the error naming the flag, then the usage, exit 2, nothing read (no
// server.yaml is needed to say so). `keys threads` without --project once
// exited 1 with no usage. Each command's cases are its package's
// (hostadmin's TestUsageErrors); these show main passes them through.
func TestMissingRequiredFlag(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"keys", "create"}, "llmgw keys create: --name is required\nusage: llmgw keys create "},
		{[]string{"keys", "threads", "--off"}, "llmgw keys threads: --project is required\nusage: llmgw keys threads "},
		{[]string{"users", "create", "a@example.com"}, "llmgw users create: a password is required"},
		{[]string{"mirror", "fetch", "--model", "m", "hf://org/m"}, "llmgw mirror fetch: --version is required\nusage: llmgw mirror fetch "},
	} {
		code, out := llmgw(t, tt.args...)
		if code != 2 || !strings.HasPrefix(out, tt.want) || !strings.Contains(out, "\nflags:\n") {
			t.Errorf("llmgw %q: exit %d, want 2, %q first and the flags:\n%s", tt.args, code, tt.want, out)
		}
	}
}
