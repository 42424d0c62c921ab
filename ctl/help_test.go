package ctl

import (
	"regexp"
	"strings"
	"testing"
)

// ctlCommands is every command `llmgw ctl` runs, as the words that name it.
var ctlCommands = [][]string{
	{"status"}, {"nodes"}, {"drain"}, {"check-engines"}, {"tool-check"}, {"rollout"},
	{"weights"}, {"fabrics"}, {"models"}, {"replicas"}, {"explain-placement"},
	{"model", "add"}, {"model", "get"}, {"model", "rm"}, {"scale"}, {"bench"},
	{"projects", "list"}, {"projects", "create"}, {"projects", "update"}, {"projects", "delete"},
	{"keys", "list"}, {"keys", "create"}, {"keys", "update"}, {"keys", "revoke"},
	{"budgets", "list"}, {"budgets", "set"}, {"budgets", "delete"},
	{"prices"}, {"usage"}, {"login"}, {"logout"},
	{"cert", "init-ca"}, {"cert", "issue-server"}, {"cert", "issue-node"},
}

// Every command answers -h and --help with its usage line and its flags,
// defaults included, and exits 0; an unknown flag is an error printed with
// the usage, exit 2.
func TestEveryCommandHelp(t *testing.T) {
	for _, cmd := range ctlCommands {
		name := strings.Join(cmd, " ")
		// `projects list` is `projects` without a subcommand.
		name = strings.TrimSuffix(name, " list")
		for _, h := range []string{"-h", "--help"} {
			t.Run(name+" "+h, func(t *testing.T) {
				code, out, errOut := runCtl(t, map[string]string{}, append(append([]string{}, cmd...), h)...)
				all := out + errOut
				if code != 0 {
					t.Errorf("exit %d, want 0:\n%s", code, all)
				}
				if !strings.Contains(all, "usage: llmgw ctl "+name) {
					t.Errorf("no usage line %q:\n%s", "usage: llmgw ctl "+name, all)
				}
				if !regexp.MustCompile(`(?m)^  -[a-z]`).MatchString(all) {
					t.Errorf("no flag listed:\n%s", all)
				}
				if cmd[0] != "cert" && !strings.Contains(all, "-endpoint string") {
					t.Errorf("the connection flags are not listed:\n%s", all)
				}
			})
		}
		t.Run(name+" unknown flag", func(t *testing.T) {
			code, out, errOut := runCtl(t, map[string]string{}, append(append([]string{}, cmd...), "--no-such-flag")...)
			if code != 2 {
				t.Errorf("exit %d, want 2:\n%s%s", code, out, errOut)
			}
			if !strings.Contains(errOut, "flag provided but not defined: -no-such-flag") || !strings.Contains(errOut, "usage: llmgw ctl "+name) {
				t.Errorf("stderr lacks the error or the usage:\n%s", errOut)
			}
		})
	}
}

// A command group answers -h with the usage that lists its commands.
func TestEveryGroupHelp(t *testing.T) {
	for _, group := range []string{"model", "cert", "projects", "keys", "budgets"} {
		for _, h := range []string{"-h", "--help", "help"} {
			code, out, errOut := runCtl(t, map[string]string{}, group, h)
			if code != 0 || !strings.Contains(out+errOut, "usage: llmgw ctl "+group+" ") {
				t.Errorf("ctl %s %s: exit %d, want 0 and the group's usage:\n%s%s", group, h, code, out, errOut)
			}
		}
	}
}

// The table above names every command the help text lists.
func TestEveryCommandHelpCoversTheUsage(t *testing.T) {
	covered := map[string]bool{"help": true, "model": true}
	for _, cmd := range ctlCommands {
		covered[cmd[0]] = true
	}
	for _, m := range regexp.MustCompile(`(?m)^  ([a-z][a-z-]*)`).FindAllStringSubmatch(usageText, -1) {
		if !covered[m[1]] {
			t.Errorf("ctl %s is in the usage text but not in ctlCommands", m[1])
		}
	}
}
