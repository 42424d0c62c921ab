package reconcile

import "time"

// Resume sets, before Run, the replicas to wait for and how long: a control
// plane that takes the fleet over from another (or restarts) holds
// placement until the replicas the last leader recorded as live are
// reported again by their agents, or until holdUntil.
func (r *Reconciler) Resume(expected []string, holdUntil time.Time) {
	r.opts.Expected = expected
	r.opts.HoldPlacementUntil = holdUntil
}
