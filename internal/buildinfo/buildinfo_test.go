package buildinfo

import (
	"regexp"
	"testing"
)

func TestStampedVersion(t *testing.T) {
	old, oldCommit := version, commit
	t.Cleanup(func() { version, commit = old, oldCommit })
	version, commit = "0.9.0", "0123456789abcdef0123456789abcdef01234567"
	if got := Version(); got != "0.9.0" {
		t.Errorf("Version() = %q, want 0.9.0", got)
	}
	if got := UserAgent("llmgw-agent"); got != "llmgw-agent/0.9.0" {
		t.Errorf("UserAgent = %q", got)
	}
	if got, want := String("llmgw"), regexp.MustCompile(`^llmgw 0\.9\.0 \(commit 0123456789ab, go[^,]+, [a-z0-9]+/[a-z0-9]+\)$`); !want.MatchString(got) {
		t.Errorf("String = %q, want it to match %s", got, want)
	}
}

func TestUnstampedVersion(t *testing.T) {
	old := version
	t.Cleanup(func() { version = old })
	version = ""
	// A test binary's main module is "(devel)": no stamp, no module version.
	if got := Version(); got != "dev" {
		t.Errorf("Version() of an unstamped build = %q, want dev", got)
	}
}
