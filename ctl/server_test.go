package ctl

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/pki"
)

const testToken = "s3cret-admin-token"

// testNow is the clock every table test sees.
var testNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// fakeManage is a management API with canned answers that records what it
// was asked to change.
type fakeManage struct {
	managev1.UnimplementedManageServiceServer

	status      *managev1.Status
	nodes       []*managev1.Node
	models      []*managev1.Model
	replicas    []*managev1.Replica
	explanation *managev1.Explanation
	fabrics     []*managev1.Fabric

	mu     sync.Mutex
	drains []*managev1.DrainNodeRequest
	checks []*managev1.CheckNodeEnginesRequest
	// weights is what ListWeights answers; collected what CollectWeights
	// answers, and collects what it was asked.
	weights   []*managev1.NodeWeights
	collected []*managev1.NodeWeights
	collects  []*managev1.CollectWeightsRequest
	created   []*managev1.Model
	updated   []*managev1.Model
	// onGet, when set, changes the stored model right after GetModel read
	// it (an edit made between a read and a write).
	onGet func(*managev1.Model)
	// ifRevisions are the if_revision each accepted UpdateModel carried.
	ifRevisions []int64
	deleted     []string
	replicaQ    []string
	// relisted, when set, is what ListReplicas answers after its first
	// call (a pool that changed meanwhile).
	relisted []*managev1.Replica
	// engineLoad, when set, is the engine_load ListReplicas gives each
	// ready replica.
	engineLoad func() *managev1.EngineLoad
}

func (f *fakeManage) GetStatus(context.Context, *managev1.GetStatusRequest) (*managev1.Status, error) {
	return f.status, nil
}

func (f *fakeManage) ListNodes(context.Context, *managev1.ListNodesRequest) (*managev1.ListNodesResponse, error) {
	return &managev1.ListNodesResponse{Nodes: f.nodes}, nil
}

func (f *fakeManage) ListModels(context.Context, *managev1.ListModelsRequest) (*managev1.ListModelsResponse, error) {
	return &managev1.ListModelsResponse{Models: f.models}, nil
}

func (f *fakeManage) find(name string) *managev1.Model {
	for _, m := range f.models {
		if m.GetName() == name {
			return m
		}
	}
	return nil
}

func (f *fakeManage) GetModel(_ context.Context, req *managev1.GetModelRequest) (*managev1.Model, error) {
	if m := f.find(req.GetName()); m != nil {
		out := proto.Clone(m).(*managev1.Model)
		if f.onGet != nil {
			f.onGet(m) // a concurrent edit after this read
		}
		return out, nil
	}
	return nil, status.Errorf(codes.NotFound, "model %q not found", req.GetName())
}

func (f *fakeManage) CreateModel(_ context.Context, req *managev1.CreateModelRequest) (*managev1.Model, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created = append(f.created, req.GetModel())
	if f.find(req.GetModel().GetName()) != nil {
		return nil, status.Errorf(codes.AlreadyExists, "model %q already exists", req.GetModel().GetName())
	}
	out := proto.Clone(req.GetModel()).(*managev1.Model)
	out.Origin, out.Generation = "api", "g1"
	return out, nil
}

func (f *fakeManage) UpdateModel(_ context.Context, req *managev1.UpdateModelRequest) (*managev1.Model, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	// Like the control plane: an update over a revision that is no longer
	// the stored one is refused.
	if cur := f.find(req.GetModel().GetName()); cur != nil && req.GetIfRevision() != 0 && req.GetIfRevision() != cur.GetRevision() {
		return nil, status.Errorf(codes.FailedPrecondition, "updating model %s: model changed since it was read: %q was read at revision %d and is now at revision %d; read it again and redo the change",
			cur.GetName(), cur.GetName(), req.GetIfRevision(), cur.GetRevision())
	}
	f.updated = append(f.updated, req.GetModel())
	f.ifRevisions = append(f.ifRevisions, req.GetIfRevision())
	out := proto.Clone(req.GetModel()).(*managev1.Model)
	out.Origin, out.Generation = "api", "g2"
	return out, nil
}

func (f *fakeManage) DeleteModel(_ context.Context, req *managev1.DeleteModelRequest) (*managev1.DeleteModelResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m := f.find(req.GetName()); m != nil && m.GetOrigin() == "config" {
		return nil, status.Errorf(codes.FailedPrecondition, "model %q is declared in server.yaml; remove it there", req.GetName())
	}
	f.deleted = append(f.deleted, req.GetName())
	return &managev1.DeleteModelResponse{}, nil
}

