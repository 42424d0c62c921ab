package manage

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	agentv1 "github.com/llmgw/llmgw/runtime/api/agentv1"
	managev1 "github.com/llmgw/llmgw/runtime/api/managev1"
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
