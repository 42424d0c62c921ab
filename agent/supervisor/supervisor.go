// Package supervisor runs engine shards as processes: it launches the
// commands a driver builds, watches them, tells when a shard is ready, stops
// it, and re-attaches to shards a previous agent left running.
//
// Engines must outlive an agent restart (they are adopted back), so every
// process runs in its own process group, is never tied to the agent's
// lifetime, and writes its output straight to a log file rather than
// through a pipe the agent holds: a pipe would break, and the engine with
// it, the moment the agent exits.
//
// A shard can be several programs (vLLM under Ray is `ray start` then `vllm
// serve`). Every command but the last is a sidecar: it is started in order
// and kept running for the shard's whole life; when it declares a WaitAddr
// the next command starts only once that address accepts connections. The
// last command is the engine. The shard is one unit: when any of its
// processes exits on its own, the others are stopped too.
package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/llmgw/llmgw/agent/driver"
)

// DefaultStartupTimeout applies when a spec gives no StartupTimeout.
const DefaultStartupTimeout = 10 * time.Minute

// Tuning of the supervisor's waits.
const (
	// teardownGrace is how long the rest of a shard gets after SIGTERM,
	// once one of its processes exited on its own, before SIGKILL.
	teardownGrace = 10 * time.Second
	// killWait bounds the wait for processes to vanish after SIGKILL.
	killWait = 10 * time.Second
	// adoptedPoll is how often an adopted process (not the agent's child,
	// so it cannot be waited for) is checked for liveness.
	adoptedPoll = 500 * time.Millisecond
	// errorTailLines is how many of the engine's last lines an error carries.
	errorTailLines = 5
)

// Supervisor runs shards and keeps their state files in one directory.
type Supervisor struct {
	logger   *slog.Logger
	stateDir string
	// driverFor finds the driver of a recovered shard's engine.
	driverFor func(engine string) (driver.Driver, error)

	mu     sync.Mutex
	shards map[string]*Shard
}

// New returns a supervisor that keeps its state and log files in stateDir.
// logger is used as given; the caller names the component.
func New(logger *slog.Logger, stateDir string) *Supervisor {
	return &Supervisor{
		logger:    logger,
		stateDir:  stateDir,
		driverFor: driver.ForEngine,
		shards:    map[string]*Shard{},
	}
}

// Shard is one running (or exited, not yet stopped) shard.
type Shard struct {
	sup       *Supervisor
	spec      driver.ShardSpec
	drv       driver.Driver
	logger    *slog.Logger
	logPath   string
	logOffset int64 // where this run's output starts in the log file
	statePath string
	procs     []*proc // in start order; the last is the engine; fixed once launched closes
	adopted   bool
	launched  chan struct{} // closed when launch has started (or given up on) every command
	done      chan struct{}

	mu       sync.Mutex
	exitErr  error
	exited   bool // some process ended
	stopping bool
}

// proc is one process of a shard.
type proc struct {
	argv      []string
	pid       int
	startTime uint64
	sidecar   bool
	done      chan struct{}
	err       error // the wait result, set before done closes
}

// state is the content of <shard_id>.json.
type state struct {
	Spec      driver.ShardSpec `json:"spec"`
	PID       int              `json:"pid"`
	Port      int              `json:"port"`
	LogOffset int64            `json:"log_offset"`
	StartedAt time.Time        `json:"started_at"`
	Processes []procState      `json:"processes"`
}

type procState struct {
	PID       int      `json:"pid"`
	StartTime uint64   `json:"start_time,omitempty"`
	Argv      []string `json:"argv"`
	Sidecar   bool     `json:"sidecar,omitempty"`
}

