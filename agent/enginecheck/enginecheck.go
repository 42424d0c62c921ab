// Package enginecheck answers, for each engine a node declares, whether it
// can start at all: it executes the driver's check command (the engine's
// version flag) bounded by a timeout and keeps the version line or, on
// failure, why and the last lines of output. An engine can be present,
// executable and still unable to start (llama-server without libgomp1);
// without this check that shows only once a replica is placed on the node.
package enginecheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/llmgw/llmgw/agent/driver"
	agentv1 "github.com/llmgw/llmgw/api/agentv1"
)

// DefaultTimeout bounds one check. `vllm --version` imports torch, which
// takes seconds on a cold page cache.
const DefaultTimeout = 60 * time.Second

// Output kept from a failed check.
const (
	// OutputLines is how many of the last lines a failed check keeps.
	OutputLines = 20
	// outputTailBytes bounds the output held in memory.
	outputTailBytes = 32 << 10
	// waitDelay bounds the wait for output pipes after the check exited or
	// was killed (a child that kept them open).
	waitDelay = 2 * time.Second
)

// Result is one engine's check.
type Result struct {
	// Engine is the engine's name (sim, llamacpp, vllm, sglang).
	Engine string
	// Path is the executable that was run.
	Path string
	// OK reports whether it ran and exited 0.
	OK bool
	// Version is the output line naming the version, when OK.
	Version string
	// Error says, in one line naming the executable, why it cannot start:
	// "llama-server cannot start: libgomp.so.1: cannot open shared object
	// file: No such file or directory". Empty when OK.
	Error string
	// Output holds the last lines of its output when it failed.
	Output []string
	// Checked is when the check started; Took how long it ran.
	Checked time.Time
	Took    time.Duration
	// Flags are the flags the engine's help lists (ParseHelp), sorted;
	// HelpCommand the command whose output they were read from; and
	// HelpWarning, when not empty, why they cannot be trusted (the output
	// was cut short or a summary, or no help could be had), in which case
	// nothing is called missing from them.
	Flags       []string
	HelpCommand string
	HelpWarning string
}

// ToProto converts the result for the agent protocol.
func (r Result) ToProto() *agentv1.EngineCheck {
	return &agentv1.EngineCheck{
		Engine: r.Engine, Path: r.Path, Ok: r.OK, Version: r.Version, Error: r.Error,
		LastOutput: r.Output, CheckedUnixMs: r.Checked.UnixMilli(), DurationMs: r.Took.Milliseconds(),
		Flags: r.Flags, HelpCommand: r.HelpCommand, HelpWarning: r.HelpWarning,
	}
}

// Name is how messages call the engine: its executable's name
// ("llama-server"), "llmgw sim-engine" for the sim engine, and the engine
// with its interpreter ("sglang (python3)") for an engine run by Python.
func Name(engine, path string) string {
	base := filepath.Base(path)
	switch {
	case path == "":
		return engine
	case engine == driver.EngineSim:
		return base + " sim-engine"
	case strings.HasPrefix(base, "python"):
		return engine + " (" + base + ")"
	}
	return base
}

// Run checks one engine: it builds the driver's check command for binary
// and executes it, bounded by timeout (DefaultTimeout when 0).
func Run(ctx context.Context, engine, binary string, timeout time.Duration) Result {
	start := time.Now()
	r := Result{Engine: engine, Path: binary, Checked: start}
	d, err := driver.ForEngine(engine)
	if err == nil {
		var cmd driver.Command
		if cmd, err = d.CheckCommand(binary); err == nil {
			r = run(ctx, engine, cmd, timeout)
			if r.OK {
				readHelp(ctx, &r, d.HelpCommands(binary), timeout)
				r.Took = time.Since(start)
			}
			return r
		}
	}
	r.Error = Name(engine, binary) + " cannot be checked: " + err.Error()
	r.Took = time.Since(start)
	return r
}

