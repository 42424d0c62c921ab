package manage

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/runtime/fleet"
)

func TestFabricsAndNodeDeclarations(t *testing.T) {
	s, st := newService(t)
	ctx := context.Background()
	decl := &managev1.NodeDeclaration{Name: "node01", Address: "10.0.0.11", Declaration: &agentv1.Declaration{
		Fabrics: []*agentv1.FabricDecl{{Name: "ib-a", Adapters: []string{"mlx5_0"}}},
		Engines: map[string]string{"vllm": "/opt/vllm/bin/vllm"},
	}}
	if _, err := s.DeclareNode(ctx, &managev1.DeclareNodeRequest{Node: decl}); code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `fabric "ib-a" is not declared`) {
		t.Fatalf("declaring a node in an undeclared fabric: %v", err)
	}
	if _, err := s.CreateFabric(ctx, &managev1.CreateFabricRequest{Fabric: &managev1.Fabric{Name: "ib-a", Description: "rack 1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateFabric(ctx, &managev1.CreateFabricRequest{Fabric: &managev1.Fabric{Name: "ib-a"}}); code(err) != codes.AlreadyExists {
		t.Fatalf("second create: %v", err)
	}
	got, err := s.DeclareNode(ctx, &managev1.DeclareNodeRequest{Node: decl})
	if err != nil || got.GetRevision() != 1 {
		t.Fatalf("declare = %v, %v", got, err)
	}
	// node01 is connected (newService connects it): it is now declared.
	if n, _ := s.opts.Fleet.Node("node01"); !n.Declared || n.Declaration.GetFabrics()[0].GetName() != "ib-a" {
		t.Fatalf("fleet node after declaring = %+v", n)
	}
	back, err := s.GetNodeDeclaration(ctx, &managev1.GetNodeDeclarationRequest{Name: "node01"})
	if err != nil || back.GetAddress() != "10.0.0.11" || back.GetDeclaration().GetEngines()["vllm"] != "/opt/vllm/bin/vllm" {
		t.Fatalf("get declaration = %v, %v", back, err)
	}
	f, err := s.GetFabric(ctx, &managev1.GetFabricRequest{Name: "ib-a"})
	if err != nil || len(f.GetNodes()) != 1 || f.GetNodes()[0] != "node01" {
		t.Fatalf("fabric = %v, %v", f, err)
	}
	if _, err := s.DeleteFabric(ctx, &managev1.DeleteFabricRequest{Name: "ib-a"}); code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "node01") {
		t.Fatalf("deleting a fabric in use: %v (must name the nodes)", err)
	}
	bad := &managev1.NodeDeclaration{Name: "node02", Declaration: &agentv1.Declaration{Fabrics: []*agentv1.FabricDecl{
		{Name: "ib-a", Adapters: []string{"mlx5_0"}}, {Name: "ib-a", Adapters: []string{"mlx5_0"}},
	}}}
	if _, err := s.DeclareNode(ctx, &managev1.DeclareNodeRequest{Node: bad}); code(err) != codes.InvalidArgument {
		t.Fatalf("an adapter under two fabrics: %v", err)
	}
	if _, err := s.DeclareNode(ctx, &managev1.DeclareNodeRequest{Node: &managev1.NodeDeclaration{Name: "bad name"}}); code(err) != codes.InvalidArgument {
		t.Fatalf("a bad node name: %v", err)
	}

	if r, err := s.DrainNode(ctx, &managev1.DrainNodeRequest{Name: "node01"}); err != nil || r.GetReplicas() != 0 {
		t.Fatalf("drain = %v, %v", r, err)
	}
	if n, _ := s.GetNode(ctx, &managev1.GetNodeRequest{Id: "node01"}); n.GetState() != "draining" {
		t.Fatalf("state while draining = %q", n.GetState())
	}

	if _, err := s.RemoveNode(ctx, &managev1.RemoveNodeRequest{Name: "node01", Revoke: true}); err != nil {
		t.Fatal(err)
	}
	if revoked, err := st.IsNodeRevoked(ctx, "node01"); err != nil || !revoked {
		t.Fatalf("revoked = %v, %v", revoked, err)
	}
	if _, err := s.GetNode(ctx, &managev1.GetNodeRequest{Id: "node01"}); code(err) != codes.NotFound {
		t.Fatalf("a removed node is still listed: %v", err)
	}
	if _, err := s.DeleteFabric(ctx, &managev1.DeleteFabricRequest{Name: "ib-a"}); err != nil {
		t.Fatalf("deleting the fabric once no node is in it: %v", err)
	}
}

