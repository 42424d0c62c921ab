package scheduler

// Capacity is how many replicas of one demand the fleet can hold on top of
// what it runs now.
type Capacity struct {
	// Replicas is how many placed, at most the limit asked for.
	Replicas int
	// ByProfile counts them by the name of the profile that placed them.
	ByProfile map[string]int
}

// Fit places replicas of d on s one after another, as the reconciler
// places a model's replicas up to scaling.min (Place, then Assume), until
// one does not place or limit have placed, and counts them. s itself is not
// modified.
func Fit(s Snapshot, d Demand, limit int) Capacity {
	c := Capacity{ByProfile: map[string]int{}}
	for c.Replicas < limit {
		plan := Place(s, d)
		if !plan.Placed {
			break
		}
		c.Replicas++
		c.ByProfile[plan.Profile.Name]++
		s = Assume(s, d, plan)
	}
	return c
}
