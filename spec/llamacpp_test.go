package spec

import (
	"strings"
	"testing"
)

// TestLlamaCppContextGuard: llama-server splits --ctx-size among its
// --parallel slots, so a llamacpp profile whose explicit context leaves a
// slot less than context_length is refused at validation, naming both
// numbers; what the driver sizes itself, other engines and a unified KV
// cache are not.
func TestLlamaCppContextGuard(t *testing.T) {
	tests := []struct {
		name    string
		engine  string
		ctx     int
		args    []string
		wantErr string // "" means valid
	}{
		{"no ctx-size: the driver gives context_length x slots", "llamacpp", 65536, []string{"--parallel", "4"}, ""},
		{"pool split over two slots", "llamacpp", 65536, []string{"--ctx-size", "65536", "--parallel", "2"},
			"profiles[0].args: --ctx-size 65536 over --parallel 2 gives each slot 32768 tokens, less than context_length 65536"},
		{"short forms and =", "llamacpp", 8192, []string{"-c=16384", "-np", "4"},
			"profiles[0].args: --ctx-size 16384 over --parallel 4 gives each slot 4096 tokens, less than context_length 8192"},
		{"default slot", "llamacpp", 65536, []string{"--ctx-size", "32768"},
			"profiles[0].args: --ctx-size 32768 over llama-server's 1 slot (no --parallel) gives each slot 32768 tokens, less than context_length 65536"},
		{"the seeds' example: 65536 over the default slot for 32768", "llamacpp", 32768, []string{"--ctx-size", "65536"}, ""},
		{"exactly enough per slot", "llamacpp", 32768, []string{"--ctx-size", "65536", "--parallel", "2"}, ""},
		{"the last flag wins", "llamacpp", 32768, []string{"--ctx-size", "1024", "-c", "65536", "--parallel", "2"}, ""},
		{"unified KV: a slot may use the whole pool", "llamacpp", 32768, []string{"--ctx-size", "32768", "--parallel", "4", "--kv-unified"}, ""},
		{"unified KV still too small", "llamacpp", 32768, []string{"--ctx-size", "16384", "-kvu"},
			"profiles[0].args: --ctx-size 16384 over llama-server's 1 slot (no --parallel) with --kv-unified gives each slot 16384 tokens, less than context_length 32768"},
		{"unified KV turned off again", "llamacpp", 32768, []string{"--ctx-size", "32768", "--parallel", "4", "-kvu", "--no-kv-unified"},
			"gives each slot 8192 tokens"},
		{"ctx-size 0 is the model's own", "llamacpp", 32768, []string{"--ctx-size", "0", "--parallel", "4"}, ""},
		{"context_length unstated", "llamacpp", 0, []string{"--ctx-size", "1024", "--parallel", "4"}, ""},
		{"not a number", "llamacpp", 4096, []string{"--ctx-size", "lots"}, `profiles[0].args: --ctx-size "lots" is not a number of tokens`},
		{"bad parallel", "llamacpp", 4096, []string{"--ctx-size", "8192", "-np", "0"}, `profiles[0].args: --parallel "0" is not a positive number`},
		{"other engines are not llama.cpp", "vllm", 65536, []string{"--ctx-size", "1024", "--parallel", "4"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := Model{Name: "m", Source: "/models/m.gguf", ContextLength: tt.ctx, Scaling: Scaling{Min: 1},
				Profiles: []Profile{{Name: "cpu", Engine: tt.engine, Args: tt.args}}}
			m.Normalize()
			err := m.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("accepted, want %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("error %q, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}
