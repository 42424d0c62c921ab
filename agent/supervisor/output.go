package supervisor

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
)

// Output kept for error reports.
const (
	// OutputLines is how many of the engine's last lines LastOutput keeps.
	OutputLines = 50
	// outputTailBytes bounds how much of the log is read to find them.
	outputTailBytes = 64 << 10
)

// LastOutput returns up to the last 50 lines the shard's processes wrote
// (stdout and stderr, in the order written) in this run. Carriage-return
// progress bars are reduced to their final state.
//
// The lines are read from the end of the shard's log file, within a bounded
// window, rather than kept in a ring fed through a pipe: the engine writes
// to the file directly so that it survives an agent restart, and reading
// the file gives an adopted shard its last lines too.
func (sh *Shard) LastOutput() []string {
	f, err := os.Open(sh.logPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil
	}
	start := sh.logOffset
	partial := false
	if fi.Size()-start > outputTailBytes {
		start = fi.Size() - outputTailBytes
		partial = true
	}
	if start > fi.Size() { // the log was truncated under us
		start = 0
	}
	buf := make([]byte, fi.Size()-start)
	n, err := f.ReadAt(buf, start)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil
	}
	buf = bytes.TrimRight(buf[:n], "\n")
	if len(buf) == 0 {
		return nil
	}
	lines := strings.Split(string(buf), "\n")
	if partial && len(lines) > 1 {
		lines = lines[1:] // the window starts mid-line
	}
	for i, l := range lines {
		l = strings.TrimRight(l, "\r")
		if j := strings.LastIndexByte(l, '\r'); j >= 0 {
			l = l[j+1:]
		}
		lines[i] = l
	}
	if len(lines) > OutputLines {
		lines = lines[len(lines)-OutputLines:]
	}
	return lines
}
