// Package fleet holds the control plane's live view of the fleet: nodes as
// their agents report them, and replicas with their shards. It is rebuilt from
// what agents report after a control-plane restart, never from the store.
//
// The fleet does no I/O of its own. Messages to agents go through the Conn a
// session registered; the reconciler decides what to send.
package fleet

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/api/specpb"
	"github.com/llmgw/llmgw/spec"
)

// NodeState is a node's life-cycle state as the control plane sees it.
type NodeState string

// Node states.
const (
	NodePending NodeState = "pending" // connected, inventory not yet usable
	NodeReady   NodeState = "ready"
	NodeLost    NodeState = "lost" // no heartbeat within the grace period
)

// ReplicaState is a replica's state.
type ReplicaState string

// Replica states.
const (
	ReplicaStarting ReplicaState = "starting"
	ReplicaReady    ReplicaState = "ready"
	ReplicaFailed   ReplicaState = "failed"
	ReplicaStopping ReplicaState = "stopping"
)

// Conn sends control messages to one connected agent.
type Conn interface {
	Send(*agentv1.ControlMessage) error
}

// Closer is implemented by a Conn whose session the control plane can end
// (a revoked node's).
type Closer interface {
	Close(reason string)
}

// Node is one node as its agent reported it.
type Node struct {
	ID          string
	Address     string
	Version     string
	State       NodeState
	Reason      string
	Inventory   *agentv1.Inventory
	Declaration *agentv1.Declaration
	Declared    bool
	// EngineChecks say whether each engine of the declaration in use can
	// start, as the agent last ran them; nil when it reported none.
	EngineChecks []*agentv1.EngineCheck
	// Warnings are about a node that can take work nonetheless (no AVX2);
	// Reason includes them.
	Warnings []string
	// LastSeen is when the current (or last) session was last heard from.
	LastSeen  time.Time
	Connected bool
	// Peer is the network address of the current (or last) session.
	Peer string
	// ConnectedSince is when the latest session started (kept after it
	// ends); zero before the first.
	ConnectedSince time.Time
	// Draining nodes take no new work; their replicas are moved elsewhere.
	Draining bool
	// PeerAddress is where the node serves its weights cache to the other
	// nodes of its fabric ("" when it serves none).
	PeerAddress string
	// Suspect is set the moment the node's session ends, or when it has
	// been silent for longer than ExpireSilent's bound, and cleared when it
	// is heard from again: a suspect node takes no new work. SuspectSince
	// and SuspectReason say since when and why.
	Suspect       bool
	SuspectSince  time.Time
	SuspectReason string
	// Silent is set once the node has not been heard from for longer than
	// ExpireSilent's bound (whether its session ended or not): its replicas
	// are then replaced elsewhere, while they keep serving until it is
	// lost. Cleared with Suspect.
	Silent bool

	conn   Conn
	connID uint64
	// checkWaiters are closed when the node's next engine checks arrive or
	// its session ends (RequestEngineChecks).
	checkWaiters []chan struct{}
}

// Shard is one process of a replica, on one node.
type Shard struct {
	ID             string
	Rank           int
	Node           string
	GPUs           []int
	State          agentv1.ShardState
	Error          string
	LastOutput     []string
	Endpoint       string
	RendezvousAddr string
	// Fetch is how far the download of the shard's weights is, while its
	// node fetches them; nil otherwise.
	Fetch *agentv1.FetchProgress
	// Source is the model's source the shard was started with ("" for a
	// shard adopted after a restart: its agent does not echo it).
	Source string
	// Start is the command that starts this shard; kept so workers can be
	// started once rank 0 reports its rendezvous address.
	Start *agentv1.StartShard
	// Sent records whether Start was sent to the agent.
	Sent bool
	// ReplicaGeneration is the replica_generation the shard's agent last
	// reported for it (in its Hello or a ShardStatus; "" from an agent of
	// a release without it), or the one last handed to it since (in its
	// StartShard or a Restamp). The reconciler tells the agent again
	// when it differs from the replica's Generation.
	ReplicaGeneration string
}