// GetNode and ListNodes carry the node's engine checks, its AVX2 verdict
// and warnings, and a reason naming the engine that cannot start.
func TestNodeStatusEngineCheckAndAVX2(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	libgomp := "llama-server cannot start: libgomp.so.1: cannot open shared object file: No such file or directory"
	noAVX2 := false
	s.opts.Fleet.Connect(&agentv1.Hello{
		Inventory:    &agentv1.Inventory{HasAvx2: &noAVX2},
		EngineChecks: []*agentv1.EngineCheck{{Engine: "llamacpp", Path: "/opt/llama.cpp/llama-server", Error: libgomp, LastOutput: []string{"llama-server: error while loading shared libraries: libgomp.so.1: cannot open shared object file: No such file or directory"}}},
	}, "cpu01", nil, false, nopConn{})

	n, err := s.GetNode(ctx, &managev1.GetNodeRequest{Id: "cpu01"})
	if err != nil {
		t.Fatal(err)
	}
	if n.GetState() != "ready" || n.GetReason() != libgomp+"; "+fleet.NoAVX2Warning || !n.GetConnected() {
		t.Fatalf("node %s %q connected=%v; want ready, the engine named first, then the warning", n.GetState(), n.GetReason(), n.GetConnected())
	}
	if n.HasAvx2 == nil || n.GetHasAvx2() || len(n.GetWarnings()) != 1 || n.GetWarnings()[0] != fleet.NoAVX2Warning {
		t.Fatalf("has_avx2 %v warnings %q", n.HasAvx2, n.GetWarnings())
	}
	if cs := n.GetEngineChecks(); len(cs) != 1 || cs[0].GetOk() || cs[0].GetError() != libgomp || len(cs[0].GetLastOutput()) != 1 {
		t.Fatalf("engine checks %v", cs)
	}
	// node01 (from newService) reports nothing about AVX2: unknown, no warning.
	list, err := s.ListNodes(ctx, &managev1.ListNodesRequest{})
	if err != nil || len(list.GetNodes()) != 2 {
		t.Fatalf("ListNodes = %v, %v", list, err)
	}
	if n1 := list.GetNodes()[1]; n1.GetId() != "node01" || n1.HasAvx2 != nil || len(n1.GetWarnings()) != 0 || n1.GetReason() != "" {
		t.Fatalf("node01 = has_avx2 %v warnings %q reason %q", n1.HasAvx2, n1.GetWarnings(), n1.GetReason())
	}
}

// answerConn is an agent that answers CheckEngines with checks, as the
// agent's check loop does, from another goroutine.
type answerConn struct {
	f      *fleet.Fleet
	node   string
	checks []*agentv1.EngineCheck // nil: never answers
}

func (c answerConn) Send(m *agentv1.ControlMessage) error {
	if m.GetCheckEngines() != nil && c.checks != nil {
		go c.f.ApplyEngineChecks(c.node, c.checks)
	}
	return nil
}

// CheckNodeEngines sends the command and returns the node with the checks
// the agent answered with; a node not connected is NotFound, an agent that
// does not answer in time is DeadlineExceeded.
func TestCheckNodeEngines(t *testing.T) {
	libgomp := "llama-server cannot start: libgomp.so.1: cannot open shared object file: No such file or directory"
	failed := []*agentv1.EngineCheck{{Engine: "llamacpp", Path: "/opt/llama-server", Error: libgomp}}
	fixed := []*agentv1.EngineCheck{{Engine: "llamacpp", Path: "/opt/llama-server", Ok: true, Version: "version: 4567"}}
	tests := []struct {
		name       string
		node       string
		answer     []*agentv1.EngineCheck
		timeoutMs  int64
		wantCode   codes.Code
		wantReason string
	}{
		{name: "engine fixed", node: "cpu01", answer: fixed, wantReason: ""},
		{name: "still broken", node: "cpu01", answer: failed, wantReason: libgomp},
		{name: "agent does not answer", node: "cpu01", timeoutMs: 50, wantCode: codes.DeadlineExceeded},
		{name: "node not connected", node: "gone", wantCode: codes.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newService(t)
			f := s.opts.Fleet
			f.Connect(&agentv1.Hello{Inventory: &agentv1.Inventory{}, EngineChecks: failed}, "cpu01", nil, false, answerConn{f: f, node: "cpu01", checks: tt.answer})
			resp, err := s.CheckNodeEngines(context.Background(), &managev1.CheckNodeEnginesRequest{Name: tt.node, TimeoutMs: tt.timeoutMs})
			if code(err) != tt.wantCode {
				t.Fatalf("CheckNodeEngines = %v, want code %v", err, tt.wantCode)
			}
			if err != nil {
				if !strings.Contains(err.Error(), tt.node) {
					t.Errorf("error %q does not name the node", err)
				}
				return
			}
			n := resp.GetNode()
			if n.GetReason() != tt.wantReason || len(n.GetEngineChecks()) != 1 || n.GetEngineChecks()[0].GetOk() != (tt.wantReason == "") {
				t.Errorf("node after the check: reason %q checks %v; want reason %q", n.GetReason(), n.GetEngineChecks(), tt.wantReason)
			}
		})
	}
}

// TestSuspectNodeState: a node whose session ended shows as suspect, and
// once silent for the bound, says its replicas are being replaced.
func TestSuspectNodeState(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	now := time.Unix(1000, 0)
	s.opts.Fleet.SetClock(func() time.Time { return now })
	id := s.opts.Fleet.Connect(&agentv1.Hello{Inventory: &agentv1.Inventory{}}, "gpu01", nil, false, nopConn{})
	s.opts.Fleet.Disconnect("gpu01", id)
	n, err := s.GetNode(ctx, &managev1.GetNodeRequest{Id: "gpu01"})
	if err != nil {
		t.Fatal(err)
	}
	if n.GetState() != "suspect" || n.GetReason() != "agent disconnected" {
		t.Fatalf("node after its session ended: %s %q, want suspect, agent disconnected", n.GetState(), n.GetReason())
	}
	now = now.Add(7 * time.Second)
	s.opts.Fleet.ExpireSilent(6 * time.Second)
	n, _ = s.GetNode(ctx, &managev1.GetNodeRequest{Id: "gpu01"})
	if n.GetState() != "suspect" || n.GetReason() != "agent disconnected; its replicas are being replaced elsewhere" {
		t.Fatalf("node silent for 7s: %s %q", n.GetState(), n.GetReason())
	}
}
