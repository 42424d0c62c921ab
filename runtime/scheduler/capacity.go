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
// modified. A profile that takes neither GPUs nor memory fits without end,
// so it counts up to limit at once.
func Fit(s Snapshot, d Demand, limit int) Capacity {
	c := Capacity{ByProfile: map[string]int{}}
	f := NewFleet(s)
	for c.Replicas < limit {
		plan := f.Place(d)
		if !plan.Placed {
			break
		}
		if p := plan.Profile; p.TP == 0 && p.MinMemoryGB == 0 {
			// It takes neither GPUs nor memory: every further replica
			// places the same way.
			c.ByProfile[p.Name] += limit - c.Replicas
			c.Replicas = limit
			break
		}
		c.Replicas++
		c.ByProfile[plan.Profile.Name]++
		f.Assume(d, plan)
	}
	return c
}