// Replica is one serving copy of a model: ShardsExpected shards, one per
// node, all inside one fabric when there is more than one.
type Replica struct {
	ID    string
	Model string
	// Profile is the catalog profile the replica was placed with (for an
	// adopted replica, as its agents echoed it): its Nodes is the shard
	// count, its Weight the routing weight. The reconciler keeps its
	// serving and placement fields (weight, priority, gpu_class, ...) at
	// those of the catalog's current profile of the same name
	// (spec.FollowProfile): they are not part of its generation, so editing
	// them restarts nothing.
	Profile spec.Profile
	// Generation is spec.ReplicaGeneration of the model and Profile when it
	// was placed (for a replica adopted from an earlier release, not yet
	// restamped, its whole-model spec.LegacyGeneration); models.Entry.Stale
	// compares it with the catalog's.
	Generation string
	Fabric     string
	Shards     []*Shard
	State      ReplicaState
	Error      string
	Created    time.Time
	// Adopted is true for replicas rebuilt from agent reports.
	Adopted bool
	// StopRequested is when the control plane asked its shards to stop; the
	// replica keeps its GPUs until every shard reported stopped or a grace
	// period passed, so nothing new lands on a card still in use.
	StopRequested time.Time
	// Failed records that it failed before being stopped.
	Failed bool
	// NodeFailed records that it failed because a node of its shards was
	// lost or removed, not by a fault of its own: that earns its model no
	// backoff, and its replacement is placed at once.
	NodeFailed bool
	// FetchActivity is the last time a fetch of one of its shards' weights
	// moved a byte or ended: the engine's start is timed from then, so a
	// long download is not taken for an engine that never became ready.
	FetchActivity time.Time
	// WarmStart records that, when it was placed, every node of its shards
	// had its weights at hand (a local path, or a fetched source its cache
	// held) and no engine download was due: its start can be compared
	// with an earlier one of the same build (the reconciler's slow-start
	// bound). False for an adopted replica.
	WarmStart bool
}

// ShardsExpected is the number of shards the replica has when whole: one
// per node of its profile.
func (r *Replica) ShardsExpected() int { return r.Profile.Shards() }

// Live reports whether the replica counts towards its model: neither failed
// nor being stopped.
func (r *Replica) Live() bool { return r.State != ReplicaFailed && r.State != ReplicaStopping }

// Fleet is the live state. All methods are safe for concurrent use.
type Fleet struct {
	mu       sync.RWMutex
	nodes    map[string]*Node
	replicas map[string]*Replica
	// byModel indexes replicas by model (kept by putReplicaLocked and
	// dropReplicaLocked): the reconciler reads one model's replicas per
	// catalog entry, and a walk of every replica per model is quadratic in
	// the catalog.
	byModel map[string]map[string]*Replica
	failed  []*Replica // recent failures, newest last, for operators
	// pending holds declarations stored for nodes whose session was not yet
	// registered: a session that read the store just before must not miss
	// them.
	pending map[string]*agentv1.Declaration
	// drains are nodes drained before this fleet saw them (a drain a
	// previous leader recorded): each is draining from its first session.
	drains   map[string]bool
	nextConn uint64
	changed  chan struct{}
	now      func() time.Time
	// collects are the CollectWeights requests awaiting an answer, by
	// request id (guarded by collectMu, not mu: an answer is delivered
	// without holding the fleet).
	collectMu sync.Mutex
	collects  map[string]chan *agentv1.WeightsCollected
}

// maxFailedKept bounds the list of recent failed replicas.
const maxFailedKept = 32

// SetClock replaces the clock the fleet stamps times with (tests that drive
// a reconciler on a clock of their own).
func (f *Fleet) SetClock(now func() time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = now
}

// New returns an empty fleet.
func New() *Fleet {
	return &Fleet{
		nodes:    map[string]*Node{},
		replicas: map[string]*Replica{},
		byModel:  map[string]map[string]*Replica{},
		pending:  map[string]*agentv1.Declaration{},
		changed:  make(chan struct{}, 1),
		now:      time.Now,
		collects: map[string]chan *agentv1.WeightsCollected{},
	}
}

// Changed is signalled (coalesced) whenever the fleet changes in a way the
// reconciler should look at.
func (f *Fleet) Changed() <-chan struct{} { return f.changed }

