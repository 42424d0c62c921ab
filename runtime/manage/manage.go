// Package manage implements the management API (managev1): one typed API for
// `llmgw ctl`, the Terraform provider and CI pipelines.
package manage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/api/specpb"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/models"
	"github.com/llmgw/llmgw/runtime/reconcile"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/runtime/users"
	"github.com/llmgw/llmgw/spec"
)

// Options wire the service to the control plane.
type Options struct {
	Version    string
	Fleet      *fleet.Fleet
	Catalog    *models.Registry
	Reconciler *reconcile.Reconciler
	Tokens     store.AdminTokenStore
	// Store holds fabrics, node declarations, projects, keys, budgets and
	// usage.
	Store store.Store
	// DefaultPrice is auth.default_price: what models without pricing of
	// their own cost; nil prices them at nothing.
	DefaultPrice *spec.Pricing
	// TenancyChanged, when set, is told the project whose settings or
	// budgets just changed, so admission applies them at once instead of
	// after its cache expires.
	TenancyChanged func(project string)
	// Users checks the passwords of Login; nil turns Login off.
	Users *users.Admin
	// LoginTTL is how long an admin token from Login works
	// (auth.login_ttl; DefaultLoginTTL when zero).
	LoginTTL time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Sources checks a model's fetched source when it is created, updated
	// or planned (a *sourcecheck.Checker); nil checks nothing.
	Sources SourceChecker
	// HA, when set, reports the leader election for GetStatus.
	HA func(ctx context.Context) (*managev1.HAStatus, error)
	// OnDrain, when set, records a drain (or its cancellation) so that it
	// outlives this control plane's leadership; an error undoes the drain.
	OnDrain func(ctx context.Context, node string, draining bool) error
	// EngineLoads, when set, returns what each replica's engine last said
	// of its load, by replica id, for ListReplicas.
	EngineLoads func() map[string]*managev1.EngineLoad
	Logger      *slog.Logger
}

// SourceChecker asks a model's source whether it holds what the model
// names: an error refuses the model, a warning accompanies it.
type SourceChecker interface {
	Check(ctx context.Context, source string) (warning string, err error)
}

// checkSource runs the source check of m for op ("creating model x"): a
// clear miss is InvalidArgument; a check it could not make is a warning.
func (s *Service) checkSource(ctx context.Context, op string, m spec.Model) ([]string, error) {
	if s.opts.Sources == nil || m.Source == "" {
		return nil, nil
	}
	w, err := s.opts.Sources.Check(ctx, m.Source)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%s: %v", op, err)
	}
	if w == "" {
		return nil, nil
	}
	return []string{w}, nil
}

// Service implements managev1.ManageServiceServer.
type Service struct {
	managev1.UnimplementedManageServiceServer
	opts Options
	log  *slog.Logger
	// logins limits Login attempts per email and per remote address.
	logins *loginLimiter
}

// New returns the service.
func New(opts Options) *Service {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.LoginTTL <= 0 {
		opts.LoginTTL = DefaultLoginTTL
	}
	return &Service{opts: opts, log: opts.Logger.With("component", "manage"), logins: newLoginLimiter()}
}

func (s *Service) now() time.Time { return s.opts.Now() }

// AuthInterceptor checks the bearer admin token on every call but Login
// (which is how a token is obtained). Tokens are compared by hash; the
// token itself is never logged. The handler finds the token's record in
// its context (Logout revokes it).
func (s *Service) AuthInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if info.FullMethod == managev1.ManageService_Login_FullMethodName {
			return handler(ctx, req)
		}
		tok, err := s.authenticate(ctx)
		if err != nil {
			s.log.Warn("management call refused", "method", info.FullMethod, "reason", err.Error())
			return nil, status.Error(codes.Unauthenticated, err.Error())
		}
		return handler(context.WithValue(ctx, callerTokenKey{}, tok), req)
	}
}

