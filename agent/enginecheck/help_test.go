package enginecheck

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/spec"
	"github.com/llmgw/llmgw/testkit/llamacpp"
)

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// driverFlagsMissing returns the flags of p the help does not take.
func driverFlagsMissing(engine string, h Help, p spec.Profile) []string {
	var missing []string
	for _, f := range spec.LaunchFlags(p) {
		if !spec.EngineAcceptsFlag(engine, h.Flags, f.Name) {
			missing = append(missing, f.Name)
		}
	}
	return missing
}

// TestParseHelpRecorded reads the help vLLM and SGLang releases printed
// (testdata/README.md says where each came from) and looks up the flags
// llmgw's drivers write in it.
func TestParseHelpRecorded(t *testing.T) {
	t.Run("vllm 0.7 usage", func(t *testing.T) {
		h := ParseHelp(readTestdata(t, "vllm-0.7-serve-help-usage.txt"))
		if h.Summary || h.Truncated {
			t.Fatalf("summary %v truncated %v, want neither", h.Summary, h.Truncated)
		}
		if len(h.Flags) < 100 {
			t.Fatalf("found %d flags, want the 100-odd of the usage: %v", len(h.Flags), h.Flags)
		}
		for _, f := range []string{"-h", "--no-enable-prefix-caching", "--tool-parser-plugin", "--enable-prompt-tokens-details"} {
			if !slices.Contains(h.Flags, f) {
				t.Errorf("flag %s not found", f)
			}
		}
		single := spec.Profile{Engine: "vllm", TP: 2, Nodes: 1}
		if m := driverFlagsMissing("vllm", h, single); len(m) != 0 {
			t.Errorf("single-node vllm: %v missing from 0.7's help", m)
		}
		// The multi-node mp flags came after 0.7: the check must say so.
		two := spec.Profile{Engine: "vllm", TP: 2, Nodes: 2}
		if m := driverFlagsMissing("vllm", h, two); !slices.Equal(m, []string{"--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless"}) {
			t.Errorf("two-node vllm on 0.7: missing %v, want the mp multi-node flags", m)
		}
		// vLLM reads underscores as dashes, dotted JSON keys as their flag,
		// and (argparse) an unambiguous prefix.
		for _, f := range []string{"--max_model_len", "--compilation-config.level", "--enable-sleep"} {
			if !spec.EngineAcceptsFlag("vllm", h.Flags, f) {
				t.Errorf("vllm should take %s", f)
			}
		}
		// Whole words: --port is there, --port-range is not; --max starts
		// many flags, so argparse would refuse it as ambiguous.
		for _, f := range []string{"--port-range", "--max"} {
			if spec.EngineAcceptsFlag("vllm", h.Flags, f) {
				t.Errorf("vllm should not take %s", f)
			}
		}
	})
	t.Run("vllm summary", func(t *testing.T) {
		h := ParseHelp(readTestdata(t, "vllm-serve-help-summary.txt"))
		if !h.Summary {
			t.Fatal("the summary `vllm serve --help` was not recognised as one")
		}
		if len(h.Flags) != 0 {
			t.Errorf("the summary lists no flag, found %v", h.Flags)
		}
	})
	t.Run("sglang 0.5.8.post1 usage", func(t *testing.T) {
		h := ParseHelp(readTestdata(t, "sglang-0.5.8.post1-launch-server-usage.txt"))
		if h.Summary || h.Truncated {
			t.Fatalf("summary %v truncated %v, want neither", h.Summary, h.Truncated)
		}
		for _, p := range []spec.Profile{{Engine: "sglang", TP: 8, Nodes: 1}, {Engine: "sglang", TP: 8, Nodes: 2}} {
			if m := driverFlagsMissing("sglang", h, p); len(m) != 0 {
				t.Errorf("sglang nodes=%d: %v missing from 0.5.8.post1's usage", p.Nodes, m)
			}
		}
		// SGLang does not read "_" as "-" (its issue 12818: --reasoning_parser
		// is refused), and the usage shows no alias.
		for _, f := range []string{"--reasoning_parser", "--tp-size", "--ss"} {
			if spec.EngineAcceptsFlag("sglang", h.Flags, f) {
				t.Errorf("sglang should not take %s", f)
			}
		}
	})
}

