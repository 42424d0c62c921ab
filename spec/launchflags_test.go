package spec

import (
	"slices"
	"testing"
)

func TestFlagName(t *testing.T) {
	for arg, want := range map[string]string{
		"--port": "--port", "--port=8000": "--port", "-np": "-np", "-c": "-c", "--json-arg.key": "--json-arg.key",
		"-1": "", "--": "", "-": "", "8000": "", "--5": "", "": "",
	} {
		got, ok := FlagName(arg)
		if got != want || ok != (want != "") {
			t.Errorf("FlagName(%q) = %q, %v; want %q", arg, got, ok, want)
		}
	}
}

func TestEngineAcceptsFlag(t *testing.T) {
	known := []string{"--max-model-len", "--max-num-seqs", "--port", "--served-model-name", "-c"}
	tests := []struct {
		engine, flag string
		want         bool
	}{
		{"llamacpp", "--port", true},
		{"llamacpp", "-c", true},
		{"llamacpp", "--served-model", false}, // llama.cpp takes no prefix
		{"vllm", "--served-model", true},      // argparse: one flag starts so
		{"vllm", "--max", false},              // two do: ambiguous
		{"vllm", "--max_model_len", true},     // vLLM reads _ as -
		{"sglang", "--max_model_len", false},  // SGLang does not
		{"vllm", "--port-range", false},       // whole words
		{"vllm", "--max-model-len.x", true},   // vLLM's dotted JSON keys
		{"vllm", "-x", false},
	}
	for _, tt := range tests {
		if got := EngineAcceptsFlag(tt.engine, known, tt.flag); got != tt.want {
			t.Errorf("EngineAcceptsFlag(%s, %s) = %v, want %v", tt.engine, tt.flag, got, tt.want)
		}
	}
	// The profile's args come after the driver's flags, each once.
	var names []string
	for _, f := range LaunchFlags(Profile{Engine: "llamacpp", Args: []string{"-np", "2", "--jinja", "--jinja"}}) {
		names = append(names, f.Name)
	}
	want := []string{"--model", "--host", "--port", "--alias", "--metrics", "--n-gpu-layers", "--ctx-size", "-np", "--jinja"}
	if !slices.Equal(names, want) {
		t.Errorf("LaunchFlags = %v, want %v", names, want)
	}
	if f := LaunchFlags(Profile{Engine: "sim", Args: []string{"--tokens-per-second", "5"}}); len(f) != 0 {
		t.Errorf("sim: %v, want none (its flags are llmgw's own)", f)
	}
}