func (s *Service) authenticate(ctx context.Context) (store.AdminToken, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) == 0 {
		return store.AdminToken{}, errors.New("missing admin token: send authorization: Bearer <token>")
	}
	tok, ok := strings.CutPrefix(vals[0], "Bearer ")
	if !ok || tok == "" {
		return store.AdminToken{}, errors.New("authorization metadata is not a bearer token")
	}
	t, err := s.opts.Tokens.LookupAdminToken(ctx, spec.HashSecret(tok))
	if errors.Is(err, store.ErrNotFound) || (err == nil && t.Expired(s.now())) {
		return store.AdminToken{}, errors.New("admin token not recognised (expired, revoked, or never issued): log in again with llmgw ctl login")
	}
	if err != nil {
		return store.AdminToken{}, err
	}
	return t, nil
}

// GetStatus summarises the cluster.
func (s *Service) GetStatus(ctx context.Context, _ *managev1.GetStatusRequest) (*managev1.Status, error) {
	st := &managev1.Status{Version: s.opts.Version, Models: int32(len(s.opts.Catalog.List()))}
	if s.opts.HA != nil {
		ha, err := s.opts.HA(ctx)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "reading the leader lease: %v", err)
		}
		st.Ha = ha
	}
	used := s.opts.Fleet.UsedGPUs()
	for _, n := range s.opts.Fleet.Nodes() {
		st.NodesTotal++
		switch n.State {
		case fleet.NodeReady:
			st.NodesReady++
		case fleet.NodeLost:
			st.NodesLost++
		}
		if n.Inventory != nil {
			st.GpusTotal += int32(len(n.Inventory.GetGpus()))
		}
		st.GpusUsed += int32(len(used[n.ID]))
	}
	draining := s.draining()
	for _, r := range s.opts.Fleet.Replicas() {
		if !r.Live() {
			continue
		}
		st.ReplicasTotal++
		if r.State == fleet.ReplicaReady && !draining[r.ID] {
			st.ReplicasReady++
		}
	}
	st.Holdings = s.holdings()
	return st, nil
}

// ListNodes lists every node the control plane knows.
func (s *Service) ListNodes(context.Context, *managev1.ListNodesRequest) (*managev1.ListNodesResponse, error) {
	used := s.opts.Fleet.UsedGPUs()
	perNode := s.replicasPerNode()
	out := &managev1.ListNodesResponse{}
	for _, n := range s.opts.Fleet.Nodes() {
		pn := nodeToProto(n, used[n.ID], perNode[n.ID])
		pn.DrainBlocked = s.drainBlocked(n)
		out.Nodes = append(out.Nodes, pn)
	}
	return out, nil
}

// GetNode returns one node.
func (s *Service) GetNode(_ context.Context, req *managev1.GetNodeRequest) (*managev1.Node, error) {
	n, ok := s.opts.Fleet.Node(req.GetId())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "node %q is not known: no agent with that identity has connected", req.GetId())
	}
	pn := nodeToProto(n, s.opts.Fleet.UsedGPUs()[n.ID], s.replicasPerNode()[n.ID])
	pn.DrainBlocked = s.drainBlocked(n)
	return pn, nil
}

func (s *Service) replicasPerNode() map[string]int {
	out := map[string]int{}
	for _, r := range s.opts.Fleet.Replicas() {
		if !r.Live() {
			continue
		}
		seen := map[string]bool{}
		for _, sh := range r.Shards {
			if !seen[sh.Node] {
				out[sh.Node]++
				seen[sh.Node] = true
			}
		}
	}
	return out
}

