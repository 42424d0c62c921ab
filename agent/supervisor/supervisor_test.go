package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/llmgw/agent/driver"
	"github.com/llmgw/llmgw/spec"
)

const helperEnv = "LLMGW_SUPERVISOR_TEST_HELPER"

// TestMain lets the test binary stand in for an engine: with helperEnv set
// it runs a small real program instead of the tests.
func TestMain(m *testing.M) {
	switch mode := os.Getenv(helperEnv); mode {
	case "":
		os.Exit(m.Run())
	default:
		runHelper(mode, os.Args[2:]) // os.Args[1] repeats the mode
	}
}

// runHelper is the engine stand-in:
//
//	http ADDR  serve /health: 503 twice, then 200
//	dial ADDR  connect to ADDR once (exit 1 if refused), then idle
//	idle       print "idle" and idle
func runHelper(mode string, args []string) {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	switch mode {
	case "http":
		var hits atomic.Int32
		http.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) {
			if hits.Add(1) <= 2 {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		l, err := net.Listen("tcp", args[0])
		if err != nil {
			fmt.Println("listen:", err)
			os.Exit(1)
		}
		fmt.Println("listening on", args[0])
		go func() { _ = http.Serve(l, nil) }()
	case "dial":
		c, err := net.Dial("tcp", args[0])
		if err != nil {
			fmt.Println("dial:", err)
			os.Exit(1)
		}
		c.Close()
		fmt.Println("reached sidecar")
	case "idle":
		fmt.Println("idle")
	default:
		fmt.Println("unknown helper mode", mode)
		os.Exit(2)
	}
	<-term
	os.Exit(0)
}

func helper(mode string, args ...string) driver.Command {
	return driver.Command{Path: os.Args[0], Args: append([]string{mode}, args...), Env: []string{helperEnv + "=" + mode}}
}

func shell(script string) driver.Command {
	return driver.Command{Path: "/bin/sh", Args: []string{"-c", script}}
}

// testDriver launches whatever commands a test gives it.
type testDriver struct {
	cmds   []driver.Command
	serves bool
}

func (testDriver) Name() string                                          { return "test" }
func (d testDriver) Commands(driver.ShardSpec) ([]driver.Command, error) { return d.cmds, nil }
func (testDriver) HealthPath() string                                    { return "/health" }
func (d testDriver) ServesHTTP(rank int) bool                            { return d.serves && rank == 0 }
func (testDriver) CheckCommand(string) (driver.Command, error)           { return driver.Command{}, nil }
func (testDriver) HelpCommands(string) []driver.Command                  { return nil }

func newSupervisor(t *testing.T, dir string) *Supervisor {
	t.Helper()
	s := New(slog.New(slog.NewTextHandler(io.Discard, nil)), dir)
	s.driverFor = func(engine string) (driver.Driver, error) {
		if engine == "test" {
			return testDriver{}, nil
		}
		return driver.ForEngine(engine)
	}
	t.Cleanup(func() {
		if err := s.StopAll(2 * time.Second); err != nil {
			t.Errorf("StopAll: %v", err)
		}
	})
	return s
}

func testSpec(t *testing.T, port int, timeout time.Duration) driver.ShardSpec {
	t.Helper()
	return driver.ShardSpec{ShardID: "s1", ReplicaID: "r1", Model: "m", Source: "/m",
		Host: "127.0.0.1", Port: port, Profile: spec.Profile{Engine: "test", StartupTimeout: spec.Duration(timeout)}}
}

func freePort(t *testing.T) int {
	t.Helper()
	p, err := FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitFor polls cond until it holds, failing the test at the deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

func isDone(sh *Shard) bool {
	select {
	case <-sh.Done():
		return true
	default:
		return false
	}
}

func outputHas(sh *Shard, line string) bool {
	return slices.Contains(sh.LastOutput(), line)
}

func TestWaitReady(t *testing.T) {
	tests := []struct {
		name      string
		cmds      func(addr string) []driver.Command
		serves    bool
		timeout   time.Duration
		wantErr   []string
		wantCode  int // exit code expected in the error chain, 0 for none
		wantLines []string
	}{
		{
			name: "engine exits before ready with its last lines",
			cmds: func(string) []driver.Command {
				return []driver.Command{shell("echo one; echo two; echo three >&2; exit 3")}
			},
			serves:    true,
			timeout:   time.Minute,
			wantErr:   []string{"shard s1 (test) exited before ready: exit status 3: one | two | three"},
			wantCode:  3,
			wantLines: []string{"one", "two", "three"},
		},
		{
			name:   "http engine becomes healthy",
			cmds:   func(addr string) []driver.Command { return []driver.Command{helper("http", addr)} },
			serves: true, timeout: time.Minute,
			wantLines: []string{"listening on"},
		},
		{
			name:    "startup timeout",
			cmds:    func(string) []driver.Command { return []driver.Command{shell("echo loading weights; exec sleep 60")} },
			serves:  true,
			timeout: 300 * time.Millisecond,
			wantErr: []string{"shard s1 (test) not ready after 300ms", "connection refused", ": loading weights"},
		},
		{
			name:      "worker is ready once running",
			cmds:      func(string) []driver.Command { return []driver.Command{shell("echo joined; exec sleep 60")} },
			timeout:   time.Minute,
			wantLines: []string{"joined"},
		},
		{
			name:     "worker that exited is not ready",
			cmds:     func(string) []driver.Command { return []driver.Command{shell("echo cannot reach rank 0 >&2; exit 1")} },
			timeout:  time.Minute,
			wantErr:  []string{"shard s1 (test) exited before ready: exit status 1: cannot reach rank 0"},
			wantCode: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sup := newSupervisor(t, t.TempDir())
			port := freePort(t)
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			drv := testDriver{cmds: tt.cmds(addr), serves: tt.serves}
			sh, err := sup.Start(context.Background(), testSpec(t, port, tt.timeout), drv)
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			if !tt.serves && tt.wantCode != 0 {
				waitFor(t, "the worker to exit", func() bool { return isDone(sh) })
			}
			if tt.wantLines != nil && tt.wantErr == nil {
				// Ready first, then the output it printed on the way.
				if err := sh.WaitReady(context.Background()); err != nil {
					t.Fatalf("WaitReady: %v", err)
				}
				waitFor(t, "the engine's output", func() bool {
					out := strings.Join(sh.LastOutput(), "\n")
					return strings.Contains(out, tt.wantLines[0])
				})
				if sh.ExitErr() != nil || isDone(sh) {
					t.Fatalf("ready shard ended: %v", sh.ExitErr())
				}
				return
			}
			err = sh.WaitReady(context.Background())
			if err == nil {
				t.Fatal("WaitReady succeeded, want an error")
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("WaitReady error %q does not contain %q", err, w)
				}
			}
			var exitErr *exec.ExitError
			if tt.wantCode != 0 {
				if !errors.As(err, &exitErr) || exitErr.ExitCode() != tt.wantCode {
					t.Errorf("WaitReady error %v does not wrap exit code %d", err, tt.wantCode)
				}
				waitFor(t, "Done", func() bool { return isDone(sh) })
				if sh.ExitErr() == nil {
					t.Error("ExitErr() = nil after the engine exited")
				}
			}
			if tt.wantLines != nil && !slices.Equal(sh.LastOutput(), tt.wantLines) {
				t.Errorf("LastOutput() = %q, want %q", sh.LastOutput(), tt.wantLines)
			}
		})
	}
}

