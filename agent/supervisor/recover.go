package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Recover re-attaches to the shards a previous agent left running, from the
// state files in the supervisor's directory, and supervises them from now
// on. A shard is adopted when its engine process is alive (signal 0) and is
// the process that was started: its /proc/<pid>/cmdline matches the recorded
// command line, or, because engines such as vLLM rename their process title,
// its start time matches the one recorded at launch (a pid with the same
// start time cannot have been reused). A state file whose engine is gone is
// removed, and any of its sidecars still running are sent SIGTERM.
//
// An adopted process is not the agent's child, so its exit status cannot be
// known; it is polled for liveness instead.
//
// The returned error joins the problems with individual state files; the
// shards that could be adopted are returned regardless.
func (s *Supervisor) Recover() ([]*Shard, error) {
	paths, err := filepath.Glob(filepath.Join(s.stateDir, "*.json"))
	if err != nil {
		return nil, fmt.Errorf("listing shard state in %s: %w", s.stateDir, err)
	}
	var shards []*Shard
	var errs []error
	for _, path := range paths {
		sh, err := s.recoverOne(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if sh != nil {
			shards = append(shards, sh)
		}
	}
	return shards, errors.Join(errs...)
}

// recoverOne adopts the shard of one state file; nil, nil when it is stale.
func (s *Supervisor) recoverOne(path string) (*Shard, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading shard state %s: %w", path, err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("parsing shard state %s: %w", path, err)
	}
	if len(st.Processes) == 0 || st.Spec.ShardID == "" {
		return nil, fmt.Errorf("shard state %s: no shard_id or no processes recorded", path)
	}
	want := strings.TrimSuffix(filepath.Base(path), ".json")
	if st.Spec.ShardID != want {
		return nil, fmt.Errorf("shard state %s: records shard_id %q, not %q", path, st.Spec.ShardID, want)
	}
	drv, err := s.driverFor(st.Spec.Engine)
	if err != nil {
		return nil, fmt.Errorf("shard state %s: %w", path, err)
	}
	logger := s.logger.With("shard", st.Spec.ShardID, "engine", drv.Name())
	engine := st.Processes[len(st.Processes)-1]
	if !canVerifyIdentity {
		// Removing the file of a live engine would orphan it for good.
		return nil, fmt.Errorf("shard state %s: cannot verify that pid %d is the engine on this platform; left in place", path, engine.PID)
	}
	if !sameProcess(engine) {
		for _, p := range st.Processes[:len(st.Processes)-1] {
			if sameProcess(p) {
				logger.Info("stopping sidecar of a vanished shard", "pid", p.PID)
				_ = syscall.Kill(-p.PID, syscall.SIGTERM)
			}
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("removing stale shard state %s: %w", path, err)
		}
		logger.Info("stale shard state removed", "pid", engine.PID)
		return nil, nil
	}

	sh := &Shard{
		sup:       s,
		spec:      st.Spec,
		drv:       drv,
		logger:    logger,
		logPath:   filepath.Join(s.stateDir, st.Spec.ShardID+".log"),
		logOffset: st.LogOffset,
		statePath: path,
		adopted:   true,
		launched:  make(chan struct{}),
		done:      make(chan struct{}),
	}
	close(sh.launched)
	for i, ps := range st.Processes {
		if i < len(st.Processes)-1 && !sameProcess(ps) {
			logger.Warn("sidecar of adopted shard is gone", "pid", ps.PID, "argv0", first(ps.Argv))
			continue
		}
		sh.procs = append(sh.procs, &proc{
			argv:      ps.Argv,
			pid:       ps.PID,
			startTime: ps.StartTime,
			sidecar:   i < len(st.Processes)-1,
			done:      make(chan struct{}),
		})
	}
	s.mu.Lock()
	if _, dup := s.shards[sh.spec.ShardID]; dup {
		s.mu.Unlock()
		return nil, fmt.Errorf("shard state %s: shard %s is already supervised", path, sh.spec.ShardID)
	}
	s.shards[sh.spec.ShardID] = sh
	s.mu.Unlock()
	for _, p := range sh.procs {
		go sh.watchAdopted(p)
	}
	go func() {
		for _, p := range sh.procs {
			<-p.done
		}
		close(sh.done)
	}()
	logger.Info("shard adopted", "pid", engine.PID, "port", st.Port)
	return sh, nil
}

// sameProcess reports whether the recorded process is still the one alive
// under its pid.
func sameProcess(p procState) bool {
	if p.PID <= 0 || syscall.Kill(p.PID, 0) != nil || !processAlive(p.PID) {
		return false
	}
	if argv, err := processCmdline(p.PID); err == nil && slices.Equal(argv, p.Argv) {
		return true
	}
	return p.StartTime != 0 && processStartTime(p.PID) == p.StartTime
}

// watchAdopted polls an adopted process until it is gone.
func (sh *Shard) watchAdopted(p *proc) {
	t := time.NewTicker(adoptedPoll)
	defer t.Stop()
	for range t.C {
		if processAlive(p.pid) && (p.startTime == 0 || processStartTime(p.pid) == p.startTime) {
			continue
		}
		p.err = fmt.Errorf("process %d exited (adopted: exit status unknown)", p.pid)
		close(p.done)
		sh.processEnded(p)
		return
	}
}

func first(xs []string) string {
	if len(xs) == 0 {
		return ""
	}
	return xs[0]
}