func (f *Fleet) notify() {
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// Opening is what a new agent session brings to Open.
type Opening struct {
	Hello       *agentv1.Hello
	Declaration *agentv1.Declaration
	Declared    bool
	Conn        Conn
	// Peer is the network address the session comes from, for logs and
	// for the error a second session gets.
	Peer string
}

// SessionConflict is Open's error when the node already has a live session:
// one that was heard from (hello, heartbeat or any report) within the bound
// Open was given.
type SessionConflict struct {
	Node string
	// Peer and Since are the live session's address and start.
	Peer  string
	Since time.Time
	// Silent is how long ago the live session was last heard from; Bound is
	// how long it may stay silent before a new session replaces it.
	Silent, Bound time.Duration
}

func (e *SessionConflict) Error() string {
	return fmt.Sprintf("node %s already has a live session from %s since %s (last heard %s ago; a session silent for %s is replaced)",
		e.Node, e.Peer, e.Since.UTC().Format(time.RFC3339), e.Silent.Round(time.Millisecond), e.Bound)
}

// Superseder is implemented by a Conn whose session the control plane can
// end because a newer session of the same node took its place.
type Superseder interface {
	Supersede(reason string)
}

// Session is one agent session Open registered. What it reports counts only
// while it is its node's current session: once a newer session replaced it,
// or the node was forgotten, its messages are ignored and Close changes
// nothing.
type Session struct {
	f    *Fleet
	node string
	id   uint64
	// Replaced describes the silent session this one replaced; nil when
	// the node had no connected session.
	Replaced *SessionConflict
}

// ID is the session's id, as Connect returns it.
func (s *Session) ID() uint64 { return s.id }

// Heartbeat records a heartbeat; false when the session is no longer current.
func (s *Session) Heartbeat(hb *agentv1.Heartbeat) bool {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	n := s.f.currentLocked(s.node, s.id)
	if n == nil {
		return false
	}
	s.f.heartbeatLocked(n, hb)
	return true
}

// ShardStatus records a shard state change (and counts as a heartbeat);
// false when the session is no longer current.
func (s *Session) ShardStatus(st *agentv1.ShardStatus) bool {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	n := s.f.currentLocked(s.node, s.id)
	if n == nil {
		return false
	}
	s.f.applyShardStatusLocked(s.node, st, false)
	s.f.heartbeatLocked(n, nil)
	s.f.notify()
	return true
}

// EngineChecks records the engine checks the agent ran; false when the
// session is no longer current.
func (s *Session) EngineChecks(checks []*agentv1.EngineCheck) bool {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	n := s.f.currentLocked(s.node, s.id)
	if n == nil {
		return false
	}
	s.f.engineChecksLocked(n, checks)
	return true
}

// Close marks the session ended, if it is still the node's current one.
func (s *Session) Close() { s.f.Disconnect(s.node, s.id) }

// currentLocked returns the node when session id is its current session.
func (f *Fleet) currentLocked(nodeID string, id uint64) *Node {
	n := f.nodes[nodeID]
	if n == nil || !n.Connected || n.connID != id {
		return nil
	}
	return n
}

// Open registers a node's new session unless the node has a live one. A
// connected session heard from within bound is live: the new session is
// refused with a *SessionConflict and nothing of its hello is recorded. A
// connected session silent for longer (its agent died, or its connection is
// half-open) is ended (through its Conn, when that is a Superseder) and
// replaced; Session.Replaced describes it.
func (f *Fleet) Open(nodeID string, o Opening, bound time.Duration) (*Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var replaced *SessionConflict
	if n := f.nodes[nodeID]; n != nil && n.Connected {
		c := &SessionConflict{Node: nodeID, Peer: n.Peer, Since: n.ConnectedSince, Silent: f.now().Sub(n.LastSeen), Bound: bound}
		if c.Silent <= bound {
			return nil, c
		}
		replaced = c
	}
	s := f.connectLocked(nodeID, o)
	s.Replaced = replaced
	return s, nil
}

// Connect records a node's session and returns an id for Disconnect. Unlike
// Open it never refuses: a session the node had is ended and replaced.
func (f *Fleet) Connect(hello *agentv1.Hello, nodeID string, decl *agentv1.Declaration, declared bool, conn Conn) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.connectLocked(nodeID, Opening{Hello: hello, Declaration: decl, Declared: declared, Conn: conn}).id
}

