package spec

import (
	"slices"
	"strings"
)

// LaunchFlag is one flag a profile's engine command line uses.
type LaunchFlag struct {
	// Name is the flag as written on the command line ("--port", "-np").
	Name string
	// FromArgs says the profile's own args carry it; otherwise llmgw's
	// driver adds it.
	FromArgs bool
}

// LaunchFlags returns every flag the command line of p's engine would carry:
// the flags the engine's driver (agent/driver) writes for a replica of p,
// then the flags in p.Args, each once, in that order. The agent checks the
// driver's flags against the engine's own help when a node joins; the
// control plane checks all of them, per node, before a model is stored or
// planned. agent/driver's tests hold the driver's half equal to what the
// drivers build. A driver flag only written in some cases (the context size
// when the model states a context length) is listed whenever it may be.
// The sim engine is llmgw's own and the Ray sidecar is not the engine: no
// flags for either. Values in Args that look like flags (a negative number)
// are not flags.
func LaunchFlags(p Profile) []LaunchFlag {
	var out []LaunchFlag
	seen := map[string]bool{}
	add := func(name string, fromArgs bool) {
		if !seen[name] {
			seen[name] = true
			out = append(out, LaunchFlag{Name: name, FromArgs: fromArgs})
		}
	}
	for _, f := range DriverFlags(p) {
		add(f, false)
	}
	if p.Engine == "sim" {
		return out
	}
	for _, a := range p.Args {
		if name, ok := FlagName(a); ok {
			add(name, true)
		}
	}
	return out
}

// DriverFlags returns the flags the driver of p's engine writes for a
// replica of p (see LaunchFlags).
func DriverFlags(p Profile) []string {
	multi := p.Shards() > 1
	switch p.Engine {
	case "llamacpp":
		f := []string{"--model", "--host", "--port", "--alias", "--metrics", "--n-gpu-layers"}
		if _, set := ArgValue(p.Args, "--parallel", "-np"); !set {
			f = append(f, "--parallel")
		}
		if _, set := ArgValue(p.Args, "--ctx-size", "-c"); !set {
			f = append(f, "--ctx-size")
		}
		return f
	case "vllm":
		f := []string{"--host", "--port", "--served-model-name", "--tensor-parallel-size"}
		if multi {
			f = append(f, "--pipeline-parallel-size")
		}
		f = append(f, "--distributed-executor-backend")
		if _, set := ArgValue(p.Args, "--max-model-len"); !set {
			f = append(f, "--max-model-len")
		}
		if multi && p.LaunchMode != "ray" {
			f = append(f, "--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless")
		}
		return f
	case "sglang":
		f := []string{"--model-path", "--host", "--port", "--served-model-name", "--tensor-parallel-size"}
		if _, set := ArgValue(p.Args, "--context-length"); !set {
			f = append(f, "--context-length")
		}
		if multi {
			f = append(f, "--nnodes", "--node-rank", "--dist-init-addr")
		}
		return f
	}
	return nil
}

// FlagName returns the flag an argument names: "--port" for "--port" and
// "--port=8000", "-np" for "-np". Anything else (a value, a negative
// number, "-" or "--" alone) is not a flag.
func FlagName(arg string) (string, bool) {
	if name, _, ok := strings.Cut(arg, "="); ok {
		arg = name
	}
	rest := strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-")
	if len(rest) == len(arg) || rest == "" {
		return "", false
	}
	c := rest[0]
	if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') {
		return "", false
	}
	return arg, true
}

// EngineAcceptsFlag reports whether an engine whose help lists the flags in
// known (sorted) takes flag, by that engine's own parsing rules: vLLM reads
// "_" as "-" in a flag's name and a dotted "--json-arg.key" as its JSON
// flag; vLLM and SGLang (Python's argparse) take an unambiguous prefix of a
// long flag. llama.cpp takes only the exact flag.
func EngineAcceptsFlag(engine string, known []string, flag string) bool {
	has := func(f string) bool {
		_, ok := slices.BinarySearch(known, f)
		return ok
	}
	if has(flag) {
		return true
	}
	argparse := engine == "vllm" || engine == "sglang"
	if !argparse || !strings.HasPrefix(flag, "--") {
		return false
	}
	if engine == "vllm" {
		if base, _, ok := strings.Cut(flag, "."); ok {
			flag = base
		}
		flag = "--" + strings.ReplaceAll(flag[2:], "_", "-")
		if has(flag) {
			return true
		}
	}
	// argparse's allow_abbrev: a prefix of exactly one long flag.
	i, _ := slices.BinarySearch(known, flag)
	n := 0
	for ; i < len(known) && strings.HasPrefix(known[i], flag); i++ {
		n++
	}
	return n == 1
}
