package manage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/spec"
)

// tenancyError turns a store error into a status whose message names the
// object (op says which): NotFound, AlreadyExists, FailedPrecondition for
// an object still in use, Internal for the rest.
func tenancyError(op string, err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return status.Errorf(codes.NotFound, "%s: %v", op, err)
	case errors.Is(err, store.ErrAlreadyExists):
		return status.Errorf(codes.AlreadyExists, "%s: %v", op, err)
	case errors.Is(err, store.ErrInUse):
		return status.Errorf(codes.FailedPrecondition, "%s: %v", op, err)
	}
	return status.Errorf(codes.Internal, "%s: %v", op, err)
}

// invalid is an InvalidArgument status naming the field.
func invalid(field, format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, "%s: %s", field, fmt.Sprintf(format, args...))
}

func validProjectName(name string) error {
	if err := spec.CheckProjectName(name); err != nil {
		return invalid("project name", "%v", err)
	}
	return nil
}

func validLimits(what string, rpm, tpm int64) error {
	if rpm < 0 {
		return invalid(what+" rpm", "must not be negative, got %d", rpm)
	}
	if tpm < 0 {
		return invalid(what+" tpm", "must not be negative, got %d", tpm)
	}
	return nil
}

func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func unixMsPtr(t *time.Time) int64 {
	if t == nil {
		return 0
	}
	return unixMs(*t)
}

// projectFromProto checks a project sent by a client.
func projectFromProto(p *managev1.Project) (store.Project, error) {
	if p == nil {
		return store.Project{}, invalid("project", "is required")
	}
	if err := validProjectName(p.GetName()); err != nil {
		return store.Project{}, err
	}
	if err := validLimits("project "+p.GetName(), p.GetRpm(), p.GetTpm()); err != nil {
		return store.Project{}, err
	}
	models := slices.Clone(p.GetAllowedModels())
	for i, m := range models {
		if strings.TrimSpace(m) == "" {
			return store.Project{}, invalid(fmt.Sprintf("project %s allowed_models[%d]", p.GetName(), i), "is empty")
		}
	}
	slices.Sort(models)
	models = slices.Compact(models)
	for field, h := range map[string]*int32{"threads_retain_hours": p.ThreadsRetainHours, "memory_retain_hours": p.MemoryRetainHours} {
		if h != nil && *h < 0 {
			return store.Project{}, invalid("project "+p.GetName()+" "+field, "must not be negative (0 keeps nothing)")
		}
		if h != nil && *h > store.MaxRetainHours {
			return store.Project{}, invalid("project "+p.GetName()+" "+field,
				"must be at most %d (ten years), got %d", store.MaxRetainHours, *h)
		}
	}
	return store.Project{Name: p.GetName(), RPM: p.GetRpm(), TPM: p.GetTpm(), AllowedModels: models}, nil
}

// projectProto renders a stored project with its live key count and
// warnings.
func (s *Service) projectProto(p store.Project, liveKeys int) *managev1.Project {
	out := &managev1.Project{
		Name: p.Name, Rpm: p.RPM, Tpm: p.TPM, AllowedModels: p.AllowedModels,
		CreatedUnixMs: unixMs(p.CreatedAt), UpdatedUnixMs: unixMs(p.UpdatedAt), LiveKeys: int32(liveKeys),
	}
	for _, m := range p.AllowedModels {
		if _, ok := s.opts.Catalog.Resolve(m); !ok {
			out.Warnings = append(out.Warnings, fmt.Sprintf("allowed model %q is not in the catalog", m))
		}
	}
	return out
}