// Start launches the shard's commands. ctx bounds only the launch (waiting
// for a sidecar's address); the processes themselves outlive it.
func (s *Supervisor) Start(ctx context.Context, spec driver.ShardSpec, drv driver.Driver) (*Shard, error) {
	cmds, err := drv.Commands(spec)
	if err != nil {
		return nil, err
	}
	if len(cmds) == 0 {
		return nil, fmt.Errorf("starting shard %s (%s): driver built no command", spec.ShardID, drv.Name())
	}
	if strings.ContainsAny(spec.ShardID, `/\`) || spec.ShardID == "." || spec.ShardID == ".." {
		return nil, fmt.Errorf("starting shard %q: shard_id must not contain a path separator", spec.ShardID)
	}
	if err := os.MkdirAll(s.stateDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating state directory %s: %w", s.stateDir, err)
	}
	sh := &Shard{
		sup:       s,
		spec:      spec,
		drv:       drv,
		logger:    s.logger.With("shard", spec.ShardID, "engine", drv.Name()),
		logPath:   filepath.Join(s.stateDir, spec.ShardID+".log"),
		statePath: filepath.Join(s.stateDir, spec.ShardID+".json"),
		launched:  make(chan struct{}),
		done:      make(chan struct{}),
	}
	s.mu.Lock()
	if _, dup := s.shards[spec.ShardID]; dup {
		s.mu.Unlock()
		return nil, fmt.Errorf("starting shard %s: a shard with this id is already supervised", spec.ShardID)
	}
	s.shards[spec.ShardID] = sh
	s.mu.Unlock()

	if err := sh.launch(ctx, cmds); err != nil {
		s.forget(sh)
		return nil, err
	}
	if err := sh.writeState(); err != nil {
		_ = sh.Stop(teardownGrace)
		return nil, err
	}
	sh.logger.Info("shard started", "pid", sh.PID(), "port", spec.Port, "log", sh.logPath)
	return sh, nil
}

// launch starts every command in order, waiting for sidecars' addresses.
func (sh *Shard) launch(ctx context.Context, cmds []driver.Command) error {
	logFile, err := os.OpenFile(sh.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening engine log %s: %w", sh.logPath, err)
	}
	defer logFile.Close() // the children hold their own descriptors
	defer close(sh.launched)
	if fi, err := logFile.Stat(); err == nil {
		sh.logOffset = fi.Size()
	}
	sh.procs = make([]*proc, 0, len(cmds))
	var wg sync.WaitGroup
	fail := func(err error) error {
		sh.mu.Lock()
		sh.stopping = true
		sh.mu.Unlock()
		sh.signalAll(syscall.SIGKILL)
		wg.Wait()
		close(sh.done)
		return err
	}
	for i, c := range cmds {
		cmd := exec.Command(c.Path, c.Args...)
		cmd.Env = append(os.Environ(), c.Env...)
		cmd.Dir = sh.spec.WorkDir
		cmd.Stdout = logFile
		cmd.Stderr = logFile
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			return fail(fmt.Errorf("starting shard %s (%s): command %d of %d: %w", sh.spec.ShardID, sh.drv.Name(), i+1, len(cmds), err))
		}
		p := &proc{
			argv:      cmd.Args,
			pid:       cmd.Process.Pid,
			startTime: processStartTime(cmd.Process.Pid),
			sidecar:   i < len(cmds)-1,
			done:      make(chan struct{}),
		}
		sh.procs = append(sh.procs, p)
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.err = cmd.Wait()
			close(p.done)
			sh.processEnded(p)
		}()
		if c.WaitAddr != "" && p.sidecar {
			if err := sh.waitAddr(ctx, p, c.WaitAddr); err != nil {
				return fail(err)
			}
		}
	}
	go func() {
		wg.Wait()
		close(sh.done)
	}()
	return nil
}

// waitAddr waits until addr accepts TCP connections, the sidecar exits, the
// startup timeout passes or ctx ends.
func (sh *Shard) waitAddr(ctx context.Context, p *proc, addr string) error {
	deadline := time.Now().Add(sh.startupTimeout())
	for delay := 50 * time.Millisecond; ; delay = min(delay*2, time.Second) {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return sh.withOutput(fmt.Errorf("shard %s (%s): sidecar %s not listening on %s after %s: %w",
				sh.spec.ShardID, sh.drv.Name(), filepath.Base(p.argv[0]), addr, sh.startupTimeout(), err))
		}
		select {
		case <-p.done:
			return sh.withOutput(fmt.Errorf("shard %s (%s): sidecar %s exited before listening on %s: %w",
				sh.spec.ShardID, sh.drv.Name(), filepath.Base(p.argv[0]), addr, exitError(p.err)))
		case <-ctx.Done():
			return fmt.Errorf("shard %s (%s): waiting for sidecar on %s: %w", sh.spec.ShardID, sh.drv.Name(), addr, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// processEnded records the first exit and, unless the shard is being
// stopped, tears the rest of the shard down: a shard is one unit, and an
// orphaned worker would keep holding its GPUs.
func (sh *Shard) processEnded(p *proc) {
	sh.mu.Lock()
	first := !sh.exited
	sh.exited = true
	stopping := sh.stopping
	if first && !stopping {
		err := exitError(p.err)
		if p.sidecar {
			err = fmt.Errorf("sidecar %s: %w", filepath.Base(p.argv[0]), err)
		}
		sh.exitErr = err
	}
	sh.mu.Unlock()
	if !first || stopping {
		return
	}
	sh.logger.Warn("shard process exited", "pid", p.pid, "sidecar", p.sidecar, "err", exitError(p.err))
	go sh.teardown()
}

// teardown stops what is left of a shard after one of its processes ended.
func (sh *Shard) teardown() {
	<-sh.launched
	sh.signalAll(syscall.SIGTERM)
	if !sh.waitGone(time.Now().Add(teardownGrace)) {
		sh.signalAll(syscall.SIGKILL)
	}
}

// exitError makes a clean exit visible: for a shard, exiting at all is the
// failure.
func exitError(err error) error {
	if err == nil {
		return errors.New("exit status 0")
	}
	return err
}

// signalAll signals every process group of the shard, the engine first.
func (sh *Shard) signalAll(sig syscall.Signal) {
	for i := len(sh.procs) - 1; i >= 0; i-- {
		p := sh.procs[i]
		if !groupAlive(p.pid) && !processAlive(p.pid) {
			continue
		}
		if err := syscall.Kill(-p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			sh.logger.Warn("signalling process group", "pgid", p.pid, "signal", sig.String(), "err", err)
		}
	}
}

// waitGone waits until every process has been reaped and every process
// group is empty, or deadline passes.
func (sh *Shard) waitGone(deadline time.Time) bool {
	for {
		gone := true
		select {
		case <-sh.done:
		default:
			gone = false
		}
		for _, p := range sh.procs {
			if gone && groupAlive(p.pid) {
				gone = false
			}
		}
		if gone {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond) // polling the kernel, not waiting for an event
	}
}

// Stop sends SIGTERM to each of the shard's process groups, SIGKILL after
// timeout, waits for them to be gone, removes the state file and forgets
// the shard. Stopping a shard that already exited cleans up the same way.
func (sh *Shard) Stop(timeout time.Duration) error {
	sh.mu.Lock()
	sh.stopping = true
	sh.mu.Unlock()
	sh.signalAll(syscall.SIGTERM)
	if !sh.waitGone(time.Now().Add(timeout)) {
		sh.logger.Warn("shard ignored SIGTERM, killing", "timeout", timeout)
		sh.signalAll(syscall.SIGKILL)
		if !sh.waitGone(time.Now().Add(killWait)) {
			return fmt.Errorf("stopping shard %s (%s): processes still present %s after SIGKILL", sh.spec.ShardID, sh.drv.Name(), killWait)
		}
	}
	if err := os.Remove(sh.statePath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing shard state %s: %w", sh.statePath, err)
	}
	sh.sup.forget(sh)
	sh.logger.Info("shard stopped")
	return nil
}

// WaitReady returns once the shard is ready. A rank that serves HTTP is
// ready when HealthPath answers 200. A rank that serves nothing is ready as
// soon as its processes run: rank 0 serves only after every worker has
// joined its rendezvous, so the replica's readiness is carried by rank 0's
// health check. It fails early, with the exit status and the engine's last
// lines, when the shard exits, and fails when spec.StartupTimeout passes.
func (sh *Shard) WaitReady(ctx context.Context) error {
	if !sh.drv.ServesHTTP(sh.spec.Rank) {
		select {
		case <-sh.done:
			return sh.exitedBeforeReady()
		default:
		}
		if sh.ExitErr() != nil {
			return sh.exitedBeforeReady()
		}
		return nil
	}
	timeout := sh.startupTimeout()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	url := "http://" + net.JoinHostPort(probeHost(sh.spec.Host), strconv.Itoa(sh.spec.Port)) + sh.drv.HealthPath()
	client := probeClient()
	defer client.CloseIdleConnections()
	var lastErr error
	for delay := 50 * time.Millisecond; ; delay = min(delay*3/2, time.Second) {
		lastErr = probe(ctx, client, url)
		if lastErr == nil {
			return nil
		}
		if sh.ExitErr() != nil { // a process ended; the rest is being torn down
			return sh.exitedBeforeReady()
		}
		select {
		case <-sh.done:
			return sh.exitedBeforeReady()
		case <-deadline.C:
			return sh.withOutput(fmt.Errorf("shard %s (%s) not ready after %s: %w", sh.spec.ShardID, sh.drv.Name(), timeout, lastErr))
		case <-ctx.Done():
			return fmt.Errorf("waiting for shard %s (%s) to be ready: %w", sh.spec.ShardID, sh.drv.Name(), ctx.Err())
		case <-time.After(delay):
		}
	}
}

func (sh *Shard) exitedBeforeReady() error {
	err := sh.ExitErr()
	if err == nil {
		err = errors.New("stopped")
	}
	return sh.withOutput(fmt.Errorf("shard %s (%s) exited before ready: %w", sh.spec.ShardID, sh.drv.Name(), err))
}

// outputError carries the engine's last lines after the error they explain.
type outputError struct {
	err  error
	tail []string
}

func (e *outputError) Error() string {
	return e.err.Error() + ": " + strings.Join(e.tail, " | ")
}

func (e *outputError) Unwrap() error { return e.err }

// withOutput appends the engine's last lines to err, when there are any.
func (sh *Shard) withOutput(err error) error {
	lines := sh.LastOutput()
	var tail []string
	for _, l := range lines {
		if strings.TrimSpace(l) != "" {
			tail = append(tail, l)
		}
	}
	if len(tail) == 0 {
		return err
	}
	if len(tail) > errorTailLines {
		tail = tail[len(tail)-errorTailLines:]
	}
	return &outputError{err: err, tail: tail}
}

func (sh *Shard) startupTimeout() time.Duration {
	if sh.spec.StartupTimeout > 0 {
		return sh.spec.StartupTimeout.Std()
	}
	return DefaultStartupTimeout
}

// Done is closed once every process of the shard has ended.
func (sh *Shard) Done() <-chan struct{} { return sh.done }

// ExitErr is why the shard ended: the first process to exit on its own and
// its status (a clean exit reads "exit status 0": an engine is not meant to
// end). It is nil while the shard runs, and after Stop it is nil unless the
// shard had already failed.
func (sh *Shard) ExitErr() error {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.exitErr
}

// PID is the engine's (last command's) process id, also its process group.
func (sh *Shard) PID() int { return sh.procs[len(sh.procs)-1].pid }

// Spec is the specification the shard was started with (and the replica
// generation it was last given, SetReplicaGeneration).
func (sh *Shard) Spec() driver.ShardSpec {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.spec
}

// SetReplicaGeneration records generation as the shard's
// ReplicaGeneration, in memory and in its state file (rewritten atomically,
// the rest as it was): the control plane found the running engine current
// under it. For a shard being stopped (Stop, or a start that failed) it
// does nothing: Stop removes the state file, which a rewrite racing with
// it would bring back for a shard that no longer runs.
func (sh *Shard) SetReplicaGeneration(generation string) error {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.stopping {
		return nil
	}
	sh.spec.ReplicaGeneration = generation
	b, err := os.ReadFile(sh.statePath)
	if err != nil {
		return fmt.Errorf("reading shard state: %w", err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("reading shard state %s: %w", sh.statePath, err)
	}
	st.Spec.ReplicaGeneration = generation
	return sh.saveState(st)
}

// Adopted reports whether the shard was re-attached by Recover rather than
// started by this supervisor.
func (sh *Shard) Adopted() bool { return sh.adopted }

// LogPath is the file the shard's output goes to.
func (sh *Shard) LogPath() string { return sh.logPath }

// writeState records the shard in <shard_id>.json, atomically.
func (sh *Shard) writeState() error {
	st := state{
		Spec:      sh.spec,
		PID:       sh.PID(),
		Port:      sh.spec.Port,
		LogOffset: sh.logOffset,
		StartedAt: time.Now().UTC(),
	}
	for _, p := range sh.procs {
		st.Processes = append(st.Processes, procState{PID: p.pid, StartTime: p.startTime, Argv: p.argv, Sidecar: p.sidecar})
	}
	return sh.saveState(st)
}

// saveState writes st to <shard_id>.json, atomically (a temporary file
// renamed over it).
func (sh *Shard) saveState(st state) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding shard state %s: %w", sh.statePath, err)
	}
	tmp := sh.statePath + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("writing shard state %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, sh.statePath); err != nil {
		return fmt.Errorf("writing shard state %s: %w", sh.statePath, err)
	}
	return nil
}

// List returns the supervised shards ordered by shard id.
func (s *Supervisor) List() []*Shard {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Shard, 0, len(s.shards))
	for _, sh := range s.shards {
		out = append(out, sh)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].spec.ShardID < out[j].spec.ShardID })
	return out
}

// Get returns the supervised shard with the given id.
func (s *Supervisor) Get(shardID string) (*Shard, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sh, ok := s.shards[shardID]
	return sh, ok
}

// StopAll stops every shard concurrently, each with the given timeout.
func (s *Supervisor) StopAll(timeout time.Duration) error {
	shards := s.List()
	errs := make([]error, len(shards))
	var wg sync.WaitGroup
	for i, sh := range shards {
		wg.Go(func() { errs[i] = sh.Stop(timeout) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (s *Supervisor) forget(sh *Shard) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shards[sh.spec.ShardID] == sh {
		delete(s.shards, sh.spec.ShardID)
	}
}

// FreePort returns a TCP port on host that was free a moment ago. Another
// process may take it before it is used; callers bind it soon after.
func FreePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("finding a free port on %q: %w", host, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
