package tenancy

import "time"

// windowSlots is the number of one-second slots in a window: limits are
// per minute.
const windowSlots = 60

// window counts amounts (requests or tokens) over the last minute in
// one-second slots. Amounts are charged to the slot of the second they
// were admitted in, and may be corrected there later (a reservation
// settled at its actual size) while the slot is still in the window. It is
// not safe for concurrent use; the limiter holds the lock.
type window struct {
	// sec[i] is the Unix second slot i counts; amount[i] its total.
	sec    [windowSlots]int64
	amount [windowSlots]int64
}

// sum returns the amount charged in the minute ending at now.
func (w *window) sum(now int64) int64 {
	var total int64
	for i := range w.sec {
		if now-w.sec[i] < windowSlots && w.sec[i] <= now {
			total += w.amount[i]
		}
	}
	return total
}

// add charges n to the slot of second sec. A second that has left the
// window (relative to now) is ignored: its amount no longer counts.
func (w *window) add(sec, now, n int64) {
	if now-sec >= windowSlots || sec > now {
		return
	}
	i := sec % windowSlots
	if w.sec[i] != sec {
		w.sec[i], w.amount[i] = sec, 0
	}
	w.amount[i] += n
	if w.amount[i] < 0 {
		w.amount[i] = 0
	}
}

// wait returns how long until need more fits under limit, as old slots
// leave the window; zero when it fits now. It assumes need <= limit.
func (w *window) wait(now, need, limit int64) time.Duration {
	total := w.sum(now)
	if total+need <= limit {
		return 0
	}
	// Release slots oldest first until enough has expired.
	for age := int64(windowSlots - 1); age >= 0; age-- {
		sec := now - age
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
