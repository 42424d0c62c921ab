package supervisor

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// canVerifyIdentity: /proc gives each process's command line and start time.
const canVerifyIdentity = true

// procStat is what the supervisor reads from /proc/<pid>/stat.
type procStat struct {
	state     byte
	pgrp      int
	startTime uint64 // clock ticks after boot; with the pid, a process's identity
}

// readStat parses /proc/<pid>/stat. The command name is in parentheses and
// may itself contain spaces and parentheses, so fields are counted from the
// last ')'.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("parsing /proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); pgrp is field 5, starttime field 22.
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("parsing /proc/%d/stat: %d fields", pid, len(f))
	}
	pgrp, err := strconv.Atoi(f[2])
	if err != nil {
		return procStat{}, fmt.Errorf("parsing /proc/%d/stat pgrp: %w", pid, err)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("parsing /proc/%d/stat starttime: %w", pid, err)
	}
	return procStat{state: f[0][0], pgrp: pgrp, startTime: start}, nil
}

// processAlive reports whether pid is a running (not zombie) process.
func processAlive(pid int) bool {
	st, err := readStat(pid)
	return err == nil && st.state != 'Z' && st.state != 'X'
}

// processStartTime returns pid's start time, 0 when it cannot be read.
func processStartTime(pid int) uint64 {
	st, err := readStat(pid)
	if err != nil {
		return 0
	}
	return st.startTime
}

// processCmdline returns pid's argv.
func processCmdline(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, err
	}
	b = bytes.TrimSuffix(b, []byte{0})
	if len(b) == 0 {
		return nil, nil
	}
	return strings.Split(string(b), "\x00"), nil
}

// groupAlive reports whether any non-zombie process is in process group
// pgid. Zombies are left out: an orphan's zombie waits on whoever reaps for
// init, which is none of the supervisor's business.
func groupAlive(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return processAlive(pgid)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readStat(pid)
		if err == nil && st.pgrp == pgid && st.state != 'Z' && st.state != 'X' {
			return true
		}
	}
	return false
}
