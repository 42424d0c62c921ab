package manage

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/spec"
)

// RolloutModel implements the management API: it asks the reconciler to
// replace the model's stale replicas, one at a time, with replicas of its
// current generation. For a model whose rollout is auto that is already
// under way; the call then only names them.
func (s *Service) RolloutModel(_ context.Context, req *managev1.RolloutModelRequest) (*managev1.RolloutModelResponse, error) {
	name, ok := s.opts.Catalog.Resolve(req.GetName())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "model %q is not in the catalog", req.GetName())
	}
	e, _ := s.opts.Catalog.Get(name)
	stale := s.opts.Reconciler.RequestRollout(e)
	s.log.Info("rollout requested", "model", name, "generation", e.Generation, "stale", len(stale))
	return &managev1.RolloutModelResponse{Replicas: stale, Status: s.modelProto(e).GetStatus()}, nil
}

// staleMessage says what happens to a model's stale replicas.
func staleMessage(m spec.Model, stale int) string {
	replicas := "replicas"
	if stale == 1 {
		replicas = "replica"
	}
	if m.ManualRollout() {
		return fmt.Sprintf("%d %s of an earlier definition (stale profile) keep serving; rollout is manual: run llmgw ctl rollout %s to replace them one at a time", stale, replicas, m.Name)
	}
	return fmt.Sprintf("%d %s of an earlier definition (stale profile) being replaced one at a time, each replacement ready first", stale, replicas)
}