func (f *Fleet) connectLocked(nodeID string, o Opening) *Session {
	hello, decl, declared, conn := o.Hello, o.Declaration, o.Declared, o.Conn
	f.nextConn++
	n := f.nodes[nodeID]
	if n == nil {
		n = &Node{ID: nodeID}
		f.nodes[nodeID] = n
	}
	if n.conn != nil {
		// The older session learns it is over, and never speaks for the
		// node again (its id no longer matches).
		if s, ok := n.conn.(Superseder); ok {
			s.Supersede("replaced by a newer session of node " + nodeID + " from " + o.Peer)
		}
	}
	newer, hasNewer := f.pending[nodeID]
	if hasNewer {
		delete(f.pending, nodeID)
		decl, declared = newer, true
	}
	n.Address = hello.GetAddress()
	n.Version = hello.GetVersion()
	n.PeerAddress = hello.GetPeerAddress()
	n.Inventory = hello.GetInventory()
	n.EngineChecks = hello.GetEngineChecks()
	n.Declaration = decl
	n.Declared = declared
	n.LastSeen = f.now()
	n.ConnectedSince = n.LastSeen
	n.Connected = true
	n.clearSuspectLocked()
	n.Peer = o.Peer
	if f.drains[nodeID] {
		n.Draining = true
	}
	n.conn = conn
	n.connID = f.nextConn
	assessNode(n)
	// The hello carries the checks the agent has; whoever waited for the
	// old session's answer gets these.
	n.releaseCheckWaiters()
	if hasNewer {
		// Declared between the session's store lookup and now: the agent
		// was welcomed with the older copy.
		_ = conn.Send(&agentv1.ControlMessage{Msg: &agentv1.ControlMessage_Declaration{Declaration: newer}})
	}
	reported := map[string]bool{}
	for _, st := range hello.GetShards() {
		reported[st.GetShardId()] = true
		f.applyShardStatusLocked(nodeID, st, true)
	}
	// A shard we sent to this node that its agent no longer reports is gone
	// (the agent restarted without it, or never received the command): its
	// replica cannot be trusted to serve.
	for _, r := range f.replicas {
		if !r.Live() {
			continue
		}
		for _, s := range r.Shards {
			if s.Node == nodeID && s.Sent && !reported[s.ID] {
				f.failReplicaLocked(r, "node "+nodeID+" reconnected without shard "+s.ID)
				break
			}
		}
	}
	f.notify()
	return &Session{f: f, node: nodeID, id: n.connID}
}

// NoAVX2Warning is the warning a node whose CPU lacks AVX2 carries.
const NoAVX2Warning = "CPU has no AVX2: CPU inference (llama.cpp) will be several times slower; " +
	"on a Proxmox VM set the CPU type to host (the default, kvm64, hides AVX2 from the guest)"

// assessNode decides whether a connected node can take work, why not, and
// the warnings an operator should see. A failed engine check is named
// first: the node stays ready for its other engines, but the scheduler
// places nothing of that engine on it.
func assessNode(n *Node) {
	n.Warnings = nil
	if n.Inventory == nil {
		n.State, n.Reason = NodePending, "waiting for inventory"
		return
	}
	var notes []string
	failed := map[string]bool{}
	for _, c := range n.EngineChecks {
		if c.GetOk() {
			continue
		}
		failed[c.GetEngine()] = true
		if e := c.GetError(); e != "" {
			notes = append(notes, e)
		} else {
			notes = append(notes, c.GetEngine()+" cannot start")
		}
	}
	if e := n.Inventory.GetGpuError(); e != "" {
		notes = append(notes, e)
	}
	for _, fv := range n.Inventory.GetFabrics() {
		if !fv.GetInService() {
			notes = append(notes, "fabric "+fv.GetName()+" out of service: "+joinProblems(fv.GetProblems()))
		}
	}
	for _, es := range n.Inventory.GetEngines() {
		if !es.GetAvailable() && !failed[es.GetEngine()] {
			notes = append(notes, "engine "+es.GetEngine()+" unavailable: "+es.GetError())
		}
	}
	if n.Inventory.HasAvx2 != nil && !n.Inventory.GetHasAvx2() {
		n.Warnings = append(n.Warnings, NoAVX2Warning)
	}
	n.State, n.Reason = NodeReady, strings.Join(append(notes, n.Warnings...), "; ")
}

