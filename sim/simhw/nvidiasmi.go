package simhw

import (
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// SimGPU is one simulated card.
type SimGPU struct {
	// Name as nvidia-smi prints it, e.g. "NVIDIA H100 80GB HBM3".
	Name string
	// MemoryMiB is memory.total, e.g. 81559 for an H100 80GB.
	MemoryMiB uint64
	// MemoryUsedMiB is memory.used, at most MemoryMiB; 0 is an idle card.
	// memory.free is the difference.
	MemoryUsedMiB uint64
	// MemoryUsedUnknown makes memory.used and memory.free print "[N/A]", as
	// a driver that does not report them does; MemoryUsedMiB is ignored.
	MemoryUsedUnknown bool
	// UUID, e.g. "GPU-4b7d7a5e-1f0c-6e3b-9a2d-3c5f8e1a7b90"; empty means one
	// derived from the name and index.
	UUID string
}

// Names and memory sizes of common cards as nvidia-smi reports them.
const (
	H100Name      = "NVIDIA H100 80GB HBM3"
	H100MemoryMiB = 81559
)

// H100s returns n H100 80GB cards whose UUIDs derive from seed (use the node
// name), so the same seed always gives the same cards and two nodes never
// share a UUID.
func H100s(n int, seed string) []SimGPU {
	gpus := make([]SimGPU, n)
	for i := range gpus {
		gpus[i] = SimGPU{Name: H100Name, MemoryMiB: H100MemoryMiB, UUID: SimUUID(seed, i)}
	}
	return gpus
}

// SimUUID derives a GPU UUID in nvidia-smi's format from a seed and an index.
func SimUUID(seed string, index int) string {
	h := sha256.Sum256([]byte(seed + "/" + strconv.Itoa(index)))
	x := fmt.Sprintf("%x", h[:16])
	return "GPU-" + x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

// queryFields are the --query-gpu fields the script answers.
var queryFields = []string{
	"index", "uuid", "gpu_uuid", "name", "gpu_name", "count",
	"memory.total", "memory.used", "memory.free",
	"utilization.gpu", "utilization.memory", "temperature.gpu",
	"ecc.errors.uncorrected.volatile.total", "ecc.errors.corrected.volatile.total",
	"driver_version", "pci.bus_id",
}

// WriteNvidiaSMI writes an executable POSIX sh script named nvidia-smi into
// dir and returns its path. Like the real tool it answers
// `--query-gpu=<fields> --format=csv[,noheader][,nounits]` with exactly the
// fields asked for, in that order (utilization 0, temperature 30+index, no ECC
// errors, memory used as each SimGPU says), and `-L` with the GPU list; an
// unknown field exits 2, and with no GPUs it prints "No devices were found"
// and exits 6.
func WriteNvidiaSMI(dir string, gpus []SimGPU) (string, error) {
	for i, g := range gpus {
		if g.Name == "" || strings.ContainsAny(g.Name, ",\n\r\x00") {
			return "", fmt.Errorf("simulated GPU %d: name %q must be non-empty, without commas or newlines", i, g.Name)
		}
		if strings.ContainsAny(g.UUID, ",\n\r\x00 ") {
			return "", fmt.Errorf("simulated GPU %d: uuid %q must not contain commas, spaces or newlines", i, g.UUID)
		}
		if !g.MemoryUsedUnknown && g.MemoryUsedMiB > g.MemoryMiB {
			return "", fmt.Errorf("simulated GPU %d: memory used %d MiB exceeds its memory of %d MiB", i, g.MemoryUsedMiB, g.MemoryMiB)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `#!/bin/sh
# Simulated nvidia-smi written by llmgw (sim/simhw) for tests and
# "llmgw dev". It knows %d GPU(s) and answers
#   --query-gpu=<fields> --format=csv[,noheader][,nounits]
#   -L | --list-gpus
count=%d
`, len(gpus), len(gpus))
	// Each function sets v to its value for GPU $1 (no subshell per value).
	caseFunc := func(fn string, value func(i int, g SimGPU) string) {
		fmt.Fprintf(&b, "\n%s() {\n\tcase \"$1\" in\n", fn)
		for i, g := range gpus {
			fmt.Fprintf(&b, "\t%d) v=%s ;;\n", i, shQuote(value(i, g)))
		}
		b.WriteString("\tesac\n}\n")
	}
	caseFunc("gpu_name", func(_ int, g SimGPU) string { return g.Name })
	caseFunc("gpu_uuid", func(i int, g SimGPU) string {
		if g.UUID == "" {
			return SimUUID(g.Name, i)
		}
		return g.UUID
	})
	caseFunc("gpu_memory", func(_ int, g SimGPU) string { return strconv.FormatUint(g.MemoryMiB, 10) })
	caseFunc("gpu_memory_used", func(_ int, g SimGPU) string {
		if g.MemoryUsedUnknown {
			return "[N/A]"
		}
		return strconv.FormatUint(g.MemoryUsedMiB, 10)
	})
	caseFunc("gpu_memory_free", func(_ int, g SimGPU) string {
		if g.MemoryUsedUnknown {
			return "[N/A]"
		}
		return strconv.FormatUint(g.MemoryMiB-g.MemoryUsedMiB, 10)
	})
	b.WriteString(`
# value_of sets v to field $2 of GPU $1.
value_of() {
	case "$2" in
	index) v=$1 ;;
	count) v=$count ;;
	uuid | gpu_uuid) gpu_uuid "$1" ;;
	name | gpu_name) gpu_name "$1" ;;
	memory.total) gpu_memory "$1" ;;
	memory.used) gpu_memory_used "$1" ;;
	memory.free) gpu_memory_free "$1" ;;
	utilization.gpu | utilization.memory) v=0 ;;
	temperature.gpu) v=$((30 + $1)) ;;
	ecc.errors.uncorrected.volatile.total | ecc.errors.corrected.volatile.total) v=0 ;;
	driver_version) v=550.54.15 ;;
	pci.bus_id) v=$(printf '00000000:%02X:00.0' $((24 + 16 * $1))) ;;
	esac
}

print_unit() {
	case "$1" in
	memory.*) printf "$2" 'MiB' ;;
	utilization.*) printf "$2" '%' ;;
	esac
}

query=
format=
list=0
for arg in "$@"; do
	case "$arg" in
	--query-gpu=*) query=${arg#--query-gpu=} ;;
	--format=*) format=${arg#--format=} ;;
	-L | --list-gpus) list=1 ;;
	esac
done

if [ "$count" -eq 0 ]; then
	echo 'No devices were found'
	exit 6
fi

if [ "$list" -eq 1 ]; then
	i=0
	while [ "$i" -lt "$count" ]; do
		gpu_name "$i"
		printf 'GPU %s: %s' "$i" "$v"
		gpu_uuid "$i"
		printf ' (UUID: %s)\n' "$v"
		i=$((i + 1))
	done
	exit 0
fi

if [ -z "$query" ]; then
	echo "Simulated nvidia-smi (llmgw): $count GPU(s). Ask with --query-gpu=<fields> --format=csv or -L."
	exit 0
fi

case ",$format," in
*,csv,*) ;;
*)
	echo '--query-gpu needs --format=csv[,noheader][,nounits]' >&2
	exit 2
	;;
esac
header=1
units=1
case ",$format," in *,noheader,*) header=0 ;; esac
case ",$format," in *,nounits,*) units=0 ;; esac

IFS=,
set -f
for field in $query; do
	case "$field" in
	` + strings.Join(queryFields, " | ") + `) ;;
	*)
		printf 'Field "%s" is not a valid field to query.\n' "$field" >&2
		exit 2
		;;
	esac
done

if [ "$header" -eq 1 ]; then
	sep=
	for field in $query; do
		printf '%s%s' "$sep" "$field"
		print_unit "$field" ' [%s]'
		sep=', '
	done
	printf '\n'
fi

i=0
while [ "$i" -lt "$count" ]; do
	sep=
	for field in $query; do
		value_of "$i" "$field"
		printf '%s%s' "$sep" "$v"
		# Like the real tool: no unit after an unknown value ("[N/A]").
		if [ "$units" -eq 1 ]; then
			case "$v" in
			\[*\]) ;;
			*) print_unit "$field" ' %s' ;;
			esac
		fi
		sep=', '
	done
	printf '\n'
	i=$((i + 1))
done
`)
	path := filepath.Join(dir, "nvidia-smi")
	if err := writeFileAtomic(path, []byte(b.String()), 0o755); err != nil {
		return "", fmt.Errorf("writing simulated nvidia-smi: %w", err)
	}
	return path, nil
}

// WriteBrokenNvidiaSMI writes an nvidia-smi into dir that prints message on
// stdout and exits with exitCode, as the real one does when the driver is
// not loaded (message "NVIDIA-SMI has failed because it couldn't communicate
// with the NVIDIA driver. ...", exit code 9).
func WriteBrokenNvidiaSMI(dir, message string, exitCode int) (string, error) {
	if exitCode == 0 {
		return "", fmt.Errorf("simulated broken nvidia-smi: exit code must not be 0")
	}
	script := fmt.Sprintf("#!/bin/sh\n# Simulated failing nvidia-smi written by llmgw (sim/simhw).\nprintf '%%s\\n\\n' %s\nexit %d\n", shQuote(message), exitCode)
	path := filepath.Join(dir, "nvidia-smi")
	if err := writeFileAtomic(path, []byte(script), 0o755); err != nil {
		return "", fmt.Errorf("writing simulated nvidia-smi: %w", err)
	}
	return path, nil
}

// shQuote quotes s for a POSIX shell.
func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