func TestWaitReadyHonoursContext(t *testing.T) {
	sup := newSupervisor(t, t.TempDir())
	sh, err := sup.Start(context.Background(), testSpec(t, freePort(t), time.Minute),
		testDriver{cmds: []driver.Command{shell("exec sleep 60")}, serves: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := sh.WaitReady(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitReady(cancelled) = %v, want context.Canceled", err)
	}
}

func TestStopKillsProcessGroup(t *testing.T) {
	tests := []struct {
		name   string
		script string
	}{
		{name: "children exit on SIGTERM", script: "sleep 60 & echo child=$!; wait"},
		{name: "children ignoring SIGTERM are killed", script: `trap "" TERM; sleep 60 & echo child=$!; wait`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			sup := newSupervisor(t, dir)
			sh, err := sup.Start(context.Background(), testSpec(t, 0, time.Minute), testDriver{cmds: []driver.Command{shell(tt.script)}})
			if err != nil {
				t.Fatal(err)
			}
			var child int
			waitFor(t, "the grandchild's pid", func() bool {
				for _, l := range sh.LastOutput() {
					if v, ok := strings.CutPrefix(l, "child="); ok {
						child, _ = strconv.Atoi(v)
					}
				}
				return child > 0
			})
			if !processAlive(child) {
				t.Fatalf("grandchild %d is not running before Stop", child)
			}
			if err := sh.Stop(300 * time.Millisecond); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			if processAlive(child) {
				t.Errorf("grandchild %d survived Stop", child)
			}
			if processAlive(sh.PID()) {
				t.Errorf("engine %d survived Stop", sh.PID())
			}
			if !isDone(sh) {
				t.Error("Done not closed after Stop")
			}
			if sh.ExitErr() != nil {
				t.Errorf("ExitErr() = %v after a requested stop, want nil", sh.ExitErr())
			}
			if _, err := os.Stat(filepath.Join(dir, "s1.json")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("state file still present after Stop: %v", err)
			}
			if n := len(sup.List()); n != 0 {
				t.Errorf("List() has %d shards after Stop", n)
			}
		})
	}
}

func TestStartWritesState(t *testing.T) {
	dir := t.TempDir()
	sup := newSupervisor(t, dir)
	port := freePort(t)
	sh, err := sup.Start(context.Background(), testSpec(t, port, time.Minute), testDriver{cmds: []driver.Command{shell("exec sleep 60")}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "s1.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	if st.PID != sh.PID() || st.Port != port || st.Spec.ShardID != "s1" || len(st.Processes) != 1 {
		t.Errorf("state = %+v, want pid %d port %d shard s1 with one process", st, sh.PID(), port)
	}
	if got := sup.List(); len(got) != 1 || got[0] != sh {
		t.Errorf("List() = %v, want the started shard", got)
	}
	if _, err := sup.Start(context.Background(), testSpec(t, port, time.Minute), testDriver{cmds: []driver.Command{shell("exit 0")}}); err == nil ||
		!strings.Contains(err.Error(), "already supervised") {
		t.Errorf("second Start of s1 = %v, want already supervised", err)
	}
}

func TestStartErrors(t *testing.T) {
	tests := []struct {
		name    string
		cmds    []driver.Command
		wantErr []string
	}{
		{name: "missing executable", cmds: []driver.Command{{Path: "llmgw-no-such-engine"}},
			wantErr: []string{"starting shard s1 (test): command 1 of 1", "executable file not found"}},
		{name: "sidecar exits before listening", cmds: []driver.Command{
			{Path: "/bin/sh", Args: []string{"-c", "echo ray is not installed >&2; exit 2"}, WaitAddr: "127.0.0.1:1"},
			shell("exec sleep 60"),
		}, wantErr: []string{"sidecar sh exited before listening on 127.0.0.1:1: exit status 2: ray is not installed"}},
		{name: "no command", cmds: nil, wantErr: []string{"driver built no command"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			sup := newSupervisor(t, dir)
			_, err := sup.Start(context.Background(), testSpec(t, 0, time.Minute), testDriver{cmds: tt.cmds})
			if err == nil {
				t.Fatal("Start succeeded, want an error")
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Start error %q does not contain %q", err, w)
				}
			}
			if len(sup.List()) != 0 {
				t.Error("failed shard is still listed")
			}
			if _, err := os.Stat(filepath.Join(dir, "s1.json")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("state file written for a shard that did not start: %v", err)
			}
		})
	}
}

func TestSidecar(t *testing.T) {
	sup := newSupervisor(t, t.TempDir())
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	side := helper("http", addr)
	side.WaitAddr = addr
	sh, err := sup.Start(context.Background(), testSpec(t, 0, time.Minute),
		testDriver{cmds: []driver.Command{side, helper("dial", addr)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.WaitReady(context.Background()); err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	// The engine dials the sidecar once and exits 1 if it is not there yet.
	waitFor(t, "the engine to reach the sidecar", func() bool { return outputHas(sh, "reached sidecar") })

	// The shard is one unit: losing the sidecar takes the engine down.
	sidecarPID := sh.procs[0].pid
	if err := syscall.Kill(-sidecarPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the shard to end", func() bool { return isDone(sh) })
	if err := sh.ExitErr(); err == nil || !strings.Contains(err.Error(), "sidecar") || !strings.Contains(err.Error(), "killed") {
		t.Errorf("ExitErr() = %v, want the sidecar's kill", err)
	}
	if processAlive(sh.PID()) {
		t.Error("engine outlived its sidecar")
	}
}

// TestRecover: a second supervisor (an agent restart) adopts the shard
// from its state file, with the whole spec, a replica generation given
// after the start (SetReplicaGeneration) included, and drops stale state
// files.
func TestRecover(t *testing.T) {
	dir := t.TempDir()
	first := newSupervisor(t, dir)
	// The state file is the node's one record of the shard: all of it comes
	// back, profile included.
	ss := testSpec(t, 0, time.Minute)
	ss.Name, ss.Nodes, ss.Weight, ss.Args, ss.Env = "p", 1, 3, []string{"--x"}, map[string]string{"A": "1"}
	ss.ModelGeneration, ss.Fabric, ss.GPUIndices = "g1", "ib-a", []int{2}
	started, err := first.Start(context.Background(), ss, testDriver{cmds: []driver.Command{helper("idle")}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the engine's first line", func() bool { return outputHas(started, "idle") })
	// The control plane restamps the running shard: the record keeps it.
	if err := started.SetReplicaGeneration("g2"); err != nil {
		t.Fatal(err)
	}
	ss.ReplicaGeneration = "g2"
	if got := started.Spec().ReplicaGeneration; got != "g2" {
		t.Errorf("ReplicaGeneration after SetReplicaGeneration = %q, want g2", got)
	}

	// A state file whose engine has exited and been reaped.
	dead := exec.Command("/bin/sh", "-c", "exit 0")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	writeState(t, dir, "gone", state{Spec: testSpec(t, 0, 0), Processes: []procState{{PID: dead.Process.Pid, Argv: []string{"/bin/sh", "-c", "exit 0"}}}})
	// A live pid that is some other process: neither argv nor start time match.
	writeState(t, dir, "reused", state{Spec: testSpec(t, 0, 0), Processes: []procState{{PID: os.Getpid(), StartTime: 1, Argv: []string{"vllm", "serve"}}}})
	if err := os.WriteFile(filepath.Join(dir, "broken.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}

	// A second supervisor, as after an agent restart.
	second := newSupervisor(t, dir)
	shards, err := second.Recover()
	if err == nil || !strings.Contains(err.Error(), "broken.json") {
		t.Errorf("Recover error = %v, want one naming broken.json", err)
	}
	if len(shards) != 1 {
		t.Fatalf("Recover adopted %d shards, want 1", len(shards))
	}
	sh := shards[0]
	if sh.PID() != started.PID() || !sh.Adopted() || sh.Spec().ShardID != "s1" {
		t.Errorf("adopted pid %d (adopted=%v, shard %q), want pid %d shard s1", sh.PID(), sh.Adopted(), sh.Spec().ShardID, started.PID())
	}
	if !reflect.DeepEqual(sh.Spec(), ss) {
		t.Errorf("adopted spec =\n%+v\nwant the one started\n%+v", sh.Spec(), ss)
	}
	if !outputHas(sh, "idle") {
		t.Errorf("adopted LastOutput() = %q, want the engine's line", sh.LastOutput())
	}
	if got, ok := second.Get("s1"); !ok || got != sh {
		t.Error("adopted shard is not supervised")
	}
	for _, stale := range []string{"gone", "reused"} {
		if _, err := os.Stat(filepath.Join(dir, stale+".json")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stale state %s.json not removed: %v", stale, err)
		}
	}
	if err := sh.WaitReady(context.Background()); err != nil {
		t.Errorf("WaitReady on adopted worker: %v", err)
	}

	// Stopping through the adopting supervisor ends the process.
	if err := sh.Stop(2 * time.Second); err != nil {
		t.Fatalf("Stop adopted: %v", err)
	}
	if processAlive(started.PID()) {
		t.Error("adopted engine survived Stop")
	}
	waitFor(t, "the adopted shard's Done", func() bool { return isDone(sh) })
	if _, err := os.Stat(filepath.Join(dir, "s1.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file still present after Stop: %v", err)
	}
}

func TestAdoptedShardNoticesExit(t *testing.T) {
	dir := t.TempDir()
	first := newSupervisor(t, dir)
	started, err := first.Start(context.Background(), testSpec(t, 0, time.Minute), testDriver{cmds: []driver.Command{helper("idle")}})
	if err != nil {
		t.Fatal(err)
	}
	shards, err := newSupervisor(t, dir).Recover()
	if err != nil || len(shards) != 1 {
		t.Fatalf("Recover = %d shards, %v", len(shards), err)
	}
	if err := syscall.Kill(started.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the adopted shard to notice the exit", func() bool { return isDone(shards[0]) })
	if err := shards[0].ExitErr(); err == nil || !strings.Contains(err.Error(), "exit status unknown") {
		t.Errorf("ExitErr() = %v, want an unknown status", err)
	}
}

func writeState(t *testing.T, dir, id string, st state) {
	t.Helper()
	st.Spec.ShardID = id
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, id+".json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestLastOutput(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "s1.log")
	var b strings.Builder
	b.WriteString("previous run\n")
	offset := int64(b.Len())
	for i := range 60 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	b.WriteString("loading 10%\rloading 100%\n")
	if err := os.WriteFile(logPath, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		offset    int64
		wantLen   int
		wantFirst string
		wantLast  string
	}{
		{name: "keeps the last 50 lines", offset: offset, wantLen: 50, wantFirst: "line 11", wantLast: "loading 100%"},
		{name: "starts at this run's offset", offset: int64(len(b.String())) - int64(len("line 59\nloading 10%\rloading 100%\n")), wantLen: 2, wantFirst: "line 59", wantLast: "loading 100%"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sh := &Shard{logPath: logPath, logOffset: tt.offset}
			got := sh.LastOutput()
			if len(got) != tt.wantLen || got[0] != tt.wantFirst || got[len(got)-1] != tt.wantLast {
				t.Errorf("LastOutput() = %d lines %q … %q, want %d lines %q … %q", len(got), first(got), got[len(got)-1], tt.wantLen, tt.wantFirst, tt.wantLast)
			}
		})
	}
}

func TestFreePort(t *testing.T) {
	port, err := FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("port %d from FreePort cannot be bound: %v", port, err)
	}
	l.Close()
	if _, err := FreePort("203.0.113.1"); err == nil || !strings.Contains(err.Error(), `"203.0.113.1"`) {
		t.Errorf("FreePort(unassigned address) = %v, want an error naming it", err)
	}
}

// TestRecoverRecordOfAnEarlierBuild: an agent upgraded while its engines run
// finds state files whose profile fields stand flat in "spec" (the layout
// before the profile became one object); it adopts those engines instead
// of leaving them running, unsupervised, on their GPUs.
func TestRecoverRecordOfAnEarlierBuild(t *testing.T) {
	dir := t.TempDir()
	first := newSupervisor(t, dir)
	ss := testSpec(t, 0, time.Minute)
	ss.TP, ss.Nodes, ss.Args, ss.Env = 2, 1, []string{"--x"}, map[string]string{"A": "1"}
	started, err := first.Start(context.Background(), ss, testDriver{cmds: []driver.Command{helper("idle")}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the engine's first line", func() bool { return outputHas(started, "idle") })

	path := filepath.Join(dir, "s1.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	sp := rec["spec"].(map[string]any)
	delete(sp, "profile")
	sp["engine"], sp["tp"], sp["world_size"], sp["nodes"] = "test", 2, 1, 1
	sp["args"], sp["env"], sp["startup_timeout"] = []string{"--x"}, map[string]string{"A": "1"}, int64(time.Minute)
	if b, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}

	shards, err := newSupervisor(t, dir).Recover()
	if err != nil || len(shards) != 1 {
		t.Fatalf("Recover = %d shards, %v; want the engine adopted", len(shards), err)
	}
	got := shards[0].Spec()
	if shards[0].PID() != started.PID() || got.Engine != "test" || got.TP != 2 || got.Nodes != 1 ||
		!reflect.DeepEqual(got.Args, ss.Args) || !reflect.DeepEqual(got.Env, ss.Env) || got.StartupTimeout != ss.StartupTimeout {
		t.Errorf("adopted pid %d spec %+v; want pid %d and the earlier record's profile %+v", shards[0].PID(), got, started.PID(), ss.Profile)
	}
	if err := shards[0].Stop(2 * time.Second); err != nil {
		t.Fatalf("Stop adopted: %v", err)
	}
}

// TestSetReplicaGenerationWhileStopping: a restamp that reaches a shard
// once its Stop has begun leaves the state file alone, so it cannot
// rewrite it after Stop removed it; once stopped, it is a no-op too.
func TestSetReplicaGenerationWhileStopping(t *testing.T) {
	dir := t.TempDir()
	sup := newSupervisor(t, dir)
	ss := testSpec(t, 0, time.Minute)
	ss.ReplicaGeneration = "g1"
	sh, err := sup.Start(context.Background(), ss, testDriver{cmds: []driver.Command{helper("idle")}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the engine's first line", func() bool { return outputHas(sh, "idle") })
	path := filepath.Join(dir, ss.ShardID+".json")
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Stop has begun (it marks the shard first) but not yet removed the file.
	sh.mu.Lock()
	sh.stopping = true
	sh.mu.Unlock()
	if err := sh.SetReplicaGeneration("g2"); err != nil {
		t.Fatalf("SetReplicaGeneration while stopping: %v", err)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Errorf("state file rewritten while stopping:\n%s", after)
	}
	if err := sh.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := sh.SetReplicaGeneration("g3"); err != nil {
		t.Errorf("SetReplicaGeneration after Stop: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file after Stop and a restamp: %v, want it gone", err)
	}
}

// TestSetReplicaGenerationRacingStop: restamps arriving without pause
// while the shard is stopped (a Restamp racing StopShard) never bring its
// state file back once Stop removed it, and none of them fails: each
// either lands before Stop began or does nothing. Run with -race.
func TestSetReplicaGenerationRacingStop(t *testing.T) {
	dir := t.TempDir()
	sup := newSupervisor(t, dir)
	for round := range 4 {
		ss := testSpec(t, 0, time.Minute)
		ss.ShardID = fmt.Sprintf("s%d", round)
		sh, err := sup.Start(context.Background(), ss, testDriver{cmds: []driver.Command{helper("idle")}})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the engine's first line", func() bool { return outputHas(sh, "idle") })
		stop := make(chan struct{})
		restamped := make(chan error, 1)
		go func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					restamped <- nil
					return
				default:
				}
				if err := sh.SetReplicaGeneration(fmt.Sprintf("g%d", i)); err != nil {
					restamped <- fmt.Errorf("restamp %d: %w", i, err)
					return
				}
			}
		}()
		if err := sh.Stop(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		// A restamp in flight when Stop returned ends now; one more after.
		close(stop)
		if err := <-restamped; err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if err := sh.SetReplicaGeneration("after"); err != nil {
			t.Fatalf("round %d: a restamp after Stop: %v", round, err)
		}
		if _, err := os.Stat(filepath.Join(dir, ss.ShardID+".json")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("round %d: the state file after Stop and racing restamps: %v, want it gone", round, err)
		}
		if _, err := os.Stat(filepath.Join(dir, ss.ShardID+".json.tmp")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("round %d: a restamp's temporary file is left: %v", round, err)
		}
	}
}
