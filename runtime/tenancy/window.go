package tenancy

import "time"

// windowSlots is the number of one-second slots in a window: limits are
// per minute.
const windowSlots = 60

// window counts amounts (requests or tokens) over the last minute in
// one-second slots, with a running total so that reading it costs nothing.
// Amounts are charged to the slot of the second they were admitted in and
// may be corrected there later (a reservation settled at its actual size)
// while the slot is still in the window. It is not safe for concurrent
// use; the admission lock guards it.
type window struct {
	// sec[i] is the Unix second slot i counts; amount[i] its total.
	sec    [windowSlots]int64
	amount [windowSlots]int64
	total  int64
	// latest is the newest second the window has been advanced to.
	latest int64
}

// advance drops the slots that have left the window by now. Time never
// runs backwards for the window: an older now is treated as latest.
func (w *window) advance(now int64) {
	if now <= w.latest {
		return
	}
	if now-w.latest >= windowSlots {
		w.sec, w.amount, w.total = [windowSlots]int64{}, [windowSlots]int64{}, 0
		w.latest = now
		return
	}
	for s := w.latest + 1; s <= now; s++ {
		i := s % windowSlots
		if w.sec[i] != s {
			w.total -= w.amount[i]
			w.sec[i], w.amount[i] = s, 0
		}
	}
	w.latest = now
}

// sum returns the amount charged in the minute ending at now.
func (w *window) sum(now int64) int64 {
	w.advance(now)
	return w.total
}

// add charges n to the slot of second sec. A second that has left the
// window (relative to now) is ignored: its amount no longer counts. A slot
// never goes below zero.
func (w *window) add(sec, now, n int64) {
	w.advance(now)
	if w.latest-sec >= windowSlots || sec > w.latest {
		return
	}
	i := sec % windowSlots
	if w.sec[i] != sec {
		return // the slot was never charged in this window
	}
	if w.amount[i]+n < 0 {
		n = -w.amount[i]
	}
	w.amount[i] += n
	w.total += n
}

// charge adds n to the current second's slot.
func (w *window) charge(now, n int64) {
	w.advance(now)
	i := now % windowSlots
	if w.sec[i] != now {
		w.total -= w.amount[i]
		w.sec[i], w.amount[i] = now, 0
	}
	w.amount[i] += n
	w.total += n
}

// wait returns how long until need more fits under limit, as old slots
// leave the window; zero when it fits now. It assumes need <= limit.
func (w *window) wait(now, need, limit int64) time.Duration {
	w.advance(now)
	total := w.total
	if total+need <= limit {
		return 0
	}
	// Release slots oldest first until enough has expired.
	for age := int64(windowSlots - 1); age >= 0; age-- {
		sec := w.latest - age
		i := sec % windowSlots
		if w.sec[i] != sec {
			continue
		}
		total -= w.amount[i]
		if total+need <= limit {
			// Slot sec stops counting at sec+windowSlots.
			return time.Duration(sec+windowSlots-now) * time.Second
		}
	}
	return windowSlots * time.Second
}
