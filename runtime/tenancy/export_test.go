package tenancy

// Kill stops renewing and returning slices, as a control plane that died
// would: its slices stay in the store until they expire.
func (a *Admission) Kill() {
	a.stopUpkeep()
	<-a.upkeepDone
}
