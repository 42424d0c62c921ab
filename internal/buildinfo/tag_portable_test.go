//go:build !nvml

package buildinfo

const nvmlTag = false
