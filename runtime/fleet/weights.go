package fleet

import (
	agentv1 "github.com/llmgw/llmgw/api/agentv1"
)

// WeightsCache is what a node's weights cache held when its agent last
// reported it; nil for an agent that does not report it.
func (n *Node) WeightsCache() *agentv1.WeightsCache {
	return n.Inventory.GetWeightsCache()
}

// Fabric is the fabric in service on the node ("" for none).
func (n *Node) Fabric() string {
	for _, fv := range n.Inventory.GetFabrics() {
		if fv.GetInService() {
			return fv.GetName()
		}
	}
	return ""
}

// Holds reports whether the node's weights cache, as last reported, holds
// source.
func (n *Node) Holds(source string) bool {
	for _, e := range n.WeightsCache().GetEntries() {
		if e.GetSource() == source {
			return true
		}
	}
	return false
}

// weightsCacheLocked records a node's weights cache report.
func (f *Fleet) weightsCacheLocked(n *Node, wc *agentv1.WeightsCache) {
	if wc == nil || n.Inventory == nil {
		return
	}
	n.Inventory.WeightsCache = wc
	f.notify()
}

// RequestCollect sends m to a node's agent and returns a channel that
// receives its answer; CancelCollect forgets a request whose answer is no
// longer awaited.
func (f *Fleet) RequestCollect(nodeID string, m *agentv1.CollectWeights) (<-chan *agentv1.WeightsCollected, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.nodes[nodeID]
	if n == nil || n.conn == nil {
		return nil, ErrNotConnected
	}
	ch := make(chan *agentv1.WeightsCollected, 1)
	f.collectMu.Lock()
	f.collects[m.GetRequestId()] = ch
	f.collectMu.Unlock()
	if err := n.conn.Send(&agentv1.ControlMessage{Msg: &agentv1.ControlMessage_CollectWeights{CollectWeights: m}}); err != nil {
		f.CancelCollect(m.GetRequestId())
		return nil, err
	}
	return ch, nil
}

// CancelCollect forgets a CollectWeights request.
func (f *Fleet) CancelCollect(requestID string) {
	f.collectMu.Lock()
	delete(f.collects, requestID)
	f.collectMu.Unlock()
}

// WeightsCollected records a node's answer to a CollectWeights: the cache
// it reports, and the answer for whoever waits for it. false when the
// session is no longer current.
func (s *Session) WeightsCollected(ans *agentv1.WeightsCollected) bool {
	s.f.mu.Lock()
	n := s.f.currentLocked(s.node, s.id)
	if n == nil {
		s.f.mu.Unlock()
		return false
	}
	s.f.weightsCacheLocked(n, ans.GetCache())
	n.LastSeen = s.f.now()
	s.f.mu.Unlock()
	s.f.deliverCollected(ans)
	return true
}

// ApplyWeightsCollected records a node's answer to a CollectWeights without
// asking which session it came on (see Session.WeightsCollected).
func (f *Fleet) ApplyWeightsCollected(nodeID string, ans *agentv1.WeightsCollected) {
	f.mu.Lock()
	if n := f.nodes[nodeID]; n != nil {
		f.weightsCacheLocked(n, ans.GetCache())
	}
	f.mu.Unlock()
	f.deliverCollected(ans)
}

func (f *Fleet) deliverCollected(ans *agentv1.WeightsCollected) {
	f.collectMu.Lock()
	ch, ok := f.collects[ans.GetRequestId()]
	delete(f.collects, ans.GetRequestId())
	f.collectMu.Unlock()
	if ok {
		ch <- ans // buffered, one answer per request
	}
}