func nodeToProto(n fleet.Node, used map[int]string, replicas int) *managev1.Node {
	pn := &managev1.Node{
		Id:             n.ID,
		State:          string(n.State),
		Reason:         n.Reason,
		Address:        n.Address,
		AgentVersion:   n.Version,
		LastSeenUnixMs: n.LastSeen.UnixMilli(),
		Declaration:    n.Declaration,
		Declared:       n.Declared,
		Replicas:       int32(replicas),
		Draining:       n.Draining,
	}
	if n.Draining && n.State != fleet.NodeLost {
		pn.State = "draining"
	}
	if n.Suspect && n.State != fleet.NodeLost && !n.Draining {
		// No new replicas go there; once silent its replicas are being
		// replaced elsewhere (docs/routing.md).
		pn.State = "suspect"
		var why []string
		if n.Connected { // else "agent disconnected" says it below
			why = append(why, n.SuspectReason)
		}
		if n.Silent {
			why = append(why, "its replicas are being replaced elsewhere")
		}
		if pn.Reason != "" {
			why = append(why, pn.Reason)
		}
		pn.Reason = strings.Join(why, "; ")
	}
	if !n.Connected && n.State != fleet.NodeLost {
		if pn.Reason != "" {
			pn.Reason = "agent disconnected; " + pn.Reason
		} else {
			pn.Reason = "agent disconnected"
		}
	}
	if inv := n.Inventory; inv != nil {
		pn.Gpus = inv.GetGpus()
		pn.GpuError = inv.GetGpuError()
		pn.Fabrics = inv.GetFabrics()
		pn.MemoryTotalBytes = inv.GetMemoryTotalBytes()
		pn.MemoryAvailableBytes = inv.GetMemoryAvailableBytes()
		pn.DiskFreeBytes = inv.GetDiskFreeBytes()
		pn.Avx2 = inv.GetAvx2()
		pn.HasAvx2 = inv.HasAvx2
		pn.Engines = inv.GetEngines()
		if wc := inv.GetWeightsCache(); wc != nil && wc.GetDiskTotalBytes() > 0 {
			free, total := wc.GetDiskFreeBytes(), wc.GetDiskTotalBytes()
			pn.WeightsDiskFreeBytes, pn.WeightsDiskTotalBytes = &free, &total
		}
	}
	pn.EngineChecks = n.EngineChecks
	pn.Warnings = n.Warnings
	pn.Connected = n.Connected
	if !n.ConnectedSince.IsZero() {
		pn.ConnectedSinceUnixMs = n.ConnectedSince.UnixMilli()
	}
	if n.Declaration != nil {
		pn.Labels = n.Declaration.GetLabels()
	}
	for g := range used {
		pn.UsedGpus = append(pn.UsedGpus, int32(g))
	}
	sort.Slice(pn.UsedGpus, func(i, j int) bool { return pn.UsedGpus[i] < pn.UsedGpus[j] })
	return pn
}

func (s *Service) modelProto(e models.Entry) *managev1.Model {
	pm := specpb.ModelToProto(e.Model)
	pm.Origin = e.Origin
	pm.Generation = e.Generation
	pm.Revision = e.Revision
	// Desired is what the reconciler wants now: a model loaded on demand
	// that is asked for wants one, and is not idle while none can load.
	st := &managev1.ModelStatus{ReplicasDesired: int32(e.Model.Scaling.Min), Rollout: spec.RolloutAuto}
	if s.opts.Reconciler != nil {
		if n, ok := s.opts.Reconciler.Wanted(e.Model.Name); ok {
			st.ReplicasDesired = int32(n)
		}
	}
	if e.Model.ManualRollout() {
		st.Rollout = spec.RolloutManual
	}
	reps := s.opts.Fleet.ModelReplicas(e.Model.Name)
	// A replica draining runs until its requests are done, but serves
	// nothing new: neither ready nor starting (a model scaled to 0 or
	// idle reads idle while its replicas drain).
	draining := s.draining()
	var leaving int32
	for _, r := range reps {
		if !r.Live() {
			continue
		}
		st.ReplicasTotal++
		if e.Stale(r.Profile.Name, r.Generation) {
			st.ReplicasStale++
		}
		switch {
		case draining[r.ID]:
			leaving++
		case r.State == fleet.ReplicaReady:
			st.ReplicasReady++
		}
	}
	switch {
	case st.ReplicasReady > 0 && st.ReplicasReady >= int32(e.Model.Scaling.Min):
		// Serving what scaling.min promises; one scaling up is serving
		// while its extra replicas start.
		st.State = "serving"
	case st.ReplicasTotal-leaving > 0:
		st.State = "starting"
	case st.ReplicasDesired == 0:
		st.State = "idle"
	default:
		st.State = "unplaced"
	}
	if st.ReplicasStale > 0 {
		st.Message = staleMessage(e.Model, int(st.ReplicasStale))
	}
	if s.opts.Reconciler != nil {
		why, failed := s.opts.Reconciler.NotPlaced(e.Model.Name)
		asked := why != "" && st.State == "unplaced"
		if asked {
			// Asked for on demand, and none loads: what its requests are
			// told.
			st.Message = "cannot be loaded on demand now: " + why
			if failed {
				st.State = "failed"
			}
		} else if last := s.opts.Reconciler.LastFailure(e.Model.Name); last != "" {
			st.Message = "last failure: " + last
			if st.State == "unplaced" {
				st.State = "failed"
			}
		}
		if st.State == "unplaced" && !asked {
			plan := s.opts.Reconciler.PlanOne(e.Model)
			if !plan.Placed {
				st.Message = plan.Explanation.String()
			}
		}
	}
	s.rolloutStatus(st, e, reps)
	pm.Status = st
	return pm
}

