package manage

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/api/specv1"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/keys"
	"github.com/llmgw/llmgw/runtime/models"
	"github.com/llmgw/llmgw/runtime/reconcile"
	"github.com/llmgw/llmgw/runtime/router"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/spec"
)

type nopConn struct{}

func (nopConn) Send(*agentv1.ControlMessage) error { return nil }

// connectSimNode connects node id to f: the sim engine, 64 GiB, and a GPU
// of each class given.
func connectSimNode(f *fleet.Fleet, id string, gpus ...string) {
	inv := &agentv1.Inventory{Engines: []*agentv1.EngineStatus{{Engine: "sim", Available: true}}, Avx2: true, MemoryAvailableBytes: 64 << 30}
	for i, class := range gpus {
		inv.Gpus = append(inv.Gpus, &agentv1.GPU{Index: int32(i), Class: class})
	}
	f.Connect(&agentv1.Hello{Inventory: inv}, id, nil, false, nopConn{})
}

func newService(t *testing.T) (*Service, store.Store) {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "llmgw.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	declared := spec.Model{Name: "from-yaml", Source: "sim://y", Scaling: spec.Scaling{Min: 0, Max: 1},
		Profiles: []spec.Profile{{Name: "p", Engine: "sim", GPUClass: "h100-80g", TP: 1}}}
	reg, err := models.New([]spec.Model{declared}, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := fleet.New()
	connectSimNode(f, "node01", "a100-80g")
	rec := reconcile.New(reconcile.Options{Fleet: f, Catalog: reg})
	return New(Options{Version: "test", Fleet: f, Catalog: reg, Reconciler: rec, Tokens: st, Store: st}), st
}

func apiModel(name string) *managev1.Model {
	return &managev1.Model{Name: name, Source: "sim://x", Scaling: &managev1.Scaling{Min: 1, Max: 1},
		Profiles: []*specv1.Profile{{Name: "h100", Engine: "sim", GpuClass: "h100-80g", Tp: 1, StartupTimeout: "2m"}}}
}

func code(err error) codes.Code { return status.Code(err) }

func TestModelCRUD(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	created, err := s.CreateModel(ctx, &managev1.CreateModelRequest{Model: apiModel("m1")})
	if err != nil {
		t.Fatal(err)
	}
	if created.GetOrigin() != models.OriginAPI || created.GetGeneration() == "" {
		t.Fatalf("created = %v", created)
	}
	// The only node has the wrong GPU class: the status says why it does not place.
	if st := created.GetStatus(); st.GetState() != "unplaced" || !strings.Contains(st.GetMessage(), "wrong GPU class: has a100-80g, needs h100-80g") {
		t.Fatalf("status = %v", st)
	}
	if _, err := s.CreateModel(ctx, &managev1.CreateModelRequest{Model: apiModel("m1")}); code(err) != codes.AlreadyExists {
		t.Fatalf("second create: %v", err)
	}
	upd := apiModel("m1")
	upd.Aliases = []string{"first"}
	got, err := s.UpdateModel(ctx, &managev1.UpdateModelRequest{Model: upd})
	if err != nil || got.GetAliases()[0] != "first" || got.GetGeneration() != created.GetGeneration() {
		t.Fatalf("update = %v, %v (an alias change must not roll replicas)", got, err)
	}
	list, err := s.ListModels(ctx, &managev1.ListModelsRequest{})
	if err != nil || len(list.GetModels()) != 2 {
		t.Fatalf("list = %v, %v", list, err)
	}
	if _, err := s.DeleteModel(ctx, &managev1.DeleteModelRequest{Name: "m1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetModel(ctx, &managev1.GetModelRequest{Name: "m1"}); code(err) != codes.NotFound {
		t.Fatalf("get after delete: %v", err)
	}
}

func TestModelErrors(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	tests := []struct {
		name string
		call func() error
		want codes.Code
		msg  string
	}{
		{"declarative model cannot be updated", func() error {
			_, err := s.UpdateModel(ctx, &managev1.UpdateModelRequest{Model: apiModel("from-yaml")})
			return err
		}, codes.FailedPrecondition, "server.yaml"},
		{"declarative model cannot be created over", func() error {
			_, err := s.CreateModel(ctx, &managev1.CreateModelRequest{Model: apiModel("from-yaml")})
			return err
		}, codes.FailedPrecondition, "server.yaml"},
		{"declarative model cannot be deleted", func() error {
			_, err := s.DeleteModel(ctx, &managev1.DeleteModelRequest{Name: "from-yaml"})
			return err
		}, codes.FailedPrecondition, "server.yaml"},
		{"unknown engine", func() error {
			m := apiModel("bad")
			m.Profiles[0].Engine = "tgi"
			_, err := s.CreateModel(ctx, &managev1.CreateModelRequest{Model: m})
			return err
		}, codes.InvalidArgument, "tgi"},
		{"bad duration", func() error {
			m := apiModel("bad")
			m.Profiles[0].StartupTimeout = "soon"
			_, err := s.CreateModel(ctx, &managev1.CreateModelRequest{Model: m})
			return err
		}, codes.InvalidArgument, "profiles[0].startup_timeout"},
		{"NaN price", func() error {
			m := apiModel("bad")
			m.Pricing = &managev1.Pricing{PromptPer_1K: math.NaN(), CompletionPer_1K: 1}
			_, err := s.CreateModel(ctx, &managev1.CreateModelRequest{Model: m})
			return err
		}, codes.InvalidArgument, "pricing.prompt_per_1k: must be a finite number, got NaN"},
		{"infinite price on update", func() error {
			if _, err := s.CreateModel(ctx, &managev1.CreateModelRequest{Model: apiModel("priced")}); err != nil {
				return err
			}
			m := apiModel("priced")
			m.Pricing = &managev1.Pricing{CompletionPer_1K: math.Inf(1)}
			_, err := s.UpdateModel(ctx, &managev1.UpdateModelRequest{Model: m})
			return err
		}, codes.InvalidArgument, "pricing.completion_per_1k: must be a finite number, got +Inf"},
		{"infinite price in a plan", func() error {
			m := apiModel("bad")
			m.Pricing = &managev1.Pricing{PromptPer_1K: math.Inf(1)}
			_, err := s.PlanPlacement(ctx, &managev1.PlanPlacementRequest{Model: m})
			return err
		}, codes.InvalidArgument, "pricing.prompt_per_1k: must be a finite number"},
		{"scaling.min above the hard bound", func() error {
			m := apiModel("bad")
			m.Scaling = &managev1.Scaling{Min: 20000, Max: 20000}
			_, err := s.CreateModel(ctx, &managev1.CreateModelRequest{Model: m})
			return err
		}, codes.InvalidArgument, "scaling.min: 20000 is more than 10000"},
		{"update of a missing model", func() error {
			_, err := s.UpdateModel(ctx, &managev1.UpdateModelRequest{Model: apiModel("nope")})
			return err
		}, codes.NotFound, "nope"},
		{"explain an unknown model", func() error {
			_, err := s.ExplainPlacement(ctx, &managev1.ExplainPlacementRequest{Model: "nope"})
			return err
		}, codes.NotFound, "nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if code(err) != tt.want || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v, want %s containing %q", err, tt.want, tt.msg)
			}
		})
	}
}