// run executes cmd with the agent's environment plus cmd.Env.
func run(ctx context.Context, engine string, cmd driver.Command, timeout time.Duration) Result {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	r := Result{Engine: engine, Path: cmd.Path, Checked: time.Now()}
	out := &tailBuffer{max: outputTailBytes}
	err := runGroup(ctx, cmd, timeout, out)
	r.Took = time.Since(r.Checked)
	lines := outputLines(out.Bytes())
	name := Name(engine, cmd.Path)
	switch {
	case err == nil:
		r.OK = true
		r.Version = versionLine(lines)
		return r
	case errors.Is(err, context.DeadlineExceeded):
		r.Error = fmt.Sprintf("%s cannot start: `%s` did not finish within %s", name, commandLine(cmd), timeout)
	default:
		r.Error = name + " cannot start: " + why(err, lines)
	}
	if len(lines) > OutputLines {
		lines = lines[len(lines)-OutputLines:]
	}
	r.Output = lines
	return r
}

// All checks every engine in engines (name to executable) at once and
// returns the results sorted by engine name.
func All(ctx context.Context, engines map[string]string, timeout time.Duration) []Result {
	out := make([]Result, len(engines))
	names := make([]string, 0, len(engines))
	for e := range engines {
		names = append(names, e)
	}
	sort.Strings(names)
	var wg sync.WaitGroup
	for i, e := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = Run(ctx, e, engines[e], timeout)
		}()
	}
	wg.Wait()
	return out
}

// loaderPrefix starts the dynamic loader's complaint about a missing
// library: "llama-server: error while loading shared libraries: libgomp.so.1:
// cannot open shared object file: No such file or directory".
const loaderPrefix = "error while loading shared libraries: "

// why says in one line why a check failed: the dynamic loader's complaint
// without its preamble, else the last line of output, else how it exited.
func why(err error, lines []string) string {
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		// It never ran: not found, not executable, not a valid binary.
		var pathErr *os.PathError
		if errors.As(err, &pathErr) {
			return pathErr.Err.Error() + " (" + pathErr.Path + ")"
		}
		return err.Error()
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if _, after, ok := strings.Cut(lines[i], loaderPrefix); ok {
			return after
		}
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return l
		}
	}
	return exit.String()
}

// versionLine picks the line that names the version: the first one
// mentioning "version" (llama-server prints backend lines around its
// "version: 4567 (abcdef0)"), else the last non-empty one (vLLM logs, then
// prints the bare version).
func versionLine(lines []string) string {
	for _, l := range lines {
		if strings.Contains(strings.ToLower(l), "version") {
			return strings.TrimSpace(l)
		}
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return l
		}
	}
	return ""
}

// outputLines splits output into lines, reducing carriage-return progress
// bars to their final state.
func outputLines(b []byte) []string {
	b = bytes.TrimRight(b, "\n")
	if len(b) == 0 {
		return nil
	}
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		l = strings.TrimRight(l, "\r")
		if j := strings.LastIndexByte(l, '\r'); j >= 0 {
			l = l[j+1:]
		}
		lines[i] = l
	}
	return lines
}

func commandLine(c driver.Command) string {
	return strings.Join(append([]string{c.Path}, c.Args...), " ")
}

// runGroup runs cmd with the agent's environment plus cmd.Env, its output
// (stdout and stderr) into out, in its own process group so that a timeout
// (timeout, or DefaultTimeout when not above 0) kills what it started too.
// When the context ended the run, its error is returned.
func runGroup(ctx context.Context, cmd driver.Command, timeout time.Duration, out io.Writer) error {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := exec.CommandContext(ctx, cmd.Path, cmd.Args...)
	c.Env = append(os.Environ(), cmd.Env...)
	c.Stdout, c.Stderr = out, out
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	c.WaitDelay = waitDelay
	err := c.Run()
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	return err
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
	cut bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.cut = true
	}
	return len(p), nil
}

// Bytes returns what was kept; when the beginning was cut, from the first
// whole line on.
func (t *tailBuffer) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	if t.cut {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return bytes.Clone(b)
}
