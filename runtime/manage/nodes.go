package manage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/api/specpb"
	"github.com/llmgw/llmgw/pki"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/spec"
)

// nodeRecord is how a node declaration is stored: the declaration's own
// fields plus the address.
type nodeRecord struct {
	Address string `json:"address,omitempty"`
	spec.Declaration
}

func decodeNode(sn store.StoredNode) (*managev1.NodeDeclaration, error) {
	var rec nodeRecord
	if err := json.Unmarshal(sn.Declaration, &rec); err != nil {
		return nil, fmt.Errorf("decoding the declaration of %s: %w", sn.Name, err)
	}
	return &managev1.NodeDeclaration{Name: sn.Name, Address: rec.Address, Declaration: specpb.DeclarationToProto(rec.Declaration), Revision: sn.Revision}, nil
}

func (s *Service) declarations(ctx context.Context) ([]*managev1.NodeDeclaration, error) {
	list, err := s.opts.Store.ListNodes(ctx)
	if err != nil {
		return nil, storeError("listing node declarations", err)
	}
	out := make([]*managev1.NodeDeclaration, 0, len(list))
	for _, sn := range list {
		d, err := decodeNode(sn)
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		out = append(out, d)
	}
	return out, nil
}

// DeclareNode stores the control plane's copy of a node's declaration and
// sends it to the node's agent when it is connected.
func (s *Service) DeclareNode(ctx context.Context, req *managev1.DeclareNodeRequest) (*managev1.NodeDeclaration, error) {
	nd := req.GetNode()
	if err := pki.ValidNodeName(nd.GetName()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "name: %v", err)
	}
	decl := specpb.DeclarationFromProto(nd.GetDeclaration())
	if err := decl.Validate(); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "node %s: %v", nd.GetName(), err)
	}
	for i, f := range decl.Fabrics {
		if _, err := s.opts.Store.GetFabric(ctx, f.Name); errors.Is(err, store.ErrNotFound) {
			return nil, status.Errorf(codes.InvalidArgument, "node %s: fabrics[%d]: fabric %q is not declared; declare it first (llmgw_fabric)", nd.GetName(), i, f.Name)
		} else if err != nil {
			return nil, storeError("checking fabric "+f.Name, err)
		}
	}
	b, err := json.Marshal(nodeRecord{Address: nd.GetAddress(), Declaration: decl})
	if err != nil {
		return nil, status.Errorf(codes.Internal, "encoding the declaration of %s: %v", nd.GetName(), err)
	}
	rev, err := s.opts.Store.PutNode(ctx, nd.GetName(), b)
	if err != nil {
		return nil, storeError("storing the declaration of "+nd.GetName(), err)
	}
	if err := s.opts.Fleet.Declare(nd.GetName(), specpb.DeclarationToProto(decl)); err != nil {
		s.log.Warn("declaration not delivered; the agent gets it when it reconnects", "node", nd.GetName(), "err", err)
	}
	s.log.Info("node declared", "node", nd.GetName(), "revision", rev)
	return &managev1.NodeDeclaration{Name: nd.GetName(), Address: nd.GetAddress(), Declaration: specpb.DeclarationToProto(decl), Revision: rev}, nil
}

// GetNodeDeclaration returns the control plane's copy of a declaration.
func (s *Service) GetNodeDeclaration(ctx context.Context, req *managev1.GetNodeDeclarationRequest) (*managev1.NodeDeclaration, error) {
	sn, err := s.opts.Store.GetNode(ctx, req.GetName())
	if err != nil {
		return nil, storeError("getting the declaration of "+req.GetName(), err)
	}
	d, err := decodeNode(sn)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return d, nil
}

// ListNodeDeclarations lists the declarations the control plane holds.
func (s *Service) ListNodeDeclarations(ctx context.Context, _ *managev1.ListNodeDeclarationsRequest) (*managev1.ListNodeDeclarationsResponse, error) {
	list, err := s.declarations(ctx)
	if err != nil {
		return nil, err
	}
	return &managev1.ListNodeDeclarationsResponse{Nodes: list}, nil
}

