//go:build !nvml

package buildinfo

// variant is empty for the portable (CGO_ENABLED=0) build.
const variant = ""
