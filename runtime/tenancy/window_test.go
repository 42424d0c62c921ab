package tenancy

import (
	"testing"
	"time"
)

func TestWindow(t *testing.T) {
	var w window
	w.charge(100, 10)
	w.charge(130, 5)
	if got := w.sum(130); got != 15 {
		t.Fatalf("sum at 130 = %d, want 15", got)
	}
	// A correction to a slot still in the window counts.
	w.add(130, 150, -2)
	if got := w.sum(150); got != 13 {
		t.Errorf("after correction sum = %d, want 13", got)
	}
	// Nothing goes below zero.
	w.add(130, 150, -100)
	if got := w.sum(150); got != 10 {
		t.Errorf("after over-correction sum = %d, want 10 (slot 100's 10, slot 130 floored at 0)", got)
	}
	w.add(130, 150, 3)
	if got := w.sum(160); got != 3 {
		t.Errorf("sum at 160 (the slot of 100 left the window) = %d, want 3", got)
	}
	// A correction to a slot that left the window is ignored.
	w.add(100, 170, 50)
	if got := w.sum(170); got != 3 {
		t.Errorf("a correction outside the window changed the sum: %d", got)
	}
	// The slot ring reuses slots: second 220 shares slot 100's index.
	w.charge(220, 7)
	if got := w.sum(220); got != 7 {
		t.Errorf("sum at 220 after reuse = %d, want 7", got)
	}
	// A whole idle window clears everything.
	if got := w.sum(1000); got != 0 {
		t.Errorf("sum after a long idle = %d", got)
	}
}

func TestWindowWait(t *testing.T) {
	tests := []struct {
		name   string
		adds   [][2]int64 // sec, amount
		now    int64
		need   int64
		limit  int64
		expect time.Duration
	}{
		{name: "fits", adds: [][2]int64{{100, 5}}, now: 100, need: 5, limit: 10, expect: 0},
		{name: "wait for the oldest slot", adds: [][2]int64{{100, 6}, {110, 4}}, now: 115, need: 5, limit: 10, expect: 45 * time.Second},
		{name: "wait for two slots", adds: [][2]int64{{100, 6}, {110, 4}}, now: 115, need: 10, limit: 10, expect: 55 * time.Second},
		{name: "just before expiry", adds: [][2]int64{{100, 10}}, now: 159, need: 1, limit: 10, expect: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w window
			for _, a := range tt.adds {
				w.charge(a[0], a[1])
			}
			if got := w.wait(tt.now, tt.need, tt.limit); got != tt.expect {
				t.Errorf("wait = %v, want %v", got, tt.expect)
			}
		})
	}
}
