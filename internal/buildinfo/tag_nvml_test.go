//go:build nvml

package buildinfo

const nvmlTag = true
