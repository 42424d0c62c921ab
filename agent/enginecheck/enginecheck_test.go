package enginecheck

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// script writes an executable shell script named name and returns its path.
func script(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRun(t *testing.T) {
	// What llama-server prints when libgomp1 is not installed: the dynamic
	// loader refuses it before main.
	libgomp := script(t, "llama-server", `echo "$0: error while loading shared libraries: libgomp.so.1: cannot open shared object file: No such file or directory" >&2
exit 127
`)
	good := script(t, "llama-server", `echo "ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected" >&2
echo "version: 4567 (abcdef0)"
echo "built with cc (Debian 12.2.0-14) 12.2.0 for x86_64-linux-gnu"
`)
	vllm := script(t, "vllm", `echo "INFO 03-01 12:00:00 [__init__.py:239] Automatically detected platform cuda."
echo "0.29.0"
`)
	// The engine sees its driver's environment: no GPU, unbuffered Python.
	env := script(t, "vllm", `[ "${CUDA_VISIBLE_DEVICES-unset}" = "" ] && [ "$PYTHONUNBUFFERED" = 1 ] || { echo "env: CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset} PYTHONUNBUFFERED=$PYTHONUNBUFFERED"; exit 3; }
echo "0.29.0"
`)
	traceback := script(t, "vllm", `echo "Traceback (most recent call last):"
echo "  File \"/opt/venvs/vllm/bin/vllm\", line 5, in <module>"
echo "ModuleNotFoundError: No module named 'vllm'"
exit 1
`)
	silent := script(t, "llama-server", "exit 2\n")
	notExec := filepath.Join(t.TempDir(), "llama-server")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "llama-server")
	hangs := script(t, "llama-server", "echo starting\nexec sleep 60\n")
	sim := script(t, "llmgw", `[ "$1 $2" = "sim-engine --version" ] || exit 9
echo "llmgw sim-engine version dev"
`)

	tests := []struct {
		name        string
		engine      string
		binary      string
		timeout     time.Duration
		ok          bool
		version     string
		err         string // the whole Error
		errContains string
		output      string // a line Output must hold
	}{
		{name: "missing shared library", engine: "llamacpp", binary: libgomp,
			err:    "llama-server cannot start: libgomp.so.1: cannot open shared object file: No such file or directory",
			output: libgomp + ": error while loading shared libraries: libgomp.so.1: cannot open shared object file: No such file or directory"},
		{name: "llama-server version among backend lines", engine: "llamacpp", binary: good, ok: true, version: "version: 4567 (abcdef0)"},
		{name: "vllm prints the bare version last", engine: "vllm", binary: vllm, ok: true, version: "0.29.0"},
		{name: "driver environment", engine: "vllm", binary: env, ok: true, version: "0.29.0"},
		{name: "python traceback: its last line", engine: "vllm", binary: traceback,
			err: "vllm cannot start: ModuleNotFoundError: No module named 'vllm'", output: "Traceback (most recent call last):"},
		{name: "no output: the exit status", engine: "llamacpp", binary: silent, err: "llama-server cannot start: exit status 2"},
		{name: "not executable", engine: "llamacpp", binary: notExec, err: "llama-server cannot start: permission denied (" + notExec + ")"},
		{name: "not there", engine: "llamacpp", binary: missing, err: "llama-server cannot start: no such file or directory (" + missing + ")"},
		{name: "hangs past the timeout", engine: "llamacpp", binary: hangs, timeout: 300 * time.Millisecond,
			err: "llama-server cannot start: `" + hangs + " --version` did not finish within 300ms", output: "starting"},
		{name: "sim engine", engine: "sim", binary: sim, ok: true, version: "llmgw sim-engine version dev"},
		{name: "no path declared", engine: "llamacpp", binary: "", errContains: "llamacpp cannot be checked: checking llamacpp: no executable declared for it (engines.llamacpp)"},
		{name: "unknown engine", engine: "tgi", binary: "/opt/tgi", errContains: `tgi cannot be checked: engine "tgi": unknown engine`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			r := Run(context.Background(), tt.engine, tt.binary, tt.timeout)
			if r.OK != tt.ok || r.Version != tt.version || r.Engine != tt.engine || r.Path != tt.binary {
				t.Errorf("Run() = ok %v version %q engine %q path %q, want ok %v version %q engine %q path %q (error %q, output %q)",
					r.OK, r.Version, r.Engine, r.Path, tt.ok, tt.version, tt.engine, tt.binary, r.Error, r.Output)
			}
			switch {
			case tt.errContains != "":
				if !strings.Contains(r.Error, tt.errContains) {
					t.Errorf("Error = %q, want it to contain %q", r.Error, tt.errContains)
				}
			case r.Error != tt.err:
				t.Errorf("Error = %q, want %q", r.Error, tt.err)
			}
			if tt.output != "" && !contains(r.Output, tt.output) {
				t.Errorf("Output = %q, want the line %q", r.Output, tt.output)
			}
			if tt.ok && r.Output != nil {
				t.Errorf("Output = %q, want none kept for a check that passed", r.Output)
			}
			if r.Checked.Before(start) || r.Took < 0 || r.Took > time.Since(start) {
				t.Errorf("Checked %v Took %v, want within the call", r.Checked, r.Took)
			}
			if tt.timeout > 0 && time.Since(start) > 10*time.Second {
				t.Errorf("a check with a %s timeout took %s", tt.timeout, time.Since(start))
			}
		})
	}
}