func TestPlanPlacementExplainsRejections(t *testing.T) {
	s, _ := newService(t)
	exp, err := s.PlanPlacement(context.Background(), &managev1.PlanPlacementRequest{Model: apiModel("new")})
	if err != nil {
		t.Fatal(err)
	}
	if exp.GetPlaced() || len(exp.GetProfiles()) != 1 || !strings.Contains(exp.GetText(), "node01") {
		t.Fatalf("explanation = %v", exp)
	}
	if v := exp.GetProfiles()[0].GetNodes()[0]; v.GetFeasible() || !strings.Contains(v.GetReason(), "wrong GPU class") {
		t.Fatalf("node verdict = %v", v)
	}
}

func TestAuthInterceptor(t *testing.T) {
	s, st := newService(t)
	tok, err := keys.New(st).CreateAdminToken(context.Background(), "ops")
	if err != nil {
		t.Fatal(err)
	}
	icpt := s.AuthInterceptor()
	handler := func(context.Context, any) (any, error) { return "ok", nil }
	info := &grpc.UnaryServerInfo{FullMethod: "/llmgw.manage.v1.ManageService/GetStatus"}
	tests := []struct {
		name string
		md   metadata.MD
		ok   bool
	}{
		{"no metadata", nil, false},
		{"not bearer", metadata.Pairs("authorization", "Basic abc"), false},
		{"unknown token", metadata.Pairs("authorization", "Bearer llmgwadm-nope"), false},
		{"good token", metadata.Pairs("authorization", "Bearer "+tok.Secret), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.md != nil {
				ctx = metadata.NewIncomingContext(ctx, tt.md)
			}
			_, err := icpt(ctx, nil, info, handler)
			if tt.ok != (err == nil) {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
			if !tt.ok && code(err) != codes.Unauthenticated {
				t.Fatalf("code = %v", code(err))
			}
		})
	}
}