// ApplyEngineChecks records the engine checks a node's agent ran; they
// replace the ones before. It does not ask which session they came on (see
// Session.EngineChecks).
func (f *Fleet) ApplyEngineChecks(nodeID string, checks []*agentv1.EngineCheck) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.nodes[nodeID]
	if n == nil {
		return
	}
	f.engineChecksLocked(n, checks)
}

func (f *Fleet) engineChecksLocked(n *Node, checks []*agentv1.EngineCheck) {
	n.EngineChecks = checks
	n.LastSeen = f.now()
	assessNode(n)
	n.releaseCheckWaiters()
	f.notify()
}

// CheckEngines asks a node's agent to run its engine checks again; the
// results arrive as an EngineChecks message.
func (f *Fleet) CheckEngines(nodeID string) error {
	_, err := f.RequestEngineChecks(nodeID)
	return err
}

// RequestEngineChecks asks a node's agent to run its engine checks again
// and returns a channel that is closed when the node's next engine checks
// arrive, or when its session ends first; Node then tells which.
func (f *Fleet) RequestEngineChecks(nodeID string) (<-chan struct{}, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.nodes[nodeID]
	if n == nil || n.conn == nil {
		return nil, ErrNotConnected
	}
	if err := n.conn.Send(&agentv1.ControlMessage{Msg: &agentv1.ControlMessage_CheckEngines{CheckEngines: &agentv1.CheckEngines{}}}); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	n.checkWaiters = append(n.checkWaiters, done)
	return done, nil
}

// releaseCheckWaiters closes the channels RequestEngineChecks returned.
func (n *Node) releaseCheckWaiters() {
	for _, w := range n.checkWaiters {
		close(w)
	}
	n.checkWaiters = nil
}

func joinProblems(p []string) string {
	if len(p) == 0 {
		return "no reason reported"
	}
	return strings.Join(p, "; ")
}

// Disconnect marks a session closed. The node stays known until the grace
// period passes without it reconnecting.
func (f *Fleet) Disconnect(nodeID string, connID uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.nodes[nodeID]
	if n == nil || n.connID != connID {
		return
	}
	n.Connected = false
	n.conn = nil
	f.suspectLocked(n, "agent session ended")
	n.releaseCheckWaiters()
	f.notify()
}

// suspectLocked makes a node suspect, unless it is already.
func (f *Fleet) suspectLocked(n *Node, why string) {
	if n.Suspect {
		return
	}
	n.Suspect, n.SuspectSince, n.SuspectReason = true, f.now(), why
}

// clearSuspectLocked ends a node's suspicion: it was heard from.
func (n *Node) clearSuspectLocked() {
	n.Suspect, n.SuspectSince, n.SuspectReason, n.Silent = false, time.Time{}, "", false
}

// ExpireSilent marks silent (and suspect) every node not heard from for
// longer than after, whether its session ended (it became suspect then) or
// not, and returns the ids of the newly silent ones.
func (f *Fleet) ExpireSilent(after time.Duration) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	now := f.now()
	for id, n := range f.nodes {
		if n.Silent || n.State == NodeLost || now.Sub(n.LastSeen) <= after {
			continue
		}
		f.suspectLocked(n, "silent since "+n.LastSeen.UTC().Format(time.RFC3339))
		n.Silent = true
		out = append(out, id)
	}
	if len(out) > 0 {
		sort.Strings(out)
		f.notify()
	}
	return out
}

// Heartbeat records a heartbeat from the node, whichever session it came
// on; an agent session reports through its Session, which checks that it is
// still the node's current one.
func (f *Fleet) Heartbeat(nodeID string, hb *agentv1.Heartbeat) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.nodes[nodeID]
	if n == nil {
		return
	}
	f.heartbeatLocked(n, hb)
}

