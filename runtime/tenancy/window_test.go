package tenancy

import (
	"testing"
	"time"
)

func TestWindow(t *testing.T) {
	var w window
	w.add(100, 100, 10)
	w.add(130, 130, 5)
	if got := w.sum(130); got != 15 {
		t.Fatalf("sum at 130 = %d, want 15", got)
	}
	if got := w.sum(160); got != 5 {
		t.Errorf("sum at 160 (the slot of 100 left the window) = %d, want 5", got)
	}
	// A correction to a slot still in the window counts; one to a slot
	// that left it is ignored, and nothing goes below zero.
	w.add(130, 150, -2)
	if got := w.sum(150); got != 13 {
		t.Errorf("after correction sum = %d, want 13", got)
	}
	w.add(100, 170, 50)
	if got := w.sum(170); got != 3 {
		t.Errorf("a correction outside the window changed the sum: %d", got)
	}
	w.add(130, 150, -100)
	if got := w.sum(150); got != 10 {
		t.Errorf("after over-correction sum = %d, want 10 (slot 100's 10, slot 130 floored at 0)", got)
	}
	// The slot ring reuses slots: second 160 shares slot 100's index.
	w.add(160, 160, 7)
	if got := w.sum(160); got != 7 {
		t.Errorf("sum at 160 after reuse = %d, want 7", got)
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
				w.add(a[0], tt.now, a[1])
			}
			if got := w.wait(tt.now, tt.need, tt.limit); got != tt.expect {
				t.Errorf("wait = %v, want %v", got, tt.expect)
			}
		})
	}
}
