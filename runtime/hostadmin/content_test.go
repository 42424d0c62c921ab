package hostadmin

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/runtime/store"
)

func TestKeysContentRetention(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "llmgw.db")
	st, err := store.Open(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "server.yaml")
	if err := os.WriteFile(cfg, []byte("auth:\n  store: "+db+"\nagent_tls:\n  ca: ca.pem\n  cert: cert.pem\n  key: key.pem\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		want    int
		errText string
		threads int
		memory  int
	}{
		{name: "retention required", args: []string{"threads", "--project", "default"}, want: 2, errText: "--retain-hours N (N > 0) is required"},
		{name: "project required", args: []string{"threads", "--retain-hours", "24"}, want: 2, errText: "--project is required"},
		{name: "past ten years", args: []string{"threads", "--project", "default", "--retain-hours", "3000000"}, want: 2, errText: "more than 87600 (ten years)"},
		{name: "not both", args: []string{"memory", "--project", "default", "--retain-hours", "2", "--off"}, want: 2, errText: "not both"},
		{name: "unknown project", args: []string{"threads", "--project", "nobody", "--retain-hours", "2"}, want: 1, errText: "not found"},
		{name: "threads on", args: []string{"threads", "--project", "default", "--retain-hours", "24"}, threads: 24},
		{name: "memory on", args: []string{"memory", "--project", "default", "--retain-hours", "720"}, threads: 24, memory: 720},
		{name: "threads off", args: []string{"threads", "--project", "default", "--off"}, memory: 720},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			args := append(tt.args, "-c", cfg)
			if got := Keys(t.Context(), args, IO{In: strings.NewReader(""), Out: io.Discard, Err: &stderr}); got != tt.want {
				t.Fatalf("llmgw keys %v = %d, want %d: %s", args, got, tt.want, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.errText) {
				t.Fatalf("stderr %q, want %q", stderr.String(), tt.errText)
			}
			if tt.want != 0 {
				return
			}
			st, err := store.Open(t.Context(), db)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			th, _ := st.Retention(t.Context(), "default", store.ContentThreads)
			mem, _ := st.Retention(t.Context(), "default", store.ContentMemory)
			if th != tt.threads || mem != tt.memory {
				t.Fatalf("retention threads %d memory %d, want %d %d", th, mem, tt.threads, tt.memory)
			}
		})
	}
}
