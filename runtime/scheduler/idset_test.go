package scheduler

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// TestIDSetMatchesReference adds and removes random members of idSets of
// random sizes (one, two and three levels) and checks every answer against
// a plain slice of booleans scanned from the start.
func TestIDSetMatchesReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.SampledFrom([]int{0, 1, 63, 64, 65, 130, 4095, 4096, 4097, 20000}).Draw(t, "n")
		s, ref := newIDSet(n), make([]bool, n)
		refNext := func(i int) int {
			for j := max(i, 0); j < n; j++ {
				if ref[j] {
					return j
				}
			}
			return -1
		}
		for step := range rapid.IntRange(0, 200).Draw(t, "steps") {
			if n == 0 {
				break
			}
			// Bias towards a few clustered members so words empty and fill.
			i := rapid.OneOf(rapid.IntRange(0, n-1), rapid.IntRange(max(0, n-130), n-1), rapid.IntRange(0, min(n-1, 130))).Draw(t, fmt.Sprintf("i%d", step))
			if rapid.Bool().Draw(t, fmt.Sprintf("add%d", step)) {
				s.add(i)
				ref[i] = true
			} else {
				s.remove(i)
				ref[i] = false
			}
			from := rapid.IntRange(-1, n+1).Draw(t, fmt.Sprintf("from%d", step))
			if got, want := s.next(from), refNext(from); got != want {
				t.Fatalf("step %d: next(%d) = %d, want %d", step, from, got, want)
			}
			if got, want := s.empty(), refNext(0) < 0; got != want {
				t.Fatalf("step %d: empty() = %v, want %v", step, got, want)
			}
			if s.has(i) != ref[i] {
				t.Fatalf("step %d: has(%d) = %v, want %v", step, i, s.has(i), ref[i])
			}
		}
		// Walking with next visits exactly the members, in order.
		var got, want []int
		for j := s.next(0); j >= 0; j = s.next(j + 1) {
			got = append(got, j)
		}
		for j := range n {
			if ref[j] {
				want = append(want, j)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("walk = %v, want %v", got, want)
		}
	})
}
