package nodejs

import (
	"fmt"
	"runtime"
	"testing"
)

// stopTB records whether Require failed or skipped; both end the calling
// goroutine, as the testing package's do.
type stopTB struct {
	testing.TB
	failed, skipped bool
	msg             string
}

func (s *stopTB) Helper() {}
func (s *stopTB) Fatalf(f string, a ...any) {
	s.failed, s.msg = true, fmt.Sprintf(f, a...)
	runtime.Goexit()
}
func (s *stopTB) Skipf(f string, a ...any) {
	s.skipped, s.msg = true, fmt.Sprintf(f, a...)
	runtime.Goexit()
}

// TestRequireFailsUnderAnyTrueCI: with node missing, CI=1 or CI=TRUE (any
// value strconv.ParseBool reads as true, as pgtest does) fails the test
// rather than skipping it; CI unset skips.
func TestRequireFailsUnderAnyTrueCI(t *testing.T) {
	for _, tt := range []struct {
		ci       string
		wantFail bool
	}{{"1", true}, {"TRUE", true}, {"true", true}, {"", false}, {"false", false}} {
		t.Run("CI="+tt.ci, func(t *testing.T) {
			t.Setenv("PATH", t.TempDir())
			t.Setenv("CI", tt.ci)
			tb := &stopTB{TB: t}
			done := make(chan struct{})
			go func() { defer close(done); Require(tb) }()
			<-done
			if tb.failed != tt.wantFail || tb.skipped == tt.wantFail {
				t.Errorf("CI=%q with no node: failed=%v skipped=%v (%s); want failed=%v", tt.ci, tb.failed, tb.skipped, tb.msg, tt.wantFail)
			}
		})
	}
}
