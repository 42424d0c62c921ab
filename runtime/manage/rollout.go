package manage

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/models"
)

// rolloutStatus adds to st what the reconciler knows of e's rollout: the
// live replicas still waiting for their replacement (an older generation,
// or on a draining node) and, when the current generation cannot be placed,
// why.
func (s *Service) rolloutStatus(st *managev1.ModelStatus, e models.Entry) {
	draining := map[string]bool{} // looked up per node as met: a catalog of many models reads this for each
	for _, r := range s.opts.Fleet.Replicas() {
		if r.Model != e.Model.Name || !r.Live() {
			continue
		}
		outdated := e.Stale(r.Profile.Name, r.Generation)
		for _, sh := range r.Shards {
			d, ok := draining[sh.Node]
			if !ok {
				n, _ := s.opts.Fleet.Node(sh.Node)
				d = n.Draining
				draining[sh.Node] = d
			}
			outdated = outdated || d
		}
		if outdated {
			st.ReplicasOutdated++
		}
	}
	if s.opts.Reconciler != nil {
		if st.Stalled = s.opts.Reconciler.Stalled(e.Model.Name, e.Generation); st.Stalled != "" {
			st.StalledReason = "placement"
		} else if st.Stalled = s.opts.Reconciler.NotReady(e.Model.Name, e.Generation); st.Stalled != "" {
			st.StalledReason = "not_ready"
		}
	}
}

// drainBlocked is why a draining node cannot finish, "" when nothing
// blocks it.
func (s *Service) drainBlocked(n fleet.Node) string {
	if !n.Draining || s.opts.Reconciler == nil {
		return ""
	}
	return s.opts.Reconciler.DrainBlocked(n.ID)
}

// startDrain dry-runs the drain of a node first: a drain that cannot
// finish (a replica on it that no other node can hold) is refused at once,
// naming each such replica and the scheduler's reason, unless force asks
// to drain anyway.
func (s *Service) startDrain(ctx context.Context, req *managev1.DrainNodeRequest) (*managev1.DrainNodeResponse, error) {
	name := req.GetName()
	var blocked []string
	if s.opts.Reconciler != nil {
		var found bool
		blocked, found = s.opts.Reconciler.DrainCheck(name)
		if !found {
			return nil, status.Errorf(codes.NotFound, "node %q is not connected: nothing to drain", name)
		}
	}
	if len(blocked) > 0 && !req.GetForce() {
		s.log.Warn("drain refused", "node", name, "blocked", len(blocked))
		return nil, status.Errorf(codes.FailedPrecondition,
			"node %s cannot be drained: no other node can take what it runs:\n  %s\nFree room or add a node, remove or change the model, or drain with force (the replica then stays until a node can take it)",
			name, strings.Join(blocked, "\n  "))
	}
	n, ok := s.opts.Fleet.SetDraining(name, true)
	if !ok {
		return nil, status.Errorf(codes.NotFound, "node %q is not connected: nothing to drain", name)
	}
	if err := s.recordDrain(ctx, name, true); err != nil {
		s.opts.Fleet.SetDraining(name, false)
		return nil, err
	}
	s.log.Info("node draining", "node", name, "replicas", n, "blocked", len(blocked))
	return &managev1.DrainNodeResponse{Replicas: int32(n), Blocked: blocked}, nil
}

// explainHeadline replaces the first line of an explain-placement text (the
// scheduler's "model m: not placed (1 profile tried)") by what the question
// was: whether one more replica of a model with running ones would place,
// so that a serving model does not read as "not placed".
func explainHeadline(text, model string, running int, placed bool, profile string, tried int) string {
	_, rest, _ := strings.Cut(text, "\n")
	var head string
	switch {
	case running == 0 && placed:
		head = fmt.Sprintf("model %s (no replica running): a replica would be placed with profile %s", model, profile)
	case running == 0:
		head = fmt.Sprintf("model %s (no replica running): a replica would not place (%s tried)", model, countOf(tried, "profile"))
	case placed:
		head = fmt.Sprintf("model %s (%s running): one more replica would be placed with profile %s", model, countOf(running, "replica"), profile)
	default:
		head = fmt.Sprintf("model %s (%s running): one more replica would not place (%s tried); this says nothing against those running", model, countOf(running, "replica"), countOf(tried, "profile"))
	}
	return head + "\n" + rest
}

func countOf(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// liveReplicas counts the live replicas of model.
func (s *Service) liveReplicas(model string) int {
	n := 0
	for _, r := range s.opts.Fleet.Replicas() {
		if r.Model == model && r.Live() {
			n++
		}
	}
	return n
}
