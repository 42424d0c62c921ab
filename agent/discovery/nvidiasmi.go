package discovery

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// GPUQueryFields are the fields ProbeGPUs asks nvidia-smi for, in the order
// ParseNvidiaSMI expects them.
const GPUQueryFields = "index,uuid,name,memory.total,utilization.gpu,temperature.gpu,ecc.errors.uncorrected.volatile.total,memory.used"

// GPUQueryFormat is the --format ProbeGPUs passes to nvidia-smi.
const GPUQueryFormat = "csv,noheader,nounits"

// gpuFieldCount is the number of comma-separated fields in GPUQueryFields.
const gpuFieldCount = 8

// ErrNvidiaSMINotFound is wrapped by ProbeGPUs' error when the nvidia-smi
// executable does not exist at the configured path (or on PATH). A node without
// an NVIDIA driver is still a valid CPU node; the caller decides what that
// means, and tells it apart from a broken driver with errors.Is.
var ErrNvidiaSMINotFound = errors.New("nvidia-smi not found")

// GPU is one card as nvidia-smi reports it. Pointer fields are nil when
// nvidia-smi says the value is unknown ("[N/A]", "[Not Supported]"); they are
// never zero for unknown.
type GPU struct {
	Index int
	UUID  string
	Name  string
	// Class is the scheduling class derived from Name and MemoryMiB by
	// GPUClass, e.g. "h100-80g".
	Class string
	// MemoryMiB is the total framebuffer memory; 0 when nvidia-smi did not
	// report it.
	MemoryMiB      uint64
	UtilizationPct *float64
	TemperatureC   *float64
	// ECCErrors is the volatile uncorrected ECC error count; nil on cards
	// without ECC or with ECC off.
	ECCErrors *uint64
	// MemoryUsedMiB is the framebuffer memory in use (memory.used); nil when
	// nvidia-smi does not report it.
	MemoryUsedMiB *uint64
	// NVLinkPeers are the indices of the GPUs this one has NVLink to, and
	// NVLinkKnown whether they were read (ProbeTopology, the nvml build):
	// without it an empty NVLinkPeers means unknown, not "no NVLink".
	NVLinkPeers []int
	NVLinkKnown bool
}

// ParseNvidiaSMI parses the output of
// `nvidia-smi --query-gpu=<GPUQueryFields> --format=csv,noheader,nounits`.
// A header line and unit suffixes (" MiB", " %") are tolerated, so the output
// of --format=csv parses too. Errors name the line and field that were wrong.
func ParseNvidiaSMI(r io.Reader) ([]GPU, error) {
	var gpus []GPU
	sc := bufio.NewScanner(r)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		fields := strings.Split(line, ",")
		for i := range fields {
			fields[i] = strings.TrimSpace(fields[i])
		}
		if lineNo == 1 && fields[0] == "index" {
			continue // header of --format=csv
		}
		if len(fields) < gpuFieldCount {
			return nil, fmt.Errorf("line %d: want %d fields (%s), got %d: %q", lineNo, gpuFieldCount, GPUQueryFields, len(fields), line)
		}
		if extra := len(fields) - gpuFieldCount; extra > 0 {
			// A name containing commas: everything between uuid and
			// memory.total belongs to it.
			name := strings.Join(fields[2:3+extra], ", ")
			fields = append(append(fields[:2:2], name), fields[3+extra:]...)
		}
		gpu, err := parseGPURow(fields)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", lineNo, err)
		}
		gpus = append(gpus, gpu)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading nvidia-smi output: %w", err)
	}
	return gpus, nil
}

func parseGPURow(f []string) (GPU, error) {
	var g GPU
	idx, err := strconv.Atoi(f[0])
	if err != nil || idx < 0 {
		return g, fmt.Errorf("index %q: not a GPU index", f[0])
	}
	g.Index = idx
	if unknownValue(f[1]) {
		return g, fmt.Errorf("uuid of GPU %d: %q", idx, f[1])
	}
	g.UUID = f[1]
	if unknownValue(f[2]) {
		return g, fmt.Errorf("name of GPU %d: %q", idx, f[2])
	}
	g.Name = f[2]
	if mem := strings.TrimSuffix(f[3], " MiB"); !unknownValue(mem) {
		g.MemoryMiB, err = strconv.ParseUint(mem, 10, 64)
		if err != nil {
			return g, fmt.Errorf("memory.total of GPU %d: %q is not a number of MiB", idx, f[3])
		}
	}
	if g.UtilizationPct, err = optionalFloat(strings.TrimSuffix(f[4], " %")); err != nil {
		return g, fmt.Errorf("utilization.gpu of GPU %d: %w", idx, err)
	}
	if g.TemperatureC, err = optionalFloat(f[5]); err != nil {
		return g, fmt.Errorf("temperature.gpu of GPU %d: %w", idx, err)
	}
	if !unknownValue(f[6]) {
		n, err := strconv.ParseUint(f[6], 10, 64)
		if err != nil {
			return g, fmt.Errorf("ecc.errors.uncorrected.volatile.total of GPU %d: %q is not a count", idx, f[6])
		}
		g.ECCErrors = &n
	}
	if used := strings.TrimSuffix(f[7], " MiB"); !unknownValue(used) {
		n, err := strconv.ParseUint(used, 10, 64)
		if err != nil {
			return g, fmt.Errorf("memory.used of GPU %d: %q is not a number of MiB", idx, f[7])
		}
		g.MemoryUsedMiB = &n
	}
	g.Class = GPUClass(g.Name, g.MemoryMiB)
	return g, nil
}

