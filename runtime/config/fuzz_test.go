package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzLoad feeds server.yaml's loader any file: it returns a configuration
// or an error naming the file, never a panic; and a configuration it
// accepts, written back with Marshal, loads again to the same value.
func FuzzLoad(f *testing.F) {
	for _, seed := range []string{
		"agent_tls: {ca: ca.pem, cert: s.pem, key: s-key.pem}\n",
		"listen: \":8080\"\nagent_tls:\n  ca: a\n  cert: b\n  key: c\nauth:\n  default_rpm: 60\n  default_price: {prompt_per_1k: 0.5, completion_per_1k: 1}\n",
		"agent_tls: {ca: a, cert: b, key: c}\nmodels:\n  - name: m\n    source: sim://m\n    scaling: {min: 1}\n    profiles: [{name: p, engine: sim}]\n",
		"agent_tls: {ca: a, cert: b, key: c}\nagents: {grace: 1s, heartbeat_interval: 5s}\n",
		"auth: {default_price: {prompt_per_1k: .nan}}\n",
		"timeouts: {generation: 99999999999h}\n",
		"models: [{name: M, profiles: []}]\n",
		"listen: [1, 2]\n",
		"a: &a [*a]\n",
		"\t- x",
		"",
	} {
		f.Add([]byte(seed))
	}
	for _, env := range os.Environ() {
		if strings.HasPrefix(env, EnvPrefix) {
			k, _, _ := strings.Cut(env, "=")
			f.Setenv(k, "")
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "server.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Load(path)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		again := filepath.Join(dir, "again.yaml")
		if err := s.WriteFile(again, "fuzz"); err != nil {
			t.Fatalf("an accepted configuration cannot be written: %v", err)
		}
		s2, err := Load(again)
		if err != nil {
			b, _ := os.ReadFile(again)
			t.Fatalf("an accepted configuration, written back, does not load: %v\n%s", err, b)
		}
		if !reflect.DeepEqual(s, s2) {
			t.Fatalf("written back and loaded again, the configuration changed:\n%+v\n%+v", s, s2)
		}
	})
}