func (f *Fleet) heartbeatLocked(n *Node, hb *agentv1.Heartbeat) {
	n.LastSeen = f.now()
	if n.Suspect && n.Connected {
		n.clearSuspectLocked()
		f.notify()
	}
	if inv := hb.GetInventory(); inv != nil {
		n.Inventory = inv
		assessNode(n)
		f.notify()
	}
	if n.Inventory != nil {
		if gpus := hb.GetGpus(); len(gpus) > 0 {
			n.Inventory.Gpus = gpus
		}
		if m := hb.GetMemoryAvailableBytes(); m > 0 {
			n.Inventory.MemoryAvailableBytes = m
		}
		f.weightsCacheLocked(n, hb.GetWeightsCache())
	}
	if n.State == NodeLost {
		assessNode(n)
		f.notify()
	}
}

// ExpireLost marks nodes whose last heartbeat is older than grace as lost,
// fails their replicas, and returns the ids of newly lost nodes.
func (f *Fleet) ExpireLost(grace time.Duration) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var lost []string
	now := f.now()
	for id, n := range f.nodes {
		if n.State == NodeLost || now.Sub(n.LastSeen) <= grace {
			continue
		}
		n.State = NodeLost
		n.Reason = "no heartbeat since " + n.LastSeen.UTC().Format(time.RFC3339)
		lost = append(lost, id)
		for _, r := range f.replicas {
			for _, s := range r.Shards {
				if s.Node == id && r.Live() {
					f.failReplicaLocked(r, "node "+id+" lost")
					r.NodeFailed = true
				}
			}
		}
	}
	if len(lost) > 0 {
		sort.Strings(lost)
		f.notify()
	}
	return lost
}

// ApplyShardStatus records a shard state change reported by nodeID,
// whichever session it came on (see Session.ShardStatus).
func (f *Fleet) ApplyShardStatus(nodeID string, st *agentv1.ShardStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applyShardStatusLocked(nodeID, st, false)
	f.notify()
}

func (f *Fleet) applyShardStatusLocked(nodeID string, st *agentv1.ShardStatus, adopting bool) {
	r := f.replicas[st.GetReplicaId()]
	if r == nil {
		if !adopting {
			return // a report for a replica we already forgot
		}
		if st.GetState() == agentv1.ShardState_SHARD_STATE_FAILED || st.GetState() == agentv1.ShardState_SHARD_STATE_STOPPED {
			return
		}
		// A startup_timeout that does not parse is left zero: an adopted
		// replica's start is not timed.
		p, _ := specpb.ProfileFromProto(st.GetProfile())
		r = &Replica{
			ID:         st.GetReplicaId(),
			Model:      st.GetModel(),
			Profile:    p,
			Generation: st.GetReplicaGeneration(),
			Fabric:     st.GetFabric(),
			State:      ReplicaStarting,
			Created:    f.now(),
			Adopted:    true,
		}
		if r.Generation == "" {
			// Placed by a control plane older than replica generations
			// (and not restamped since): its whole-model stamp.
			r.Generation = st.GetModelGeneration()
		}
		f.putReplicaLocked(r)
	}
	var sh *Shard
	for _, s := range r.Shards {
		if s.ID == st.GetShardId() {
			sh = s
			break
		}
	}
	if sh == nil {
		if !adopting {
			return
		}
		sh = &Shard{ID: st.GetShardId(), Rank: int(st.GetRank()), Node: nodeID, Sent: true}
		for _, g := range st.GetGpuIndices() {
			sh.GPUs = append(sh.GPUs, int(g))
		}
		r.Shards = append(r.Shards, sh)
		sort.Slice(r.Shards, func(i, j int) bool { return r.Shards[i].Rank < r.Shards[j].Rank })
	}
	if sh.Node != nodeID {
		return // only the node running a shard speaks for it
	}
	sh.State = st.GetState()
	sh.ReplicaGeneration = st.GetReplicaGeneration()
	if st.GetEndpoint() != "" {
		sh.Endpoint = st.GetEndpoint()
	}
	if st.GetRendezvousAddr() != "" {
		sh.RendezvousAddr = st.GetRendezvousAddr()
	}
	if st.GetError() != "" {
		sh.Error = st.GetError()
	}
	if len(st.GetLastOutput()) > 0 {
		sh.LastOutput = slices.Clone(st.GetLastOutput())
	}
	switch fp := st.GetFetch(); {
	case fp != nil && (sh.Fetch == nil || fp.GetBytesDone() != sh.Fetch.GetBytesDone()):
		r.FetchActivity = f.now()
		sh.Fetch = proto.Clone(fp).(*agentv1.FetchProgress)
	case fp != nil:
		sh.Fetch = proto.Clone(fp).(*agentv1.FetchProgress)
	case sh.Fetch != nil:
		r.FetchActivity = f.now()
		sh.Fetch = nil
	}
	f.assessReplicaLocked(r)
}

