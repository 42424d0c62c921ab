package scheduler

import "math/bits"

// idSet is a set of the integers [0, n) that adds, removes and finds the
// next member at or after a given one in time growing with log64(n), so
// that moving a node between candidate groups, or finding a group's first
// nodes, costs the same on a fleet of any size. Level 0 holds one bit per
// member; a bit of level k+1 is set when word j of level k is not zero. The
// top level is one word.
type idSet struct {
	levels [][]uint64
}

func newIDSet(n int) idSet {
	var s idSet
	for {
		words := max((n+63)/64, 1)
		s.levels = append(s.levels, make([]uint64, words))
		if words == 1 {
			return s
		}
		n = words
	}
}

func (s *idSet) add(i int) {
	for _, l := range s.levels {
		w := i >> 6
		was := l[w]
		l[w] |= 1 << (i & 63)
		if was != 0 {
			return // the levels above already know the word is not empty
		}
		i = w
	}
}

func (s *idSet) remove(i int) {
	for _, l := range s.levels {
		w := i >> 6
		l[w] &^= 1 << (i & 63)
		if l[w] != 0 {
			return
		}
		i = w
	}
}

func (s *idSet) has(i int) bool {
	return s.levels[0][i>>6]&(1<<(i&63)) != 0
}

// empty reports whether the set has no member.
func (s *idSet) empty() bool {
	return s.levels[len(s.levels)-1][0] == 0
}

// next returns the smallest member at or after i, or -1.
func (s *idSet) next(i int) int {
	return s.nextAt(0, max(i, 0))
}

func (s *idSet) nextAt(level, i int) int {
	l := s.levels[level]
	w := i >> 6
	if w >= len(l) {
		return -1
	}
	if m := l[w] >> (i & 63); m != 0 {
		return i + bits.TrailingZeros64(m)
	}
	if level+1 == len(s.levels) {
		return -1 // the top level is one word: nothing after it
	}
	j := s.nextAt(level+1, w+1)
	if j < 0 {
		return -1
	}
	return j<<6 + bits.TrailingZeros64(l[j])
}
