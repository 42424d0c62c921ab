//go:build nvml

package buildinfo

// variant is the build's tags that change what the binary does: this
// build reads NVLink topology through NVML (cgo).
const variant = "nvml"