// assessReplicaLocked derives a replica's state from its shards. A replica
// short of shards is never ready.
func (f *Fleet) assessReplicaLocked(r *Replica) {
	if r.State == ReplicaFailed || r.State == ReplicaStopping {
		return
	}
	ready := len(r.Shards) == r.ShardsExpected()
	for _, s := range r.Shards {
		switch s.State {
		case agentv1.ShardState_SHARD_STATE_FAILED, agentv1.ShardState_SHARD_STATE_STOPPED:
			why := s.Error
			if why == "" {
				why = "stopped"
			}
			f.failReplicaLocked(r, "shard "+s.ID+" on "+s.Node+": "+why)
			return
		case agentv1.ShardState_SHARD_STATE_READY:
		default:
			ready = false
		}
	}
	if ready {
		r.State = ReplicaReady
	} else if r.State == ReplicaReady {
		if len(r.Shards) < r.ShardsExpected() {
			f.failReplicaLocked(r, "replica short of shards")
			return
		}
		r.State = ReplicaStarting
	}
}

func (f *Fleet) failReplicaLocked(r *Replica, why string) {
	r.State = ReplicaFailed
	if r.Error == "" {
		r.Error = why
	}
}

// AddReplica records a newly placed replica (state starting).
func (f *Fleet) AddReplica(r *Replica) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r.State = ReplicaStarting
	if r.Created.IsZero() {
		r.Created = f.now()
	}
	f.putReplicaLocked(r)
	f.notify()
}

// Update runs fn with the fleet locked, for the reconciler's multi-step
// changes. fn must not block.
func (f *Fleet) Update(fn func(tx *Tx)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(&Tx{f: f})
}

// Read runs fn with the fleet read-locked: agent reports and reconciler
// passes wait only for writers, so a dry run copies what it needs here and
// works on the copy. fn must only read (Replicas, Nodes, Node, UsedGPUs)
// and must not block.
func (f *Fleet) Read(fn func(tx *Tx)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(&Tx{f: f})
}

// Tx gives the reconciler locked access to the fleet.
type Tx struct{ f *Fleet }

// Replicas returns every replica, sorted by id (live objects; only valid
// inside Update).
func (tx *Tx) Replicas() []*Replica {
	return sortedByID(tx.f.replicas)
}

// ModelReplicas returns the replicas of one model, sorted by id: what
// Replicas returns, filtered to rep.Model == model, read from the fleet's
// index by model, so its cost is that model's replica count (live objects;
// only valid inside Update).
func (tx *Tx) ModelReplicas(model string) []*Replica {
	return sortedByID(tx.f.byModel[model])
}