func catalogError(op string, err error) error {
	switch {
	case errors.Is(err, models.ErrNotFound):
		return status.Errorf(codes.NotFound, "%s: %v", op, err)
	case errors.Is(err, models.ErrAlreadyExists):
		return status.Errorf(codes.AlreadyExists, "%s: %v", op, err)
	case errors.Is(err, models.ErrDeclarative), errors.Is(err, models.ErrConflict):
		return status.Errorf(codes.FailedPrecondition, "%s: %v", op, err)
	case errors.Is(err, models.ErrInvalid):
		return status.Errorf(codes.InvalidArgument, "%s: %v", op, err)
	}
	return status.Errorf(codes.Internal, "%s: %v", op, err)
}

// CreateModel adds a model to the catalog.
func (s *Service) CreateModel(ctx context.Context, req *managev1.CreateModelRequest) (*managev1.Model, error) {
	m, err := specpb.ModelFromProto(req.GetModel())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "creating model: %v", err)
	}
	warnings, err := s.checkSource(ctx, "creating model "+m.Name, m)
	if err != nil {
		return nil, err
	}
	flagWarnings, err := s.checkFlags("creating model "+m.Name, m)
	if err != nil {
		return nil, err
	}
	warnings = append(warnings, flagWarnings...)
	e, err := s.opts.Catalog.Create(ctx, m)
	if err != nil {
		return nil, catalogError("creating model "+m.Name, err)
	}
	s.log.Info("model created", "model", m.Name, "generation", e.Generation)
	pm := s.withScalingWarnings(s.modelProto(e), e.Model)
	pm.Warnings = append(warnings, pm.Warnings...)
	return pm, nil
}

// GetModel returns one model with its status.
func (s *Service) GetModel(_ context.Context, req *managev1.GetModelRequest) (*managev1.Model, error) {
	e, ok := s.opts.Catalog.Get(req.GetName())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "model %q is not in the catalog", req.GetName())
	}
	return s.modelProto(e), nil
}

// UpdateModel replaces a model added through this API.
func (s *Service) UpdateModel(ctx context.Context, req *managev1.UpdateModelRequest) (*managev1.Model, error) {
	m, err := specpb.ModelFromProto(req.GetModel())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "updating model: %v", err)
	}
	warnings, err := s.checkSource(ctx, "updating model "+m.Name, m)
	if err != nil {
		return nil, err
	}
	flagWarnings, err := s.checkFlags("updating model "+m.Name, m)
	if err != nil {
		return nil, err
	}
	warnings = append(warnings, flagWarnings...)
	e, err := s.opts.Catalog.UpdateIf(ctx, m, req.GetIfRevision())
	if err != nil {
		return nil, catalogError("updating model "+m.Name, err)
	}
	s.log.Info("model updated", "model", m.Name, "generation", e.Generation)
	pm := s.withScalingWarnings(s.modelProto(e), e.Model)
	pm.Warnings = append(warnings, pm.Warnings...)
	return pm, nil
}

// DeleteModel removes a model added through this API; its replicas stop.
func (s *Service) DeleteModel(ctx context.Context, req *managev1.DeleteModelRequest) (*managev1.DeleteModelResponse, error) {
	if err := s.opts.Catalog.Delete(ctx, req.GetName()); err != nil {
		return nil, catalogError("deleting model "+req.GetName(), err)
	}
	s.log.Info("model deleted", "model", req.GetName())
	return &managev1.DeleteModelResponse{}, nil
}