// TestScalingMinAboveTheFleet: scaling.min 1000 on a fleet of one GPU is
// stored (nodes may join later) with a warning naming what the fleet can
// hold, in the create and update answers and in PlanPlacement; a min the
// fleet holds gets none.
func TestScalingMinAboveTheFleet(t *testing.T) {
	s, _ := newService(t)
	ctx := context.Background()
	big := apiModel("big")
	big.Profiles[0].Name, big.Profiles[0].GpuClass = "a100", "a100-80g"
	big.Scaling = &managev1.Scaling{Min: 1000, Max: 1000}
	want := "scaling.min 1000: the fleet can hold at most 1 replica of model big now (1 more with profile a100; placing them takes every free GPU they fit on); the other 999 stay unplaced until nodes join or free up"
	created, err := s.CreateModel(ctx, &managev1.CreateModelRequest{Model: big})
	if err != nil {
		t.Fatal(err)
	}
	if w := created.GetWarnings(); len(w) != 1 || w[0] != want {
		t.Fatalf("create warnings = %q, want %q", w, want)
	}
	big.Scaling = &managev1.Scaling{Min: 3, Max: 3}
	updated, err := s.UpdateModel(ctx, &managev1.UpdateModelRequest{Model: big})
	if err != nil {
		t.Fatal(err)
	}
	if w := updated.GetWarnings(); len(w) != 1 || !strings.HasPrefix(w[0], "scaling.min 3: the fleet can hold at most 1 replica of model big now") {
		t.Fatalf("update warnings = %q", w)
	}
	plan := apiModel("planned")
	plan.Profiles[0].GpuClass = "a100-80g"
	plan.Scaling = &managev1.Scaling{Min: 2, Max: 2}
	ex, err := s.PlanPlacement(ctx, &managev1.PlanPlacementRequest{Model: plan})
	if err != nil {
		t.Fatal(err)
	}
	if w := ex.GetWarnings(); !ex.GetPlaced() || len(w) != 1 || !strings.Contains(w[0], "scaling.min 2: the fleet can hold at most 1 replica of model planned now") {
		t.Fatalf("plan placed %v, warnings %q", ex.GetPlaced(), w)
	}
	unplaceable := apiModel("nowhere")
	ex, err = s.PlanPlacement(ctx, &managev1.PlanPlacementRequest{Model: unplaceable})
	if err != nil {
		t.Fatal(err)
	}
	if w := ex.GetWarnings(); len(w) != 1 || !strings.Contains(w[0], "at most 0 replicas of model nowhere now (no node can hold one now)") {
		t.Fatalf("unplaceable warnings = %q", w)
	}
	big.Scaling = &managev1.Scaling{Min: 1, Max: 1}
	if updated, err = s.UpdateModel(ctx, &managev1.UpdateModelRequest{Model: big}); err != nil || len(updated.GetWarnings()) != 0 {
		t.Fatalf("min 1 on a fleet that holds 1: warnings %q, %v", updated.GetWarnings(), err)
	}
}

// TestOnDemandAskedForButUnplaced: a model loaded on demand is idle, wanting
// nothing, until a request asks for it; asked for, with no node able to
// hold it, it wants one replica and is unplaced, saying why (what its
// requests are told), not idle.
func TestOnDemandAskedForButUnplaced(t *testing.T) {
	s, _ := newService(t)
	rt := router.New()
	s.opts.Reconciler = reconcile.New(reconcile.Options{Fleet: s.opts.Fleet, Catalog: s.opts.Catalog, Endpoints: rt, Routing: rt})
	ctx := context.Background()
	s.opts.Reconciler.Pass()
	m, err := s.GetModel(ctx, &managev1.GetModelRequest{Name: "from-yaml"})
	if st := m.GetStatus(); err != nil || st.GetState() != "idle" || st.GetReplicasDesired() != 0 {
		t.Fatalf("before any request: %v, %v; want idle, 0 desired", st, err)
	}
	_, _ = rt.Pick("from-yaml", "")
	s.opts.Reconciler.Pass()
	m, err = s.GetModel(ctx, &managev1.GetModelRequest{Name: "from-yaml"})
	st := m.GetStatus()
	if err != nil || st.GetState() != "unplaced" || st.GetReplicasDesired() != 1 ||
		!strings.Contains(st.GetMessage(), "cannot be loaded on demand now") || !strings.Contains(st.GetMessage(), "wrong GPU class: has a100-80g, needs h100-80g") {
		t.Fatalf("asked for, no node can hold it: %v, %v; want unplaced, 1 desired, saying why", st, err)
	}
	var nr *router.NotReadyError
	if _, err := rt.Pick("from-yaml", ""); !errors.As(err, &nr) || nr.Loading || !strings.Contains(st.GetMessage(), nr.NotPlaced) {
		t.Errorf("request: %v, want not loading, told what the status says", err)
	}

	// A node that can hold it joins: placed, and loading.
	connectSimNode(s.opts.Fleet, "node02", "h100-80g")
	s.opts.Reconciler.Pass()
	m, err = s.GetModel(ctx, &managev1.GetModelRequest{Name: "from-yaml"})
	if st := m.GetStatus(); err != nil || st.GetState() != "starting" || st.GetReplicasDesired() != 1 || st.GetReplicasTotal() != 1 {
		t.Fatalf("once a node can hold it: %v, %v; want starting, 1 desired", st, err)
	}
	if _, err := rt.Pick("from-yaml", ""); !errors.As(err, &nr) || !nr.Loading {
		t.Errorf("request once placed: %v, want loading", err)
	}
}
