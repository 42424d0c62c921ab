package agent

import (
	"testing"
	"time"

	"github.com/llmgw/llmgw/agent/declaration"
)

func TestBackoffGrowsWithJitterAndIsCapped(t *testing.T) {
	for n := 1; n <= 12; n++ {
		base := min(500*time.Millisecond<<min(n-1, 6), 30*time.Second)
		for i := 0; i < 50; i++ {
			d := backoff(n)
			if d < base/2 || d > base {
				t.Fatalf("backoff(%d) = %s, want within [%s, %s]", n, d, base/2, base)
			}
		}
	}
}

func TestEngineStatuses(t *testing.T) {
	a := &Agent{opts: Options{SelfBinary: "/usr/local/bin/llmgw"}}
	got := a.engineStatuses(declaration.Declaration{Engines: map[string]string{
		"llamacpp": "/nonexistent/llama-server",
		"vllm":     "/bin/sh", // exists and is executable
	}})
	if len(got) != 3 {
		t.Fatalf("got %d statuses, want sim, llamacpp, vllm", len(got))
	}
	if got[0].GetEngine() != "sim" || !got[0].GetAvailable() {
		t.Fatalf("sim = %v; the sim engine is this binary and always available", got[0])
	}
	if got[1].GetEngine() != "llamacpp" || got[1].GetAvailable() || got[1].GetError() == "" {
		t.Fatalf("llamacpp = %v; want unavailable with the reason", got[1])
	}
	if got[2].GetEngine() != "vllm" || !got[2].GetAvailable() {
		t.Fatalf("vllm = %v; want available", got[2])
	}
}