// unknownValue reports whether an nvidia-smi value means "not known":
// "[N/A]", "N/A", "[Not Supported]", "[Unknown Error]", empty, and the like.
func unknownValue(v string) bool {
	v = strings.TrimSpace(v)
	if v == "" {
		return true
	}
	if strings.HasPrefix(v, "[") && strings.HasSuffix(v, "]") {
		return true
	}
	switch strings.ToLower(v) {
	case "n/a", "not supported", "unknown error", "unknown":
		return true
	}
	return false
}

func optionalFloat(v string) (*float64, error) {
	if unknownValue(v) {
		return nil, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		// ParseFloat reads "NaN" and "Inf", which are no reading at all.
		return nil, fmt.Errorf("%q is not a number", v)
	}
	return &f, nil
}

// ProbeGPUs runs nvidia-smi at path (a bare name is looked up on PATH) and
// parses its GPU list. Every failure is an error starting with
// "GPU discovery failed:"; a failure is never reported as zero GPUs. When the
// executable does not exist the error wraps ErrNvidiaSMINotFound. When it
// fails, the error carries the first line it printed on stderr (or stdout,
// where nvidia-smi prints its driver errors).
func ProbeGPUs(ctx context.Context, path string) ([]GPU, error) {
	if path == "" {
		path = "nvidia-smi"
	}
	args := []string{"--query-gpu=" + GPUQueryFields, "--format=" + GPUQueryFormat}
	var stdout, stderr bytes.Buffer
	var err error
	for attempt := 1; ; attempt++ {
		stdout.Reset()
		stderr.Reset()
		cmd := exec.CommandContext(ctx, path, args...)
		cmd.Stdout = &stdout
		cmd.Stderr = &stderr
		cmd.WaitDelay = time.Second
		err = cmd.Run()
		// ETXTBSY: the executable was just written and another goroutine's
		// fork still holds it open for writing. It clears within
		// milliseconds; try again a few times.
		if !errors.Is(err, syscall.ETXTBSY) || attempt == 5 {
			break
		}
		t := time.NewTimer(time.Duration(attempt) * 20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("GPU discovery failed: running %s: %w", path, ctx.Err())
		case <-t.C:
		}
	}
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("GPU discovery failed: %w", smiNotFound{path})
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, fmt.Errorf("GPU discovery failed: running %s: %w", path, ctxErr)
		}
		if why := firstLine(stderr.String()); why != "" {
			return nil, fmt.Errorf("GPU discovery failed: running %s: %w: %s", path, err, why)
		}
		if why := firstLine(stdout.String()); why != "" {
			return nil, fmt.Errorf("GPU discovery failed: running %s: %w: %s", path, err, why)
		}
		return nil, fmt.Errorf("GPU discovery failed: running %s: %w", path, err)
	}
	gpus, err := ParseNvidiaSMI(&stdout)
	if err != nil {
		return nil, fmt.Errorf("GPU discovery failed: parsing output of %s: %w", path, err)
	}
	if len(gpus) == 0 {
		return nil, fmt.Errorf("GPU discovery failed: %s exited 0 but listed no GPUs", path)
	}
	return gpus, nil
}

// firstLine returns the first non-blank line of s, trimmed.
func firstLine(s string) string {
	for _, line := range strings.Split(s, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return ""
}

// smiNotFound is ErrNvidiaSMINotFound with where it was looked for, said
// once: "nvidia-smi not found at /usr/bin/nvidia-smi" (not the exec
// package's "executable file not found" nested in it as well).
type smiNotFound struct{ path string }

func (e smiNotFound) Error() string {
	if strings.ContainsRune(e.path, '/') {
		return "nvidia-smi not found at " + e.path
	}
	return fmt.Sprintf("nvidia-smi not found (no %q on PATH)", e.path)
}

func (smiNotFound) Is(target error) bool { return target == ErrNvidiaSMINotFound }
