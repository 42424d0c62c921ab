package download

import (
	"testing"
	"time"
)

// Bytes held elsewhere (a peer this download waits for) are its bytes, and
// their growth moves its stall clock.
func TestProgressElsewhere(t *testing.T) {
	var p Progress
	p.Elsewhere(0)
	first := p.LastByte()
	if first.IsZero() {
		t.Fatal("Elsewhere(0) on a fresh progress left the stall clock unset")
	}
	time.Sleep(time.Millisecond) // a later time.Now, not a condition
	p.Elsewhere(0)
	if !p.LastByte().Equal(first) {
		t.Error("no growth moved the stall clock")
	}
	p.Elsewhere(100)
	if p.Bytes() != 100 {
		t.Errorf("Bytes() = %d, want 100", p.Bytes())
	}
	if !p.LastByte().After(first) {
		t.Error("growth did not move the stall clock")
	}
}
