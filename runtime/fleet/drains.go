package fleet

// DrainOnConnect records nodes an operator drained before this fleet knew
// them (a new leader reads them from the store): each is draining as soon
// as its agent connects, and those connected already start draining now.
func (f *Fleet) DrainOnConnect(nodes []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.drains == nil {
		f.drains = map[string]bool{}
	}
	for _, id := range nodes {
		f.drains[id] = true
		if n := f.nodes[id]; n != nil {
			n.Draining = true
		}
	}
	f.notify()
}

// forgetDrain drops a node from the recorded drains (SetDraining's cancel).
func (f *Fleet) forgetDrainLocked(nodeID string) { delete(f.drains, nodeID) }
