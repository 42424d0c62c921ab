// Package agentsvc is the control plane's side of the agent protocol: it
// authenticates each agent by its client certificate, records what the agent
// reports in the fleet, and carries the reconciler's commands to it.
package agentsvc

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/runtime/fleet"
)

// Declarations is where the control plane keeps node declarations and
// revoked identities.
type Declarations interface {
	// Declaration returns the control plane's copy of a node's declaration,
	// and false when it holds none.
	Declaration(ctx context.Context, node string) (*agentv1.Declaration, bool, error)
	// RevokedAt returns when the node's identity was revoked, and false
	// when it has not been.
	RevokedAt(ctx context.Context, node string) (time.Time, bool, error)
}

// issueSkew is how far pki backdates a certificate's NotBefore; a
// certificate counts as issued at NotBefore + issueSkew.
const issueSkew = 5 * time.Minute

// Options configure the service.
type Options struct {
	Fleet             *fleet.Fleet
	Declarations      Declarations
	RequireDeclared   bool
	HeartbeatInterval time.Duration
	// HelloTimeout bounds how long a new stream may wait before its Hello.
	HelloTimeout time.Duration
	// SessionSilence is how long a node's session may go unheard (no
	// heartbeat nor any other message) and still count as live: while it
	// does, a second session of the node is refused; past it, a new session
	// replaces it. 0 means three heartbeat intervals.
	SessionSilence time.Duration
	// Leadership, when set, says whether this control plane owns the
	// fleet; only the leader takes agent sessions.
	Leadership func() Leadership
	Logger     *slog.Logger
}

// Leadership is what an agent session needs to know of the election.
type Leadership struct {
	Leading bool
	// Token is the leader's fencing token, sent to the agent.
	Token int64
	// Leader names the control plane that leads and LeaderAddr is its agent
	// address; both empty while none is known.
	Leader, LeaderAddr string
}

// Service implements agentv1.AgentServiceServer.
type Service struct {
	agentv1.UnimplementedAgentServiceServer
	opts Options
	log  *slog.Logger
}

// New returns the service.
func New(opts Options) *Service {
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = 5 * time.Second
	}
	if opts.HelloTimeout <= 0 {
		opts.HelloTimeout = 30 * time.Second
	}
	if opts.SessionSilence <= 0 {
		opts.SessionSilence = 3 * opts.HeartbeatInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Service{opts: opts, log: opts.Logger.With("component", "agents")}
}

// PeerNodeID returns the common name of the verified client certificate on
// ctx's connection: the node's identity.
func PeerNodeID(ctx context.Context) (string, error) {
	cert, err := peerCert(ctx)
	if err != nil {
		return "", err
	}
	return cert.Subject.CommonName, nil
}

func peerCert(ctx context.Context) (*x509.Certificate, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, errors.New("no peer information")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil, errors.New("connection is not TLS")
	}
	chains := info.State.VerifiedChains
	if len(chains) == 0 || len(chains[0]) == 0 {
		return nil, errors.New("no verified client certificate")
	}
	if chains[0][0].Subject.CommonName == "" {
		return nil, errors.New("client certificate has an empty common name")
	}
	return chains[0][0], nil
}

func remoteAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return "unknown"
}

// sendQueue is how many control messages may wait for an agent. The fleet
// sends while holding its lock, so a send must never block on a peer that
// stopped reading; a session whose queue fills up is closed instead.
const sendQueue = 1024

// sender is the sending half of an agent stream.
type sender interface {
	Send(*agentv1.ControlMessage) error
}

// streamConn queues messages for one agent and sends them, in order, from
// its own goroutine; it also lets the control plane end the session.
type streamConn struct {
	out    chan *agentv1.ControlMessage
	closed chan closing
	once   sync.Once
}

// closing is why the control plane ends a session, and the status the
// agent gets.
type closing struct {
	code   codes.Code
	reason string
}

func newStreamConn() *streamConn {
	return &streamConn{out: make(chan *agentv1.ControlMessage, sendQueue), closed: make(chan closing, 1)}
}

// Send queues m without blocking. A full queue closes the session.
func (c *streamConn) Send(m *agentv1.ControlMessage) error {
	select {
	case c.out <- m:
		return nil
	default:
		err := fmt.Errorf("the agent is not reading: %d control messages are waiting", sendQueue)
		c.end(codes.Unavailable, err.Error())
		return err
	}
}

// run sends queued messages until done closes or a send fails (the
// session is then closed).
func (c *streamConn) run(stream sender, done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case m := <-c.out:
			if err := stream.Send(m); err != nil {
				c.end(codes.Unavailable, "sending to the agent: "+err.Error())
				return
			}
		}
	}
}

// Close ends the session with reason: the node may no longer connect
// (its identity was revoked).
func (c *streamConn) Close(reason string) { c.end(codes.PermissionDenied, reason) }