func TestRunKeepsLastLines(t *testing.T) {
	noisy := script(t, "llama-server", `i=0; while [ $i -lt 100 ]; do echo "line $i"; i=$((i+1)); done; exit 1
`)
	r := Run(context.Background(), "llamacpp", noisy, 0)
	if len(r.Output) != OutputLines || r.Output[0] != "line 80" || r.Output[OutputLines-1] != "line 99" {
		t.Fatalf("Output = %q, want lines 80..99", r.Output)
	}
	if r.Error != "llama-server cannot start: line 99" {
		t.Fatalf("Error = %q", r.Error)
	}
}

func TestAll(t *testing.T) {
	ok := script(t, "llama-server", "echo 'version: 1 (a)'\n")
	bad := script(t, "vllm", "echo boom >&2; exit 1\n")
	got := All(context.Background(), map[string]string{"vllm": bad, "llamacpp": ok}, 0)
	if len(got) != 2 || got[0].Engine != "llamacpp" || !got[0].OK || got[1].Engine != "vllm" || got[1].OK || got[1].Error != "vllm cannot start: boom" {
		t.Fatalf("All() = %+v", got)
	}
	p := got[1].ToProto()
	if p.GetEngine() != "vllm" || p.GetPath() != bad || p.GetOk() || p.GetError() != "vllm cannot start: boom" || len(p.GetLastOutput()) != 1 || p.GetCheckedUnixMs() == 0 {
		t.Fatalf("ToProto() = %v", p)
	}
}

func TestName(t *testing.T) {
	tests := []struct{ engine, path, want string }{
		{"llamacpp", "/opt/llama.cpp/llama-server", "llama-server"},
		{"vllm", "/opt/venvs/vllm/bin/vllm", "vllm"},
		{"sglang", "/opt/venvs/sglang/bin/python3", "sglang (python3)"},
		{"sglang", "/usr/local/bin/sglang-serve", "sglang-serve"},
		{"sim", "/usr/local/bin/llmgw", "llmgw sim-engine"},
		{"vllm", "", "vllm"},
	}
	for _, tt := range tests {
		if got := Name(tt.engine, tt.path); got != tt.want {
			t.Errorf("Name(%q, %q) = %q, want %q", tt.engine, tt.path, got, tt.want)
		}
	}
}

func contains(lines []string, want string) bool {
	for _, l := range lines {
		if l == want {
			return true
		}
	}
	return false
}
