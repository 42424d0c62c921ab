package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadReportsEveryProblemAtOnce is issue 18's configuration.md claim:
// an unknown key, a value that does not parse and a non-loopback
// pprof_listen (a check of values) come back in one error, instead of the
// pprof line only after the others are fixed; a key whose value did not
// parse is not reported a second time by the value checks.
func TestLoadReportsEveryProblemAtOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "server.yaml")
	body := tlsYAML + "agent:\n  grace: 45s\nauth:\n  enabled: sometimes\npprof_listen: 0.0.0.0:6060\nagents:\n  grace: soon\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil {
		t.Fatal("Load accepted a configuration with four problems")
	}
	want := []string{
		path + `:3: unknown key "agent.grace" (did you mean agents.grace?)`,
		path + `:5: auth.enabled: cannot parse "sometimes" as true or false`,
		path + `:8: agents.grace: cannot parse "soon" as a duration`,
		path + `: pprof_listen: "0.0.0.0:6060" is not a loopback address`,
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the error lacks %q:\n%s", w, err)
		}
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != len(want) {
		t.Errorf("the error has %d lines, want %d (one per problem):\n%s", n, len(want), err)
	}
}

// TestLoadSyntaxErrorAlone: a file that is not YAML reports that alone, not
// the required keys its unread content would have set.
func TestLoadSyntaxErrorAlone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "server.yaml")
	if err := os.WriteFile(path, []byte("agent_tls: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || strings.Contains(err.Error(), "is required") {
		t.Fatalf("Load of broken YAML = %v; want the syntax error alone", err)
	}
}