// liveKeys counts the unrevoked keys per project.
func (s *Service) liveKeys(ctx context.Context) (map[string]int, error) {
	keys, err := s.opts.Store.ListAPIKeys(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, k := range keys {
		if k.RevokedAt == nil {
			out[k.Project]++
		}
	}
	return out, nil
}

func (s *Service) getProject(ctx context.Context, name, op string) (*managev1.Project, error) {
	p, err := s.opts.Store.GetProject(ctx, name)
	if err != nil {
		return nil, tenancyError(op, err)
	}
	live, err := s.liveKeys(ctx)
	if err != nil {
		return nil, tenancyError(op, err)
	}
	out := s.projectProto(p, live[name])
	if err := s.readRetention(ctx, out); err != nil {
		return nil, tenancyError(op, err)
	}
	return out, nil
}

// retentionKinds are a project's content retentions and their fields.
var retentionKinds = []struct {
	kind  string
	field func(*managev1.Project) **int32
}{
	{store.ContentThreads, func(p *managev1.Project) **int32 { return &p.ThreadsRetainHours }},
	{store.ContentMemory, func(p *managev1.Project) **int32 { return &p.MemoryRetainHours }},
}

// readRetention fills a project's retention fields from the store.
func (s *Service) readRetention(ctx context.Context, p *managev1.Project) error {
	for _, k := range retentionKinds {
		h, err := s.opts.Store.Retention(ctx, p.GetName(), k.kind)
		if err != nil {
			return err
		}
		v := int32(h)
		*k.field(p) = &v
	}
	return nil
}

// writeRetention stores the retention fields a client sent; an absent
// one is left as it is.
func (s *Service) writeRetention(ctx context.Context, p *managev1.Project) error {
	for _, k := range retentionKinds {
		if h := *k.field(p); h != nil {
			if err := s.opts.Store.SetRetention(ctx, p.GetName(), k.kind, int(*h)); err != nil {
				return err
			}
			s.log.Info("project content retention set", "project", p.GetName(), "kind", k.kind, "hours", *h)
		}
	}
	return nil
}

// CreateProject creates a project.
func (s *Service) CreateProject(ctx context.Context, req *managev1.CreateProjectRequest) (*managev1.Project, error) {
	p, err := projectFromProto(req.GetProject())
	if err != nil {
		return nil, err
	}
	if err := s.opts.Store.CreateProject(ctx, p); err != nil {
		if errors.Is(err, store.ErrAlreadyExists) {
			return nil, status.Errorf(codes.AlreadyExists, "project %q already exists (import it instead)", p.Name)
		}
		return nil, tenancyError("creating project "+p.Name, err)
	}
	if err := s.writeRetention(ctx, req.GetProject()); err != nil {
		return nil, tenancyError("setting the retention of project "+p.Name, err)
	}
	s.log.Info("project created", "project", p.Name, "rpm", p.RPM, "tpm", p.TPM)
	s.tenancyChanged(p.Name)
	return s.getProject(ctx, p.Name, "reading project "+p.Name)
}

// GetProject returns one project.
func (s *Service) GetProject(ctx context.Context, req *managev1.GetProjectRequest) (*managev1.Project, error) {
	return s.getProject(ctx, req.GetName(), "getting project "+req.GetName())
}

// UpdateProject replaces a project's limits and allowed models.
func (s *Service) UpdateProject(ctx context.Context, req *managev1.UpdateProjectRequest) (*managev1.Project, error) {
	p, err := projectFromProto(req.GetProject())
	if err != nil {
		return nil, err
	}
	if err := s.opts.Store.UpdateProject(ctx, p); err != nil {
		return nil, tenancyError("updating project "+p.Name, err)
	}
	if err := s.writeRetention(ctx, req.GetProject()); err != nil {
		return nil, tenancyError("setting the retention of project "+p.Name, err)
	}
	s.log.Info("project updated", "project", p.Name, "rpm", p.RPM, "tpm", p.TPM)
	s.tenancyChanged(p.Name)
	return s.getProject(ctx, p.Name, "reading project "+p.Name)
}

// DeleteProject removes a project without live keys, and its budgets.
func (s *Service) DeleteProject(ctx context.Context, req *managev1.DeleteProjectRequest) (*managev1.DeleteProjectResponse, error) {
	if err := s.opts.Store.DeleteProject(ctx, req.GetName()); err != nil {
		return nil, tenancyError("deleting project "+req.GetName(), err)
	}
	s.log.Info("project deleted", "project", req.GetName())
	s.tenancyChanged(req.GetName())
	return &managev1.DeleteProjectResponse{}, nil
}

// ListProjects lists every project.
func (s *Service) ListProjects(ctx context.Context, _ *managev1.ListProjectsRequest) (*managev1.ListProjectsResponse, error) {
	list, err := s.opts.Store.ListProjects(ctx)
	if err != nil {
		return nil, tenancyError("listing projects", err)
	}
	live, err := s.liveKeys(ctx)
	if err != nil {
		return nil, tenancyError("listing projects", err)
	}
	out := &managev1.ListProjectsResponse{}
	for _, p := range list {
		pp := s.projectProto(p, live[p.Name])
		if err := s.readRetention(ctx, pp); err != nil {
			return nil, tenancyError("listing projects", err)
		}
		out.Projects = append(out.Projects, pp)
	}
	return out, nil
}
