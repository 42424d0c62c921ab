// Package nodejs installs official npm client packages for tests and runs
// Node.js scripts with them: each package at a pinned version goes once
// per machine into a cache outside the checkout
// (${XDG_CACHE_HOME:-~/.cache}/llmgw/npm/<name>-<version>/), installed
// with npm itself. Without node and npm a test is skipped on a
// developer's machine and fails under CI=true.
package nodejs

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Pinned versions of the client packages the tests run.
const (
	OpenAI    = "openai@6.30.1"
	Anthropic = "@anthropic-ai/sdk@1.10.0"
	MCP       = "@modelcontextprotocol/sdk@1.32.2"
)

// Require skips (fails under CI=true) when node or npm is missing.
func Require(t testing.TB) {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
				t.Fatalf("%s not found (CI=true): %v", tool, err)
			}
			t.Skipf("%s not found: %v", tool, err)
		}
	}
}

// Install returns the directory a package ("name@version") is installed
// in, installing it when missing. A script loads it with
// createRequire(path.join(dir, "package.json")).
func Install(t testing.TB, pkg string) string {
	t.Helper()
	Require(t)
	at := strings.LastIndex(pkg, "@")
	if at <= 0 {
		t.Fatalf("nodejs.Install(%q): want name@version", pkg)
	}
	name, version := pkg[:at], pkg[at+1:]
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatal(err)
		}
		cache = filepath.Join(home, ".cache")
	}
	dirName := strings.ReplaceAll(strings.TrimPrefix(name, "@"), "/", "-") + "-" + version
	dir := filepath.Join(cache, "llmgw", "npm", dirName)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", name, "package.json")); err == nil {
		return dir
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("npm", "install", "--no-audit", "--no-fund", "--omit=peer", "--prefix", dir, pkg)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install %s: %v\n%s", pkg, err, out)
	}
	return dir
}

// Run runs node on script with env added and returns its standard
// output; a failure ends the test with its standard error.
func Run(t testing.TB, script string, env ...string) []byte {
	t.Helper()
	cmd := exec.Command("node", script)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("node %s: %v\nstdout: %s\nstderr: %s", filepath.Base(script), err, out, stderr.Bytes())
		}
		t.Fatalf("node %s: %v", filepath.Base(script), err)
	}
	return out
}
