package devcluster

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	agentconfig "github.com/llmgw/llmgw/agent/config"
	"github.com/llmgw/llmgw/runtime/config"
	"github.com/llmgw/llmgw/runtime/keys"
)

// TestConfigFiles writes the dev cluster's server.yaml and agent.yaml files
// and reads them with the daemons' own strict loaders: each says what its
// config value says.
func TestConfigFiles(t *testing.T) {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, config.EnvPrefix) {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
	dir, base := t.TempDir(), 9000
	serverYAML := filepath.Join(dir, "server.yaml")
	want := serverConfig(dir, base)
	if err := want.WriteFile(serverYAML, writtenBy); err != nil {
		t.Fatal(err)
	}
	got, err := config.Load(serverYAML)
	if err != nil {
		t.Fatalf("server.yaml does not load: %v", err)
	}
	want.Normalize()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("server.yaml loads as\n%+v\nwant\n%+v", got, want)
	}
	if got.PprofListen != "127.0.0.1:9004" || got.Agents.Settle.String() != "1s" || len(got.Models) != 3 {
		t.Errorf("server.yaml: pprof %s settle %s models %d", got.PprofListen, got.Agents.Settle, len(got.Models))
	}

	for i, n := range devNodes {
		path, err := prepareNode(dir, n, base, i)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(path)
		if !strings.HasPrefix(string(b), "# "+writtenBy+"\n") {
			t.Errorf("%s does not start with its comment:\n%s", path, b)
		}
		got, err := agentconfig.Load(path)
		if err != nil {
			t.Fatalf("%s does not load: %v\n%s", path, err, b)
		}
		nd := filepath.Join(dir, "nodes", n.id)
		want := agentConfig(dir, n, base, i, filepath.Join(nd, "nvidia-smi"), filepath.Join(nd, "infiniband"))
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s loads as\n%+v\nwant\n%+v", path, got, want)
		}
		if from := base + 100 + 100*i; got.EnginePorts.From != from || got.EnginePorts.To != from+99 || (len(got.Fabrics) == 1) != (n.fabric != "") {
			t.Errorf("%s: engine ports %+v fabrics %+v", n.id, got.EnginePorts, got.Fabrics)
		}
	}
}

// TestCredentials: a restart on the same directory keeps the admin token and
// API key while the store accepts them, and makes new ones when it does not.
func TestCredentials(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	admin, err := keys.Open(ctx, filepath.Join(dir, "llmgw.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	first, err := ensureCredentials(ctx, dir, admin)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := admin.APIKeyUsable(ctx, first.APIKey); !ok || err != nil {
		t.Fatalf("the dev API key is not usable: %v, %v", ok, err)
	}
	if ok, err := admin.AdminTokenUsable(ctx, first.AdminToken); !ok || err != nil {
		t.Fatalf("the dev admin token is not usable: %v, %v", ok, err)
	}
	again, err := ensureCredentials(ctx, dir, admin)
	if err != nil || again != first {
		t.Fatalf("restart: credentials %+v, %v; want the same as before", again, err)
	}
	list, err := admin.ListAPIKeys(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "llmgw dev" {
		t.Fatalf("API keys = %+v, %v; want one named llmgw dev", list, err)
	}
	if err := admin.RevokeAPIKey(ctx, list[0].ID); err != nil {
		t.Fatal(err)
	}
	fresh, err := ensureCredentials(ctx, dir, admin)
	if err != nil || fresh.APIKey == first.APIKey || fresh.AdminToken == first.AdminToken {
		t.Fatalf("after revoking the key: credentials %+v, %v; want new ones", fresh, err)
	}
}

// TestSeedMirror: the demo weights are the same bytes on every start, land
// under the mirror's layout, and a second seed leaves the file in place;
// the mirrored model's source is that file's URL on the mirror's port.
func TestSeedMirror(t *testing.T) {
	dir := t.TempDir()
	if err := seedMirror(dir); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, ModelMirrored, MirroredVersion, MirroredFile)
	b, err := os.ReadFile(path)
	if err != nil || len(b) != MirroredSize || !bytes.Equal(b, demoWeights()) {
		t.Fatalf("seeded %d bytes, %v; want the %d demo bytes", len(b), err, MirroredSize)
	}
	before, _ := os.Stat(path)
	if err := seedMirror(dir); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.Stat(path); !os.SameFile(before, after) {
		t.Error("a second seed rewrote the file")
	}
	if got, want := mirroredSource(9000), "http://127.0.0.1:9005/sim-mirrored/dev/weights.bin"; got != want {
		t.Errorf("source %s, want %s", got, want)
	}
	if m := serverConfig(dir, 9000).Models[2]; m.Name != ModelMirrored || m.Source != mirroredSource(9000) {
		t.Errorf("the third demo model is %s from %s", m.Name, m.Source)
	}
}