// TestParseHelpTruncated: a help cut short (here mid-line, inside the usage
// block) is recognised, so that its absent flags are not called missing.
func TestParseHelpTruncated(t *testing.T) {
	full := readTestdata(t, "sglang-0.5.8.post1-launch-server-usage.txt")
	cut := full[:strings.Index(full, "--served-model-name")+5]
	h := ParseHelp(cut)
	if !h.Truncated {
		t.Fatal("a help cut in the middle of its usage was not seen as truncated")
	}
	// Cut at a line end but inside an open bracket of the usage.
	lines := strings.SplitAfter(readTestdata(t, "vllm-0.7-serve-help-usage.txt"), "\n")
	var b strings.Builder
	for _, l := range lines[:40] {
		b.WriteString(l)
	}
	b.WriteString("                  [--lora-modules LORA_MODULES [LORA_MODULES ...]\n")
	if h := ParseHelp(b.String()); !h.Truncated {
		t.Error("a usage ending with an open bracket was not seen as truncated")
	}
	if h := ParseHelp(full); h.Truncated {
		t.Error("the whole usage was seen as truncated")
	}
}

// TestParseHelpShapes: option lines as argparse and llama.cpp write them,
// word-wrapped help paragraphs, and flags named in prose.
func TestParseHelpShapes(t *testing.T) {
	text := `usage: vllm serve [model_tag] [options]

options:
  -h, --help            show this help message and exit
  --port PORT           Port number. See also --port-range. (default: 8000)
  --enable-auto-tool-choice, --no-enable-auto-tool-choice
  --tool-call-parser {hermes,mistral} or name registered in --tool-parser-plugin
  --max-num-batched-tokens MAX_NUM_BATCHED_TOKENS
                        Maximum number of tokens; wrapped at a hyphen by the
                        terminal: --max-num-
                        seqs takes precedence.
-c,    --ctx-size N                     size of the prompt context
-np,   --parallel N                     number of server slots
-fa,   --flash-attn [on|off|auto]       set Flash Attention use
--cpu-strict <0|1>                      use strict CPU placement
-Cr,   --cpu-range lo-hi                range of CPUs for affinity
--jinja, --no-jinja                     whether to use jinja template engine
                                        (unless --chat-template-file is set)
`
	h := ParseHelp(text)
	want := []string{"--cpu-range", "--cpu-strict", "--ctx-size", "--enable-auto-tool-choice", "--flash-attn", "--help",
		"--jinja", "--max-num-batched-tokens", "--no-enable-auto-tool-choice", "--no-jinja", "--parallel", "--port",
		"--tool-call-parser", "-Cr", "-c", "-fa", "-h", "-np"}
	if !slices.Equal(h.Flags, want) {
		t.Errorf("flags\n got %v\nwant %v", h.Flags, want)
	}
	for _, f := range []string{"--port-range", "--max-num-", "--max-num", "--chat-template-file"} {
		if slices.Contains(h.Flags, f) {
			t.Errorf("%s taken for a flag", f)
		}
	}
	if h.Summary || h.Truncated {
		t.Errorf("summary %v truncated %v", h.Summary, h.Truncated)
	}
}

// TestRealLlamaServerHelp runs the real llama-server's --help (the build
// make tools-llamacpp makes): every flag the llamacpp driver writes is in
// it, the check passes with its flags recorded, and a flag it lacks is
// found missing as a whole word.
func TestRealLlamaServerHelp(t *testing.T) {
	bin := llamacpp.Server(t)
	r := Run(context.Background(), "llamacpp", bin, 60*time.Second)
	if !r.OK {
		t.Fatalf("check of the real llama-server failed: %s\n%s", r.Error, strings.Join(r.Output, "\n"))
	}
	if r.HelpWarning != "" || r.HelpCommand != "llama-server --help" {
		t.Fatalf("help %q warning %q", r.HelpCommand, r.HelpWarning)
	}
	if len(r.Flags) < 150 {
		t.Fatalf("read %d flags from llama-server --help, want the couple of hundred it lists", len(r.Flags))
	}
	for _, f := range []string{"--model", "-m", "--ctx-size", "-c", "--parallel", "-np", "--jinja", "--no-jinja", "--chat-template", "--metrics", "--alias", "--n-gpu-layers", "-ngl"} {
		if !spec.EngineAcceptsFlag("llamacpp", r.Flags, f) {
			t.Errorf("llama-server --help: %s not found", f)
		}
	}
	// llama.cpp takes no abbreviation: a prefix of a flag is not a flag.
	for _, f := range []string{"--ctx", "--metric", "--no-such-flag", "--port-range"} {
		if spec.EngineAcceptsFlag("llamacpp", r.Flags, f) {
			t.Errorf("llama-server --help: %s taken for a flag", f)
		}
	}
}