// DrainNode starts (or cancels) moving a node's replicas elsewhere.
// A drain that cannot finish is refused (startDrain) unless forced.
func (s *Service) DrainNode(ctx context.Context, req *managev1.DrainNodeRequest) (*managev1.DrainNodeResponse, error) {
	if !req.GetCancel() {
		return s.startDrain(ctx, req)
	}
	n, ok := s.opts.Fleet.SetDraining(req.GetName(), false)
	if !ok {
		return nil, status.Errorf(codes.NotFound, "node %q is not connected: nothing to drain", req.GetName())
	}
	if err := s.recordDrain(ctx, req.GetName(), false); err != nil {
		s.opts.Fleet.SetDraining(req.GetName(), true)
		return nil, err
	}
	s.log.Info("drain cancelled", "node", req.GetName())
	return &managev1.DrainNodeResponse{Replicas: int32(n)}, nil
}

// recordDrain tells OnDrain (which keeps drains across restarts) that
// node's drain started or stopped.
func (s *Service) recordDrain(ctx context.Context, node string, draining bool) error {
	if s.opts.OnDrain == nil {
		return nil
	}
	if err := s.opts.OnDrain(ctx, node, draining); err != nil {
		return status.Errorf(codes.Unavailable, "recording the drain of node %q: %v", node, err)
	}
	return nil
}

// RemoveNode forgets a node's declaration and, with revoke, refuses its
// certificate from now on.
func (s *Service) RemoveNode(ctx context.Context, req *managev1.RemoveNodeRequest) (*managev1.RemoveNodeResponse, error) {
	name := req.GetName()
	if err := s.opts.Store.DeleteNode(ctx, name); err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, storeError("removing the declaration of "+name, err)
	}
	s.opts.Fleet.Undeclare(name)
	if req.GetRevoke() {
		if err := s.opts.Store.RevokeNodeIdentity(ctx, name, time.Now()); err != nil {
			return nil, storeError("revoking the identity of "+name, err)
		}
		s.opts.Fleet.Forget(name, fmt.Sprintf("the identity of node %q was revoked", name))
		s.log.Warn("node identity revoked", "node", name)
	}
	return &managev1.RemoveNodeResponse{}, nil
}

// defaultCheckWait is how long CheckNodeEngines waits for the agent's
// results when the request names no timeout.
const defaultCheckWait = 60 * time.Second

// CheckNodeEngines asks a connected node's agent to run its engine checks
// again and returns the node once the results arrived.
func (s *Service) CheckNodeEngines(ctx context.Context, req *managev1.CheckNodeEnginesRequest) (*managev1.CheckNodeEnginesResponse, error) {
	name := req.GetName()
	wait := time.Duration(req.GetTimeoutMs()) * time.Millisecond
	if wait <= 0 {
		wait = defaultCheckWait
	}
	done, err := s.opts.Fleet.RequestEngineChecks(name)
	if errors.Is(err, fleet.ErrNotConnected) {
		return nil, status.Errorf(codes.NotFound, "node %q is not connected: its agent runs the engine checks when it connects", name)
	}
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "asking node %s to check its engines: %v", name, err)
	}
	s.log.Info("engine checks requested", "node", name)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		return nil, status.Errorf(codes.DeadlineExceeded, "node %s did not report its engine checks within %s", name, wait)
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	n, ok := s.opts.Fleet.Node(name)
	if !ok || !n.Connected {
		return nil, status.Errorf(codes.Unavailable, "node %s disconnected before it reported its engine checks", name)
	}
	return &managev1.CheckNodeEnginesResponse{Node: nodeToProto(n, s.opts.Fleet.UsedGPUs()[n.ID], s.replicasPerNode()[n.ID])}, nil
}
