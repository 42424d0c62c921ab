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

// A download that waits mid-file on a peer holding fewer bytes than it
// does reports its own, not the peer's: Done does not go back for a wait
// (review-session4c N2). The peer's growth still moves the stall clock and
// shows in Moving (what the download's own followers watch), and the
// download's own transfer, started again, is counted afresh.
func TestProgressElsewhereBelowHeld(t *testing.T) {
	var p Progress
	p.start()
	p.received(900)
	before := p.LastByte()
	time.Sleep(time.Millisecond) // a later time.Now, not a condition
	p.Elsewhere(100)
	if got := p.Bytes(); got != 900 {
		t.Errorf("waiting on a peer at 100 bytes, holding 900: Bytes() = %d, want 900", got)
	}
	if got := p.Moving(); got != 100 {
		t.Errorf("Moving() = %d, want the peer's 100", got)
	}
	if !p.LastByte().Equal(before) {
		t.Error("a peer holding fewer bytes than the download moved its stall clock before it grew")
	}
	p.Elsewhere(200)
	if !p.LastByte().After(before) {
		t.Error("the peer's growth did not move the stall clock")
	}
	if got := p.Bytes(); got != 900 {
		t.Errorf("Bytes() = %d, want 900", got)
	}
	p.Elsewhere(1000)
	if got := p.Bytes(); got != 1000 {
		t.Errorf("the peer past the bytes held: Bytes() = %d, want 1000", got)
	}
	if _, err := (&Downloader{}).Fetch(t.Context(), t.TempDir(), nil, &p, nil); err != nil {
		t.Fatal(err)
	}
	if got, moving := p.Bytes(), p.Moving(); got != 0 || moving != 0 {
		t.Errorf("after the download's own Fetch began again: Bytes() = %d, Moving() = %d, want its own (0)", got, moving)
	}
}
