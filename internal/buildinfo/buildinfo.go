// Package buildinfo is the version the binaries were built as. `make build`
// and `make release` stamp it with -ldflags
// "-X github.com/llmgw/llmgw/internal/buildinfo.version=0.9.0 -X ….commit=<sha>";
// a `go install module@v0.9.0` build takes the module's version instead,
// and anything else is "dev".
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set by the linker (-X); see the package doc.
var (
	version = ""
	commit  = ""
)

// Version is the version the binary was built as: the stamped one, else
// the module version `go install` recorded (without its leading v), else
// "dev".
func Version() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v := bi.Main.Version
		if v[0] == 'v' {
			v = v[1:]
		}
		return v
	}
	return "dev"
}

// Commit is the git commit the binary was built from, or "" when unknown.
func Commit() string {
	if commit != "" {
		return commit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return ""
}

// String is the one-line description `llmgw version` prints: the version,
// the commit, the Go release and the platform.
func String(program string) string {
	c := Commit()
	if len(c) > 12 {
		c = c[:12]
	}
	if c == "" {
		c = "unknown"
	}
	return fmt.Sprintf("%s %s (commit %s, %s, %s/%s)", program, Version(), c, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// UserAgent is the User-Agent of a program's HTTP and gRPC requests, like
// "llmgw-agent/0.9.0".
func UserAgent(program string) string {
	return program + "/" + Version()
}