func (f *fakeManage) ListReplicas(_ context.Context, req *managev1.ListReplicasRequest) (*managev1.ListReplicasResponse, error) {
	f.mu.Lock()
	f.replicaQ = append(f.replicaQ, req.GetModel())
	replicas := f.replicas
	if f.relisted != nil && len(f.replicaQ) > 1 {
		replicas = f.relisted
	}
	f.mu.Unlock()
	var out []*managev1.Replica
	for _, r := range replicas {
		if req.GetModel() == "" || r.GetModel() == req.GetModel() {
			if f.engineLoad != nil && r.GetState() == "ready" {
				r = proto.Clone(r).(*managev1.Replica)
				r.EngineLoad = f.engineLoad()
			}
			out = append(out, r)
		}
	}
	return &managev1.ListReplicasResponse{Replicas: out}, nil
}

func (f *fakeManage) ExplainPlacement(_ context.Context, req *managev1.ExplainPlacementRequest) (*managev1.Explanation, error) {
	if req.GetModel() != f.explanation.GetModel() {
		return nil, status.Errorf(codes.NotFound, "model %q not found", req.GetModel())
	}
	return f.explanation, nil
}

func (f *fakeManage) ListFabrics(context.Context, *managev1.ListFabricsRequest) (*managev1.ListFabricsResponse, error) {
	return &managev1.ListFabricsResponse{Fabrics: f.fabrics}, nil
}

// DrainNode answers with the node's replica count; an unknown node is
// NotFound, as the control plane answers.
func (f *fakeManage) DrainNode(_ context.Context, req *managev1.DrainNodeRequest) (*managev1.DrainNodeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.nodes {
		if n.GetId() == req.GetName() {
			f.drains = append(f.drains, proto.Clone(req).(*managev1.DrainNodeRequest))
			if req.GetCancel() {
				return &managev1.DrainNodeResponse{}, nil
			}
			// A node whose drain_blocked is set stands for one whose
			// replica cannot move: refused unless forced.
			if b := n.GetDrainBlocked(); b != "" {
				if !req.GetForce() {
					return nil, status.Errorf(codes.FailedPrecondition, "node %s cannot be drained: no other node can take what it runs:\n  %s", n.GetId(), b)
				}
				return &managev1.DrainNodeResponse{Replicas: n.GetReplicas(), Blocked: []string{b}}, nil
			}
			return &managev1.DrainNodeResponse{Replicas: n.GetReplicas()}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "node %q not found", req.GetName())
}

func (f *fakeManage) CheckNodeEngines(_ context.Context, req *managev1.CheckNodeEnginesRequest) (*managev1.CheckNodeEnginesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.nodes {
		if n.GetId() == req.GetName() {
			f.checks = append(f.checks, proto.Clone(req).(*managev1.CheckNodeEnginesRequest))
			return &managev1.CheckNodeEnginesResponse{Node: n}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "node %q is not connected", req.GetName())
}

func (f *fakeManage) ListWeights(_ context.Context, req *managev1.ListWeightsRequest) (*managev1.ListWeightsResponse, error) {
	return &managev1.ListWeightsResponse{Nodes: f.weights}, nil
}

func (f *fakeManage) CollectWeights(_ context.Context, req *managev1.CollectWeightsRequest) (*managev1.CollectWeightsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.collects = append(f.collects, proto.Clone(req).(*managev1.CollectWeightsRequest))
	return &managev1.CollectWeightsResponse{Nodes: f.collected}, nil
}

// checkToken is the server's bearer-token check.
func checkToken(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer "+testToken {
		return nil, status.Error(codes.Unauthenticated, "invalid admin token")
	}
	return handler(ctx, req)
}

// testPKI is a throwaway CA and a server certificate for 127.0.0.1 and
// "llmgw-ctl"; caFile is the CA certificate on disk.
type testPKI struct {
	caFile string
	server *tls.Config
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	caDir := t.TempDir()
	caFile, _, err := pki.InitCA(caDir, pki.CAOptions{Validity: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath, err := pki.IssueServer(caDir, "llmgw-ctl", []string{"127.0.0.1", "llmgw-ctl"}, t.TempDir(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pki.ServerTLS(certPath, keyPath, "", false)
	if err != nil {
		t.Fatal(err)
	}
	return testPKI{caFile: caFile, server: cfg}
}

// startServer serves f over TLS on a loopback port and returns the
// environment a ctl invocation needs to reach it.
func startServer(t *testing.T, f managev1.ManageServiceServer) map[string]string {
	t.Helper()
	p := newTestPKI(t)
	return map[string]string{
		EnvEndpoint: serveTLS(t, f, p.server),
		EnvToken:    testToken,
		EnvCACert:   p.caFile,
	}
}

// serveTLS serves f with the bearer-token check on a loopback port and
// returns its address.
func serveTLS(t *testing.T, f managev1.ManageServiceServer, cfg *tls.Config) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)), grpc.UnaryInterceptor(checkToken))
	managev1.RegisterManageServiceServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// runCtl runs the CLI with env and the fixed test clock.
func runCtl(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	a := &app{
		stdout: &out,
		stderr: &errOut,
		env:    func(k string) string { return env[k] },
		now:    func() time.Time { return testNow },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	code = a.run(ctx, args)
	return code, out.String(), errOut.String()
}