// ListModels lists the catalog.
func (s *Service) ListModels(context.Context, *managev1.ListModelsRequest) (*managev1.ListModelsResponse, error) {
	out := &managev1.ListModelsResponse{}
	for _, e := range s.opts.Catalog.List() {
		out.Models = append(out.Models, s.modelProto(e))
	}
	return out, nil
}

// ListReplicas lists live replicas and recent failures.
func (s *Service) ListReplicas(_ context.Context, req *managev1.ListReplicasRequest) (*managev1.ListReplicasResponse, error) {
	out := &managev1.ListReplicasResponse{}
	entries := map[string]*models.Entry{} // looked up once per model
	var loads map[string]*managev1.EngineLoad
	if s.opts.EngineLoads != nil {
		loads = s.opts.EngineLoads()
	}
	draining := s.draining()
	for _, r := range s.opts.Fleet.Replicas() {
		if req.GetModel() != "" && r.Model != req.GetModel() {
			continue
		}
		e, seen := entries[r.Model]
		if !seen {
			if got, ok := s.opts.Catalog.Get(r.Model); ok {
				e = &got
			}
			entries[r.Model] = e
		}
		state := string(r.State)
		if r.State == fleet.ReplicaReady && draining[r.ID] {
			state = "draining"
		}
		pr := &managev1.Replica{
			Id: r.ID, Model: r.Model, Profile: r.Profile.Name, State: state, Error: r.Error,
			Fabric: r.Fabric, ShardsExpected: int32(r.ShardsExpected()), CreatedUnixMs: r.Created.UnixMilli(),
			ModelGeneration: r.Generation, ReplicaGeneration: r.Generation,
			// A replica of a model no longer in the catalog is stopping,
			// not stale.
			Stale:      e != nil && e.Stale(r.Profile.Name, r.Generation),
			EngineLoad: loads[r.ID],
		}
		if e != nil && !pr.Stale {
			// model_generation keeps its meaning for clients of
			// earlier releases: the model's generation when current.
			pr.ModelGeneration = e.Generation
		}
		for _, sh := range r.Shards {
			ps := &managev1.Shard{Id: sh.ID, Rank: int32(sh.Rank), Node: sh.Node, State: shardState(sh.State), Error: sh.Error, LastOutput: sh.LastOutput, Endpoint: sh.Endpoint}
			for _, g := range sh.GPUs {
				ps.Gpus = append(ps.Gpus, int32(g))
			}
			if fp := sh.Fetch; fp != nil {
				ps.Fetch = &managev1.ShardFetch{
					Source: fp.GetSource(), BytesDone: fp.GetBytesDone(), BytesTotal: fp.GetBytesTotal(),
					BytesPerSecond: fp.GetBytesPerSecond(), Stalled: fp.GetStalled(), LastError: fp.GetLastError(),
				}
			}
			pr.Shards = append(pr.Shards, ps)
		}
		out.Replicas = append(out.Replicas, pr)
	}
	return out, nil
}

// draining returns the replicas the reconciler is draining: ready, out of
// routing, stopped once their requests are done.
func (s *Service) draining() map[string]bool {
	if s.opts.Reconciler == nil {
		return nil
	}
	return s.opts.Reconciler.Draining()
}

func shardState(s agentv1.ShardState) string {
	switch s {
	case agentv1.ShardState_SHARD_STATE_STARTING:
		return "starting"
	case agentv1.ShardState_SHARD_STATE_READY:
		return "ready"
	case agentv1.ShardState_SHARD_STATE_FAILED:
		return "failed"
	case agentv1.ShardState_SHARD_STATE_STOPPED:
		return "stopped"
	}
	return "unknown"
}

// ExplainPlacement explains placing one more replica of a catalog model.
func (s *Service) ExplainPlacement(_ context.Context, req *managev1.ExplainPlacementRequest) (*managev1.Explanation, error) {
	name, ok := s.opts.Catalog.Resolve(req.GetModel())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "model %q is not in the catalog", req.GetModel())
	}
	e, _ := s.opts.Catalog.Get(name)
	plan := s.opts.Reconciler.PlanOne(e.Model)
	out := ExplanationToProto(plan.Explanation, &plan)
	out.Text = explainHeadline(out.GetText(), name, s.liveReplicas(name), plan.Placed, plan.Profile.Name, len(plan.Explanation.Profiles))
	return out, nil
}