// Supersede ends the session because a newer session of its node replaced
// it.
func (c *streamConn) Supersede(reason string) { c.end(codes.Aborted, reason) }

func (c *streamConn) end(code codes.Code, reason string) {
	c.once.Do(func() {
		c.closed <- closing{code, reason}
		close(c.closed)
	})
}

// Connect runs one agent session.
func (s *Service) Connect(stream agentv1.AgentService_ConnectServer) error {
	ctx := stream.Context()
	remote := remoteAddr(ctx)
	cert, err := peerCert(ctx)
	if err != nil {
		s.log.Warn("agent refused", "remote", remote, "reason", err.Error())
		return status.Errorf(codes.Unauthenticated, "agent refused: %v", err)
	}
	cn := cert.Subject.CommonName
	var token int64
	if s.opts.Leadership != nil {
		l := s.opts.Leadership()
		if !l.Leading {
			return s.refuseStandby(stream, cn, remote, l)
		}
		token = l.Token
	}
	hello, err := s.awaitHello(stream)
	if err != nil {
		s.log.Warn("agent refused", "node", cn, "remote", remote, "reason", err.Error())
		return status.Errorf(codes.InvalidArgument, "agent refused: %v", err)
	}
	if claimed := hello.GetNodeId(); claimed != "" && claimed != cn {
		reason := fmt.Sprintf("claimed node id %q does not match certificate common name %q", claimed, cn)
		s.log.Warn("agent refused", "node", cn, "claimed", claimed, "remote", remote, "reason", reason)
		return status.Errorf(codes.PermissionDenied, "agent refused: %s", reason)
	}
	decl, declared, err := s.lookup(ctx, cn)
	if err != nil {
		s.log.Error("agent refused", "node", cn, "remote", remote, "reason", err.Error())
		return status.Errorf(codes.Unavailable, "agent refused: %v", err)
	}
	// A revocation refuses every certificate issued before it; a node
	// rebuilt under the same name gets a new certificate and is accepted.
	// Certificate times have whole seconds, so the comparison does too.
	if at, revoked, err := s.opts.Declarations.RevokedAt(ctx, cn); err != nil {
		return status.Errorf(codes.Unavailable, "checking revocation of %s: %v", cn, err)
	} else if revoked && cert.NotBefore.Add(issueSkew).Before(at.Truncate(time.Second)) {
		reason := fmt.Sprintf("the identity of node %q was revoked at %s; this certificate was issued before that", cn, at.UTC().Format(time.RFC3339))
		s.log.Warn("agent refused", "node", cn, "remote", remote, "reason", reason)
		return status.Errorf(codes.PermissionDenied, "agent refused: %s", reason)
	}
	if !declared && s.opts.RequireDeclared {
		reason := fmt.Sprintf("node %q is not declared and agents.require_declared is on", cn)
		s.log.Warn("agent refused", "node", cn, "remote", remote, "reason", reason)
		return status.Errorf(codes.PermissionDenied, "agent refused: %s", reason)
	}
	effective := hello.GetDeclaration()
	if declared {
		effective = decl
	}
	// One live session per node: a second one is refused before it is
	// welcomed, and nothing of its hello is recorded.
	conn := newStreamConn()
	sess, err := s.opts.Fleet.Open(cn, fleet.Opening{Hello: hello, Declaration: effective, Declared: declared, Conn: conn, Peer: remote}, s.opts.SessionSilence)
	var conflict *fleet.SessionConflict
	if errors.As(err, &conflict) {
		s.log.Warn("agent refused", "node", cn, "remote", remote, "live_session_remote", conflict.Peer,
			"live_session_since", conflict.Since.UTC().Format(time.RFC3339), "live_session_silent", conflict.Silent.Round(time.Millisecond).String(),
			"reason", "the node already has a live session")
		return status.Errorf(codes.AlreadyExists, "agent refused: %v", conflict)
	}
	if err != nil {
		return status.Errorf(codes.Internal, "registering the session of %s: %v", cn, err)
	}
	defer sess.Close()
	if r := sess.Replaced; r != nil {
		s.log.Warn("agent session replaced", "node", cn, "remote", remote, "replaced_remote", r.Peer,
			"replaced_since", r.Since.UTC().Format(time.RFC3339), "replaced_silent", r.Silent.Round(time.Millisecond).String())
	}
	// The welcome goes first, on this goroutine; everything after it
	// through the queue (what the fleet sent meanwhile waits there). The
	// fencing token rides in its header.
	if token > 0 {
		if err := stream.SendHeader(metadata.Pairs(agentv1.MetadataFencingToken, strconv.FormatInt(token, 10))); err != nil {
			return err
		}
	}
	if err := stream.Send(&agentv1.ControlMessage{Msg: &agentv1.ControlMessage_Welcome{Welcome: &agentv1.Welcome{
		Declaration:         decl,
		HeartbeatIntervalMs: s.opts.HeartbeatInterval.Milliseconds(),
	}}}); err != nil {
		return err
	}
	sessionDone := make(chan struct{})
	defer close(sessionDone)
	go conn.run(stream, sessionDone)
	s.log.Info("agent connected", "node", cn, "remote", remote, "version", hello.GetVersion(),
		"gpus", len(hello.GetInventory().GetGpus()), "shards", len(hello.GetShards()), "declared", declared)
	for _, fv := range hello.GetInventory().GetFabrics() {
		if !fv.GetInService() {
			s.log.Warn("fabric out of service", "node", cn, "fabric", fv.GetName(), "problems", fv.GetProblems())
		}
	}
	s.logEngineChecks(cn, hello.GetEngineChecks())
	msgs := make(chan *agentv1.AgentMessage)
	recvErr := make(chan error, 1)
	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- msg:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		var msg *agentv1.AgentMessage
		select {
		case err := <-recvErr:
			s.log.Info("agent disconnected", "node", cn, "reason", err.Error())
			return nil
		case c := <-conn.closed:
			s.log.Warn("agent session closed", "node", cn, "reason", c.reason)
			if c.code == codes.PermissionDenied {
				return status.Errorf(c.code, "agent refused: %s", c.reason)
			}
			return status.Errorf(c.code, "session closed by the control plane: %s", c.reason)
		case msg = <-msgs:
		}
		// A session that is no longer its node's current one (replaced,
		// or the node was removed) speaks for it no more.
		current := true
		switch m := msg.GetMsg().(type) {
		case *agentv1.AgentMessage_Heartbeat:
			current = sess.Heartbeat(m.Heartbeat)
		case *agentv1.AgentMessage_ShardStatus:
			st := m.ShardStatus
			s.log.Debug("shard status", "node", cn, "shard", st.GetShardId(), "state", st.GetState().String())
			if st.GetState() == agentv1.ShardState_SHARD_STATE_FAILED {
				s.log.Warn("shard failed", "node", cn, "shard", st.GetShardId(), "model", st.GetModel(), "error", st.GetError())
			}
			current = sess.ShardStatus(st)
		case *agentv1.AgentMessage_EngineChecks:
			checks := m.EngineChecks.GetChecks()
			s.logEngineChecks(cn, checks)
			current = sess.EngineChecks(checks)
		case *agentv1.AgentMessage_WeightsCollected:
			current = sess.WeightsCollected(m.WeightsCollected)
		case *agentv1.AgentMessage_Hello:
			s.log.Warn("unexpected second hello", "node", cn)
		}
		if !current {
			s.log.Warn("agent session closed", "node", cn, "remote", remote, "reason", "no longer the node's current session")
			return status.Errorf(codes.Aborted, "session closed by the control plane: no longer the current session of node %s", cn)
		}
	}
}