// TestHelpFallbackAndSummary: vLLM before 0.10 refuses --help=all (argparse:
// "ignored explicit argument"), so the check reads `serve --help` instead;
// a vLLM whose help is only the summary leaves its flags unchecked with a
// warning rather than calling every flag missing; a help without a flag
// the driver writes on every launch fails the check naming it.
func TestHelpFallbackAndSummary(t *testing.T) {
	usage := filepath.Join(mustAbs(t, "testdata"), "vllm-0.7-serve-help-usage.txt")
	summary := filepath.Join(mustAbs(t, "testdata"), "vllm-serve-help-summary.txt")
	old := script(t, "vllm", `case "$*" in
--version) echo 0.7.3 ;;
"serve --help=all") cat `+usage+` >&2; echo "vllm serve: error: argument -h/--help: ignored explicit argument 'all'" >&2; exit 2 ;;
"serve --help") cat `+usage+` ;;
*) exit 9 ;;
esac
`)
	r := Run(context.Background(), "vllm", old, 10*time.Second)
	if !r.OK || r.HelpWarning != "" || r.HelpCommand != "vllm serve --help" || !slices.Contains(r.Flags, "--max-model-len") {
		t.Errorf("vllm 0.7: ok %v error %q help %q warning %q, %d flags", r.OK, r.Error, r.HelpCommand, r.HelpWarning, len(r.Flags))
	}
	sum := script(t, "vllm", `case "$*" in
--version) echo 0.30.0 ;;
"serve --help=all") echo "vllm serve: error: unrecognized arguments: --help=all" >&2; exit 2 ;;
"serve --help") cat `+summary+` ;;
*) exit 9 ;;
esac
`)
	r = Run(context.Background(), "vllm", sum, 10*time.Second)
	if !r.OK || !strings.Contains(r.HelpWarning, "printed only a summary") || len(r.Flags) != 0 {
		t.Errorf("summary help: ok %v error %q warning %q flags %v", r.OK, r.Error, r.HelpWarning, r.Flags)
	}
	cut := script(t, "vllm", `case "$*" in
--version) echo 0.7.3 ;;
"serve --help=all") head -c 3000 `+usage+` ;;
*) exit 9 ;;
esac
`)
	r = Run(context.Background(), "vllm", cut, 10*time.Second)
	if !r.OK || !strings.Contains(r.HelpWarning, "was cut short") {
		t.Errorf("truncated help: ok %v error %q warning %q", r.OK, r.Error, r.HelpWarning)
	}
	noMetrics := script(t, "llama-server", `case "$*" in
--version) echo "version: 4567 (abcdef0)" ;;
--help) printf '%s\n' \
 '-m,    --model FNAME                    model path' \
 '--host HOST                             ip address to listen' \
 '--port PORT                             port to listen (default: 8080)' \
 '-a,    --alias STRING                   set alias for model name' \
 '-ngl,  --gpu-layers, --n-gpu-layers N   max. number of layers to store in VRAM' \
 '-np,   --parallel N                     number of parallel sequences to decode' \
 '-c,    --ctx-size N                     size of the prompt context' ;;
*) exit 9 ;;
esac
`)
	r = Run(context.Background(), "llamacpp", noMetrics, 10*time.Second)
	want := "llama-server (version: 4567 (abcdef0)) does not take --metrics, which llmgw passes on every launch: `llama-server --help` does not list it"
	if r.OK || r.Error != want {
		t.Errorf("llama-server without --metrics: ok %v error\n got %q\nwant %q", r.OK, r.Error, want)
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