// PlanPlacement dry-runs placement of a definition that need not be in the
// catalog.
func (s *Service) PlanPlacement(ctx context.Context, req *managev1.PlanPlacementRequest) (*managev1.Explanation, error) {
	m, err := specpb.ModelFromProto(req.GetModel())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "planning placement: %v", err)
	}
	m.Normalize()
	if err := m.Validate(); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "planning placement: %v", err)
	}
	warnings, err := s.checkSource(ctx, "planning placement of model "+m.Name, m)
	if err != nil {
		return nil, err
	}
	flagWarnings, err := s.checkFlags("planning placement of model "+m.Name, m)
	if err != nil {
		return nil, err
	}
	warnings = append(warnings, flagWarnings...)
	// One read of the fleet gives both the plan for one replica and the
	// rollout's dry run.
	plan, planned, more := s.opts.Reconciler.PlanRollout(m, rolloutDryRunLimit)
	out := ExplanationToProto(plan.Explanation, &plan)
	out.Warnings = append(warnings, s.scalingWarnings(m)...)
	for _, p := range planned {
		pr := &managev1.PlannedReplica{Replaces: p.Replaces, Placed: p.Plan.Placed}
		if p.Plan.Placed {
			pr.Profile = p.Plan.Profile.Name
			for _, pe := range p.Plan.Explanation.Profiles {
				if pe.Placed {
					pr.Summary = pe.Summary
				}
			}
		} else {
			pr.Summary = reconcile.WhyNotPlaced(p.Plan.Explanation)
		}
		out.Rollout = append(out.Rollout, pr)
	}
	out.RolloutMore = int32(more)
	return out, nil
}

// rolloutDryRunLimit bounds the replicas PlanPlacement's rollout dry run
// places: each is one scheduler pass over the fleet.
const rolloutDryRunLimit = 16

// withScalingWarnings adds to pm, the answer to a create or update of m, the
// warnings of scalingWarnings, and logs them.
func (s *Service) withScalingWarnings(pm *managev1.Model, m spec.Model) *managev1.Model {
	pm.Warnings = s.scalingWarnings(m)
	for _, w := range pm.Warnings {
		s.log.Warn("model asks for more than the fleet holds", "model", m.Name, "warning", w)
	}
	return pm
}

// scalingWarnings says when scaling.min asks for more replicas than the
// fleet holds now, counting the model's running replicas and those that
// still fit (scheduler.Fit, as the reconciler would place them). It warns
// rather than refuses: nodes join later (Terraform may create them in the
// same apply as the model) and the reconciler places the rest as they do;
// spec.MaxReplicas is the hard bound.
func (s *Service) scalingWarnings(m spec.Model) []string {
	want := m.Scaling.Min
	if want == 0 || s.opts.Reconciler == nil {
		return nil
	}
	running, more := s.opts.Reconciler.Capacity(m, want)
	total := running + more.Replicas
	if total >= want {
		return nil
	}
	var parts []string
	if running > 0 {
		parts = append(parts, fmt.Sprintf("%d running", running))
	}
	for _, p := range m.Profiles {
		if n := more.ByProfile[p.Name]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d more with profile %s", n, p.Name))
		}
	}
	how := "no node can hold one now"
	if len(parts) > 0 {
		how = strings.Join(parts, ", ") + "; placing them takes every free GPU they fit on"
	}
	replicas := "replicas"
	if total == 1 {
		replicas = "replica"
	}
	return []string{fmt.Sprintf("scaling.min %d: the fleet can hold at most %d %s of model %s now (%s); the other %d stay unplaced until nodes join or free up",
		want, total, replicas, m.Name, how, want-total)}
}

var _ managev1.ManageServiceServer = (*Service)(nil)

// tenancyChanged tells admission a project's settings or budgets changed.
func (s *Service) tenancyChanged(project string) {
	if s.opts.TenancyChanged != nil {
		s.opts.TenancyChanged(project)
	}
}