// logEngineChecks logs each engine a node cannot start.
func (s *Service) logEngineChecks(node string, checks []*agentv1.EngineCheck) {
	for _, c := range checks {
		if !c.GetOk() {
			s.log.Warn("engine cannot start", "node", node, "engine", c.GetEngine(), "path", c.GetPath(), "error", c.GetError())
		}
	}
}

func (s *Service) lookup(ctx context.Context, node string) (*agentv1.Declaration, bool, error) {
	if s.opts.Declarations == nil {
		return nil, false, nil
	}
	return s.opts.Declarations.Declaration(ctx, node)
}

func (s *Service) awaitHello(stream agentv1.AgentService_ConnectServer) (*agentv1.Hello, error) {
	type result struct {
		msg *agentv1.AgentMessage
		err error
	}
	ch := make(chan result, 1)
	go func() {
		m, err := stream.Recv()
		ch <- result{m, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("reading hello: %w", r.err)
		}
		h := r.msg.GetHello()
		if h == nil {
			return nil, errors.New("first message was not a hello")
		}
		return h, nil
	case <-time.After(s.opts.HelloTimeout):
		return nil, fmt.Errorf("no hello within %s", s.opts.HelloTimeout)
	}
}

// refuseStandby ends a session on a standby: the agent is told which
// control plane leads and, in the trailer, where to dial it.
func (s *Service) refuseStandby(stream agentv1.AgentService_ConnectServer, cn, remote string, l Leadership) error {
	if l.LeaderAddr == "" {
		s.log.Debug("agent refused", "node", cn, "remote", remote, "reason", "standby, no leader known")
		return status.Error(codes.FailedPrecondition, "this control plane is a standby and no leader is known yet (an election is under way); retry")
	}
	stream.SetTrailer(metadata.Pairs(agentv1.MetadataLeaderAddr, l.LeaderAddr))
	s.log.Debug("agent refused", "node", cn, "remote", remote, "reason", "standby", "leader", l.Leader, "leader_addr", l.LeaderAddr)
	return status.Errorf(codes.FailedPrecondition, "this control plane is a standby; the leader is %s at %s", l.Leader, l.LeaderAddr)
}
