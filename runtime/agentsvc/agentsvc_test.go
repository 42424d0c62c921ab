package agentsvc

import (
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/pki"
	"github.com/llmgw/llmgw/runtime/fleet"
)

type fakeDecls struct {
	mu       sync.Mutex
	declared map[string]*agentv1.Declaration
	revoked  map[string]time.Time
}

func (d *fakeDecls) Declaration(_ context.Context, node string) (*agentv1.Declaration, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	decl, ok := d.declared[node]
	return decl, ok, nil
}

func (d *fakeDecls) RevokedAt(_ context.Context, node string) (time.Time, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	at, ok := d.revoked[node]
	return at, ok, nil
}

type env struct {
	dir   string
	addr  string
	fleet *fleet.Fleet
	decls *fakeDecls
}

func newEnv(t *testing.T, requireDeclared bool) *env {
	t.Helper()
	dir := t.TempDir()
	if _, _, err := pki.InitCA(dir, pki.CAOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := pki.IssueServer(dir, "cp", []string{"127.0.0.1"}, dir, 0); err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := pki.ServerTLS(filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"), filepath.Join(dir, "ca.pem"), true)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{dir: dir, fleet: fleet.New(), decls: &fakeDecls{declared: map[string]*agentv1.Declaration{}, revoked: map[string]time.Time{}}}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(tlsCfg)))
	agentv1.RegisterAgentServiceServer(srv, New(Options{
		Fleet: e.fleet, Declarations: e.decls, RequireDeclared: requireDeclared, HeartbeatInterval: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	e.addr = l.Addr().String()
	return e
}

// connect opens a session with a certificate for cn claiming nodeID and
// returns the first message or the error that ended the stream.
func (e *env) connect(t *testing.T, cn, nodeID string) (*agentv1.ControlMessage, error) {
	t.Helper()
	_, msg, err := e.session(t, cn, nodeID, nil)
	return msg, err
}

// session is connect with the engine checks in the hello, returning the
// stream as well.
func (e *env) session(t *testing.T, cn, nodeID string, checks []*agentv1.EngineCheck) (agentv1.AgentService_ConnectClient, *agentv1.ControlMessage, error) {
	t.Helper()
	if _, _, err := pki.IssueNode(e.dir, cn, e.dir, 0); err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := pki.ClientTLS(filepath.Join(e.dir, "ca.pem"), filepath.Join(e.dir, cn+".pem"), filepath.Join(e.dir, cn+"-key.pem"), "")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	stream, err := agentv1.NewAgentServiceClient(conn).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hello := &agentv1.Hello{NodeId: nodeID, Version: "test", Address: "127.0.0.1", Inventory: &agentv1.Inventory{Avx2: true},
		Declaration: &agentv1.Declaration{Labels: map[string]string{"from": "agent"}}, EngineChecks: checks}
	if err := stream.Send(&agentv1.AgentMessage{Msg: &agentv1.AgentMessage_Hello{Hello: hello}}); err != nil {
		t.Fatal(err)
	}
	msg, err := stream.Recv()
	return stream, msg, err
}

// The engine checks of the hello, and those the agent sends later, reach
// the fleet; the control plane's CheckEngines reaches the agent.
func TestEngineChecks(t *testing.T) {
	e := newEnv(t, false)
	libgomp := "llama-server cannot start: libgomp.so.1: cannot open shared object file: No such file or directory"
	stream, _, err := e.session(t, "node01", "node01", []*agentv1.EngineCheck{{Engine: "sim", Ok: true}})
	if err != nil {
		t.Fatal(err)
	}
	// The fleet records the session before the welcome is sent.
	waitNode(t, e.fleet, "the checks from the hello", func(n fleet.Node) bool {
		return len(n.EngineChecks) == 1 && n.EngineChecks[0].GetOk()
	})
	later := &agentv1.EngineChecks{Checks: []*agentv1.EngineCheck{{Engine: "llamacpp", Path: "/opt/llama-server", Error: libgomp}, {Engine: "sim", Ok: true}}}
	if err := stream.Send(&agentv1.AgentMessage{Msg: &agentv1.AgentMessage_EngineChecks{EngineChecks: later}}); err != nil {
		t.Fatal(err)
	}
	waitNode(t, e.fleet, "the failed check as the node's reason", func(n fleet.Node) bool {
		return n.Reason == libgomp && len(n.EngineChecks) == 2
	})
	if err := e.fleet.CheckEngines("node01"); err != nil {
		t.Fatal(err)
	}
	msg, err := stream.Recv()
	if err != nil || msg.GetCheckEngines() == nil {
		t.Fatalf("agent received %v, %v; want CheckEngines", msg, err)
	}
}

func TestSessionAdmission(t *testing.T) {
	tests := []struct {
		name     string
		require  bool
		cn, id   string
		setup    func(e *env)
		wantCode codes.Code
		wantMsg  string
	}{
		{name: "matching id", cn: "node01", id: "node01"},
		{name: "no claimed id takes the CN", cn: "node01", id: ""},
		{name: "claimed id differs from the CN", cn: "node01", id: "node09", wantCode: codes.PermissionDenied, wantMsg: `claimed node id "node09" does not match certificate common name "node01"`},
		{name: "undeclared refused when required", require: true, cn: "node01", id: "node01", wantCode: codes.PermissionDenied, wantMsg: "not declared"},
		{name: "declared accepted when required", require: true, cn: "node01", id: "node01", setup: func(e *env) {
			e.decls.declared["node01"] = &agentv1.Declaration{Labels: map[string]string{"from": "control-plane"}}
		}},
		{name: "revoked after the certificate was issued", cn: "node01", id: "node01", setup: func(e *env) {
			e.decls.revoked["node01"] = time.Now().Add(time.Hour)
		}, wantCode: codes.PermissionDenied, wantMsg: "was revoked"},
		{name: "certificate issued after the revocation", cn: "node01", id: "node01", setup: func(e *env) {
			e.decls.revoked["node01"] = time.Now().Add(-time.Hour)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tt.require)
			if tt.setup != nil {
				tt.setup(e)
			}
			msg, err := e.connect(t, tt.cn, tt.id)
			if tt.wantCode != codes.OK {
				if status.Code(err) != tt.wantCode || !strings.Contains(err.Error(), tt.wantMsg) {
					t.Fatalf("err = %v, want %s containing %q", err, tt.wantCode, tt.wantMsg)
				}
				if _, known := e.fleet.Node(tt.cn); known {
					t.Fatal("a refused agent was recorded in the fleet")
				}
				return
			}
			if err != nil {
				t.Fatalf("session refused: %v", err)
			}
			w := msg.GetWelcome()
			if w == nil || w.GetHeartbeatIntervalMs() != 1000 {
				t.Fatalf("first message = %v, want a welcome with the heartbeat interval", msg)
			}
			// The session joins the fleet before its welcome is sent.
			n, ok := e.fleet.Node(tt.cn)
			for deadline := time.Now().Add(5 * time.Second); !ok && time.Now().Before(deadline); n, ok = e.fleet.Node(tt.cn) {
				time.Sleep(5 * time.Millisecond) // polling interval
			}
			if !ok || n.State != fleet.NodeReady {
				t.Fatalf("fleet node = %+v, %v", n, ok)
			}
			// The control plane's declaration wins and is sent to the agent.
			want := "agent"
			if _, declared := e.decls.declared[tt.cn]; declared {
				want = "control-plane"
				if w.GetDeclaration().GetLabels()["from"] != "control-plane" {
					t.Fatalf("welcome declaration = %v", w.GetDeclaration())
				}
			}
			if got := n.Declaration.GetLabels()["from"]; got != want {
				t.Fatalf("effective declaration from %q, want %q", got, want)
			}
		})
	}
}

// A second session of a node is refused while the first is heard from,
// and replaces it once it is silent past three heartbeat intervals; the
// replaced session is ended with the reason.
func TestOneSessionPerNode(t *testing.T) {
	e := newEnv(t, false)
	first, msg, err := e.session(t, "node01", "node01", nil)
	if err != nil || msg.GetWelcome() == nil {
		t.Fatalf("first session: %v, %v", msg, err)
	}
	_, err = e.connect(t, "node01", "node01")
	if status.Code(err) != codes.AlreadyExists || !strings.Contains(err.Error(), "node node01 already has a live session from 127.0.0.1:") {
		t.Fatalf("second session while the first is live: err = %v, want AlreadyExists naming the live session", err)
	}
	n, _ := e.fleet.Node("node01")
	if !n.Connected || n.Version != "test" {
		t.Fatalf("after the refusal: %+v", n)
	}
	// The first sends nothing more: after three heartbeat intervals (1s
	// here) a new session replaces it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, msg, err = e.session(t, "node01", "node01", nil)
		if err == nil {
			break
		}
		if status.Code(err) != codes.AlreadyExists || time.Now().After(deadline) {
			t.Fatalf("a session replacing a silent one: %v", err)
		}
		time.Sleep(200 * time.Millisecond) // polling interval
	}
	if msg.GetWelcome() == nil {
		t.Fatalf("replacing session's first message = %v", msg)
	}
	for {
		_, err := first.Recv()
		if err == nil {
			continue
		}
		if status.Code(err) != codes.Aborted || !strings.Contains(err.Error(), "replaced by a newer session of node node01") {
			t.Fatalf("the replaced session ended with %v, want Aborted naming its replacement", err)
		}
		break
	}
	if n, _ := e.fleet.Node("node01"); !n.Connected {
		t.Fatal("the replaced session's end disconnected the node")
	}
}

// waitNode polls node01 until cond holds, failing the test after 10s.
func waitNode(t *testing.T, f *fleet.Fleet, what string, cond func(fleet.Node) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, _ := f.Node("node01")
		if cond(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: node %s %q, checks %v", what, n.State, n.Reason, n.EngineChecks)
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
}

// stuckSender never returns from Send until released.
type stuckSender struct {
	release chan struct{}
	sent    chan *agentv1.ControlMessage
}

func (s *stuckSender) Send(m *agentv1.ControlMessage) error {
	<-s.release
	s.sent <- m
	return nil
}

// TestSendNeverBlocks: the fleet sends under its lock, so a peer that does
// not read must never block Send; once the queue is full the session ends.
func TestSendNeverBlocks(t *testing.T) {
	c := newStreamConn()
	peer := &stuckSender{release: make(chan struct{}), sent: make(chan *agentv1.ControlMessage, sendQueue+2)}
	done := make(chan struct{})
	defer close(done)
	go c.run(peer, done)
	var err error
	for i := 0; i <= sendQueue+1 && err == nil; i++ {
		err = c.Send(&agentv1.ControlMessage{})
	}
	if err == nil {
		t.Fatal("Send to a peer that never reads kept succeeding")
	}
	select {
	case cl := <-c.closed:
		if cl.code != codes.Unavailable || !strings.Contains(cl.reason, "not reading") {
			t.Errorf("session closed with %v %q", cl.code, cl.reason)
		}
	default:
		t.Fatal("a full queue did not close the session")
	}
	// Messages that were queued still go out in order once the peer reads.
	close(peer.release)
	first := <-peer.sent
	if first == nil {
		t.Fatal("no message delivered")
	}
}