func sortedByID(m map[string]*Replica) []*Replica {
	out := make([]*Replica, 0, len(m))
	for _, r := range m {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// putReplicaLocked records r, in the replicas and in the index by model (a
// replica's Model never changes).
func (f *Fleet) putReplicaLocked(r *Replica) {
	if old := f.replicas[r.ID]; old != nil && old.Model != r.Model {
		f.dropReplicaLocked(old)
	}
	f.replicas[r.ID] = r
	byID := f.byModel[r.Model]
	if byID == nil {
		byID = map[string]*Replica{}
		f.byModel[r.Model] = byID
	}
	byID[r.ID] = r
}

// dropReplicaLocked forgets r, from the replicas and the index by model.
func (f *Fleet) dropReplicaLocked(r *Replica) {
	delete(f.replicas, r.ID)
	if byID := f.byModel[r.Model]; byID != nil {
		delete(byID, r.ID)
		if len(byID) == 0 {
			delete(f.byModel, r.Model)
		}
	}
}

// Node returns a node (live object).
func (tx *Tx) Node(id string) *Node { return tx.f.nodes[id] }

// Send sends msg to node id's agent, if it is connected.
func (tx *Tx) Send(id string, msg *agentv1.ControlMessage) error {
	n := tx.f.nodes[id]
	if n == nil || n.conn == nil {
		return ErrNotConnected
	}
	return n.conn.Send(msg)
}

// Remove forgets a replica; a failed one is kept in the recent failures.
func (tx *Tx) Remove(r *Replica) {
	tx.f.dropReplicaLocked(r)
	if r.State == ReplicaFailed || r.Failed {
		r.State = ReplicaFailed // what operators see of it from now on
		tx.f.failed = append(tx.f.failed, r)
		if len(tx.f.failed) > maxFailedKept {
			tx.f.failed = tx.f.failed[len(tx.f.failed)-maxFailedKept:]
		}
	}
}

// Stopping records that the replica's shards were asked to stop at now. It
// keeps its GPUs until Stopped reports it gone.
func (tx *Tx) Stopping(r *Replica, now time.Time) {
	if r.State == ReplicaFailed {
		r.Failed = true
	}
	r.State = ReplicaStopping
	r.StopRequested = now
}

// Stopped reports whether every shard of a stopping replica has stopped (or
// was never started).
func (r *Replica) Stopped() bool {
	for _, s := range r.Shards {
		if s.Sent && s.State != agentv1.ShardState_SHARD_STATE_STOPPED && s.State != agentv1.ShardState_SHARD_STATE_FAILED {
			return false
		}
	}
	return true
}

// Fail marks a replica failed.
func (tx *Tx) Fail(r *Replica, why string) { tx.f.failReplicaLocked(r, why) }

// Declare records a new declaration for a node and, when its agent is
// connected, sends it; the agent answers with a new inventory.
func (f *Fleet) Declare(nodeID string, decl *agentv1.Declaration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	// Also kept for the next session: one that read the store before this
	// declaration was stored (or a reconnect racing with it) gets it when it
	// registers.
	f.pending[nodeID] = decl
	n := f.nodes[nodeID]
	if n == nil {
		return nil
	}
	n.Declaration = decl
	n.Declared = true
	f.notify()
	if n.conn == nil {
		return nil
	}
	return n.conn.Send(&agentv1.ControlMessage{Msg: &agentv1.ControlMessage_Declaration{Declaration: decl}})
}

// Undeclare records that the control plane no longer holds a declaration
// for the node.
func (f *Fleet) Undeclare(nodeID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.pending, nodeID)
	if n := f.nodes[nodeID]; n != nil {
		n.Declared = false
	}
}

// SetDraining starts or stops draining a node and returns how many replicas
// have a shard on it.
func (f *Fleet) SetDraining(nodeID string, draining bool) (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.nodes[nodeID]
	if n == nil {
		return 0, false
	}
	n.Draining = draining
	if !draining {
		f.forgetDrainLocked(nodeID)
	}
	count := 0
	for _, r := range f.replicas {
		for _, s := range r.Shards {
			if s.Node == nodeID {
				count++
				break
			}
		}
	}
	f.notify()
	return count, true
}

// Forget closes a node's session (when its identity was revoked) and drops
// it from the fleet. Its replicas fail and are rebuilt elsewhere.
func (f *Fleet) Forget(nodeID, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.nodes[nodeID]
	if n == nil {
		return
	}
	// Stop the node's engines while its session is still open: once it is
	// closed nothing reaches the machine.
	if n.conn != nil {
		for _, r := range f.replicas {
			for _, s := range r.Shards {
				if s.Node == nodeID && s.Sent {
					_ = n.conn.Send(&agentv1.ControlMessage{Msg: &agentv1.ControlMessage_StopShard{StopShard: &agentv1.StopShard{ShardId: s.ID, Reason: reason}}})
				}
			}
		}
	}
	if c, ok := n.conn.(Closer); ok {
		c.Close(reason)
	}
	for _, r := range f.replicas {
		for _, s := range r.Shards {
			if s.Node == nodeID && r.Live() {
				f.failReplicaLocked(r, "node "+nodeID+" removed: "+reason)
				r.NodeFailed = true
				break
			}
		}
	}
	n.releaseCheckWaiters()
	delete(f.nodes, nodeID)
	f.notify()
}
