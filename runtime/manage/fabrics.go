package manage

import (
	"context"
	"errors"
	"sort"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/spec"
)

func storeError(op string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return status.Errorf(codes.NotFound, "%s: %v", op, err)
	}
	return status.Errorf(codes.Internal, "%s: %v", op, err)
}

// fabricMembers returns, per fabric, the declared nodes in it.
func (s *Service) fabricMembers(ctx context.Context) (map[string][]string, error) {
	decls, err := s.declarations(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, d := range decls {
		for _, f := range d.GetDeclaration().GetFabrics() {
			out[f.GetName()] = append(out[f.GetName()], d.GetName())
		}
	}
	for _, nodes := range out {
		sort.Strings(nodes)
	}
	return out, nil
}

func (s *Service) fabricProto(ctx context.Context, f store.StoredFabric) (*managev1.Fabric, error) {
	members, err := s.fabricMembers(ctx)
	if err != nil {
		return nil, err
	}
	return &managev1.Fabric{Name: f.Name, Description: f.Description, Nodes: members[f.Name]}, nil
}

func validFabricName(name string) error {
	if err := spec.CheckFabricName(name); err != nil {
		return status.Errorf(codes.InvalidArgument, "fabric name: %v", err)
	}
	return nil
}

// CreateFabric declares a fabric.
func (s *Service) CreateFabric(ctx context.Context, req *managev1.CreateFabricRequest) (*managev1.Fabric, error) {
	f := req.GetFabric()
	if err := validFabricName(f.GetName()); err != nil {
		return nil, err
	}
	if _, err := s.opts.Store.GetFabric(ctx, f.GetName()); err == nil {
		return nil, status.Errorf(codes.AlreadyExists, "fabric %q already exists (import it instead)", f.GetName())
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, storeError("creating fabric", err)
	}
	return s.putFabric(ctx, f)
}

// UpdateFabric changes a fabric's description.
func (s *Service) UpdateFabric(ctx context.Context, req *managev1.UpdateFabricRequest) (*managev1.Fabric, error) {
	f := req.GetFabric()
	if _, err := s.opts.Store.GetFabric(ctx, f.GetName()); err != nil {
		return nil, storeError("updating fabric "+f.GetName(), err)
	}
	return s.putFabric(ctx, f)
}

func (s *Service) putFabric(ctx context.Context, f *managev1.Fabric) (*managev1.Fabric, error) {
	sf := store.StoredFabric{Name: f.GetName(), Description: f.GetDescription()}
	if err := s.opts.Store.PutFabric(ctx, sf); err != nil {
		return nil, storeError("storing fabric "+sf.Name, err)
	}
	got, err := s.opts.Store.GetFabric(ctx, sf.Name)
	if err != nil {
		return nil, storeError("reading fabric "+sf.Name, err)
	}
	s.log.Info("fabric declared", "fabric", sf.Name)
	return s.fabricProto(ctx, got)
}

// GetFabric returns one fabric with its declared nodes.
func (s *Service) GetFabric(ctx context.Context, req *managev1.GetFabricRequest) (*managev1.Fabric, error) {
	f, err := s.opts.Store.GetFabric(ctx, req.GetName())
	if err != nil {
		return nil, storeError("getting fabric "+req.GetName(), err)
	}
	return s.fabricProto(ctx, f)
}

// ListFabrics lists the declared fabrics.
func (s *Service) ListFabrics(ctx context.Context, _ *managev1.ListFabricsRequest) (*managev1.ListFabricsResponse, error) {
	list, err := s.opts.Store.ListFabrics(ctx)
	if err != nil {
		return nil, storeError("listing fabrics", err)
	}
	members, err := s.fabricMembers(ctx)
	if err != nil {
		return nil, err
	}
	out := &managev1.ListFabricsResponse{}
	for _, f := range list {
		out.Fabrics = append(out.Fabrics, &managev1.Fabric{Name: f.Name, Description: f.Description, Nodes: members[f.Name]})
	}
	return out, nil
}

// DeleteFabric removes a fabric no declared node is in.
func (s *Service) DeleteFabric(ctx context.Context, req *managev1.DeleteFabricRequest) (*managev1.DeleteFabricResponse, error) {
	members, err := s.fabricMembers(ctx)
	if err != nil {
		return nil, err
	}
	if nodes := members[req.GetName()]; len(nodes) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "fabric %q is still used by nodes %s: remove it from their declarations first", req.GetName(), strings.Join(nodes, ", "))
	}
	if err := s.opts.Store.DeleteFabric(ctx, req.GetName()); err != nil {
		return nil, storeError("deleting fabric "+req.GetName(), err)
	}
	s.log.Info("fabric removed", "fabric", req.GetName())
	return &managev1.DeleteFabricResponse{}, nil
}
