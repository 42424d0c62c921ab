package testcluster

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// DevPortBase finds seven consecutive free loopback ports, for `llmgw dev
// --port-base` (devcluster.Options.PortBase: the control plane's four
// listeners, pprof, and the mirror's two).
func DevPortBase(t testing.TB) int {
	t.Helper()
	for attempt := 0; attempt < 50; attempt++ {
		base := FreePorts(t, 1)[0]
		if base > 60000 {
			continue
		}
		free := true
		for off := 1; off < 7 && free; off++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+off))
			if err != nil {
				free = false
				continue
			}
			l.Close()
		}
		if free {
			return base
		}
	}
	t.Fatal("no seven consecutive free loopback ports")
	return 0
}

// ReadDevEnv reads the `export K=V` lines of `llmgw dev`'s env file.
func ReadDevEnv(t testing.TB, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok {
			t.Fatalf("%s: line %q is not export K=V", path, line)
		}
		env[k] = v
	}
	return env
}
