package fleet

import (
	"errors"
	"slices"
	"sort"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
)

// ErrNotConnected is returned when a message is sent to a node whose agent
// has no session.
var ErrNotConnected = errors.New("node not connected")

// Nodes returns copies of every node, sorted by id.
func (f *Fleet) Nodes() []Node {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]Node, 0, len(f.nodes))
	for _, n := range f.nodes {
		out = append(out, copyNode(n))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Node returns a copy of one node.
func (f *Fleet) Node(id string) (Node, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n, ok := f.nodes[id]
	if !ok {
		return Node{}, false
	}
	return copyNode(n), true
}

func copyNode(n *Node) Node {
	c := *n
	c.conn = nil
	c.checkWaiters = nil
	if n.Inventory != nil {
		c.Inventory = proto.Clone(n.Inventory).(*agentv1.Inventory)
	}
	if n.Declaration != nil {
		c.Declaration = proto.Clone(n.Declaration).(*agentv1.Declaration)
	}
	if n.EngineChecks != nil {
		c.EngineChecks = make([]*agentv1.EngineCheck, len(n.EngineChecks))
		for i, ec := range n.EngineChecks {
			c.EngineChecks[i] = proto.Clone(ec).(*agentv1.EngineCheck)
		}
	}
	c.Warnings = slices.Clone(n.Warnings)
	return c
}

// Replicas returns copies of the live replicas followed by the recent failed
// ones, sorted by model then id.
func (f *Fleet) Replicas() []Replica {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]Replica, 0, len(f.replicas)+len(f.failed))
	for _, r := range f.replicas {
		out = append(out, copyReplica(r))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Model != out[j].Model {
			return out[i].Model < out[j].Model
		}
		return out[i].ID < out[j].ID
	})
	for i := len(f.failed) - 1; i >= 0; i-- {
		out = append(out, copyReplica(f.failed[i]))
	}
	return out
}

// ModelReplicas returns copies of model's replicas that have not left the
// fleet (the failed history of Replicas is not among them), sorted by id.
// It reads and copies only that model's (the fleet's index by model): a
// status read of one model in a catalog of many stays independent of how
// many replicas the others run.
func (f *Fleet) ModelReplicas(model string) []Replica {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []Replica
	for _, r := range sortedByID(f.byModel[model]) {
		out = append(out, copyReplica(r))
	}
	return out
}

func copyReplica(r *Replica) Replica {
	c := *r
	c.Shards = make([]*Shard, len(r.Shards))
	for i, s := range r.Shards {
		sc := *s
		sc.GPUs = slices.Clone(s.GPUs)
		sc.LastOutput = slices.Clone(s.LastOutput)
		if s.Fetch != nil {
			sc.Fetch = proto.Clone(s.Fetch).(*agentv1.FetchProgress)
		}
		sc.Start = nil
		c.Shards[i] = &sc
	}
	return c
}

// UsedGPUs returns, per node, the GPU indices held by shards that have not
// reported stopped: a failed or stopping replica keeps its GPUs until its
// engine is known gone.
func (f *Fleet) UsedGPUs() map[string]map[int]string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return usedGPUsLocked(f.replicas)
}

func usedGPUsLocked(replicas map[string]*Replica) map[string]map[int]string {
	used := map[string]map[int]string{}
	for _, r := range replicas {
		for _, s := range r.Shards {
			if s.State == agentv1.ShardState_SHARD_STATE_STOPPED {
				continue
			}
			for _, g := range s.GPUs {
				if used[s.Node] == nil {
					used[s.Node] = map[int]string{}
				}
				used[s.Node][g] = s.ID
			}
		}
	}
	return used
}

// UsedGPUs is UsedGPUs inside a transaction.
func (tx *Tx) UsedGPUs() map[string]map[int]string { return usedGPUsLocked(tx.f.replicas) }

// Nodes returns the live node objects inside a transaction, sorted by id.
func (tx *Tx) Nodes() []*Node {
	out := make([]*Node, 0, len(tx.f.nodes))
	for _, n := range tx.f.nodes {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Add records a newly placed replica inside a transaction.
func (tx *Tx) Add(r *Replica) {
	r.State = ReplicaStarting
	if r.Created.IsZero() {
		r.Created = tx.f.now()
	}
	tx.f.putReplicaLocked(r)
}
