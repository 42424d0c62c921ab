package discovery

import (
	"math"
	"strconv"
	"strings"
)

// marketedGB are the memory sizes GPUs are sold with, in GB, ascending.
// Reported memory is a little below the marketed size (the driver reserves
// some), so it is rounded up to the next of these.
var marketedGB = []uint64{2, 4, 6, 8, 10, 11, 12, 16, 20, 24, 32, 40, 48, 64, 80, 94, 96, 128, 141, 180, 192, 288}

// nameNoise are words in nvidia-smi names that say nothing about the model:
// the vendor, brands, form factors and memory kinds.
var nameNoise = map[string]bool{
	"nvidia": true, "tesla": true, "geforce": true, "quadro": true,
	"pcie": true, "sxm": true, "sxm2": true, "sxm3": true, "sxm4": true, "sxm5": true,
	"hbm2": true, "hbm2e": true, "hbm3": true, "hbm3e": true, "nvl": true,
	"generation": true, "gpu": true,
}

// GPUClass derives the scheduling class of a GPU from its nvidia-smi name and
// total memory: the model lowercased without vendor, brand and form-factor
// words, a dash, and the marketed memory size in GB followed by "g".
// "NVIDIA H100 80GB HBM3" → "h100-80g", "NVIDIA GeForce RTX 4090" with
// 24564 MiB → "rtx4090-24g". The size comes from the name when it says NNGB,
// else from memoryMiB rounded up to the next marketed size. With neither, the
// class is the model alone; with no model word at all it is "unknown".
func GPUClass(name string, memoryMiB uint64) string {
	var model strings.Builder
	var nameGB uint64
	for _, word := range strings.FieldsFunc(strings.ToLower(name), func(r rune) bool {
		return r == ' ' || r == '-' || r == '_' || r == '/' || r == '(' || r == ')'
	}) {
		if gb, ok := strings.CutSuffix(word, "gb"); ok {
			if n, err := strconv.ParseUint(gb, 10, 64); err == nil && n > 0 {
				nameGB = n
				continue
			}
		}
		if nameNoise[word] {
			continue
		}
		for _, r := range word {
			if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
				model.WriteRune(r)
			}
		}
	}
	class := model.String()
	if class == "" {
		class = "unknown"
	}
	gb := nameGB
	if gb == 0 {
		gb = marketedSize(memoryMiB)
	}
	if gb == 0 {
		return class
	}
	return class + "-" + strconv.FormatUint(gb, 10) + "g"
}

// marketedSize rounds memoryMiB up to the next marketed size in GB; beyond
// the largest it rounds up to a whole GB. 0 stays 0 (unknown).
func marketedSize(memoryMiB uint64) uint64 {
	if memoryMiB == 0 {
		return 0
	}
	gb := float64(memoryMiB) / 1024
	for _, size := range marketedGB {
		if gb <= float64(size) {
			return size
		}
	}
	return uint64(math.Ceil(gb))
}
