package manage

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/api/specpb"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/runtime/tenancy"
	"github.com/llmgw/llmgw/spec"
)

func validPeriod(field, period string) error {
	switch period {
	case store.PeriodDay, store.PeriodMonth, store.PeriodTotal:
		return nil
	case "":
		return invalid(field, "is required: day, month or total")
	}
	return invalid(field, "%q is not a period: day, month or total", period)
}

// budgetFromProto checks a budget sent by a client; the fallback model must
// be in the catalog.
func (s *Service) budgetFromProto(b *managev1.Budget) (store.Budget, error) {
	if b == nil {
		return store.Budget{}, invalid("budget", "is required")
	}
	if b.GetProject() == "" {
		return store.Budget{}, invalid("budget project", "is required")
	}
	what := fmt.Sprintf("budget %s/%s", b.GetProject(), b.GetPeriod())
	if err := validPeriod(what+" period", b.GetPeriod()); err != nil {
		return store.Budget{}, err
	}
	if problem := spec.CheckBudgetAmount(b.GetAmount()); problem != "" {
		return store.Budget{}, invalid(what+" amount", "%s", problem)
	}
	out := store.Budget{Project: b.GetProject(), Period: b.GetPeriod(), Amount: b.GetAmount(), OnExhausted: b.GetOnExhausted()}
	switch out.OnExhausted {
	case "":
		out.OnExhausted = store.OnExhaustedRefuse
	case store.OnExhaustedRefuse, store.OnExhaustedFallback:
	default:
		return store.Budget{}, invalid(what+" on_exhausted", "%q is not refuse or fallback", out.OnExhausted)
	}
	fb := b.GetFallbackModel()
	switch {
	case out.OnExhausted == store.OnExhaustedFallback && fb == "":
		return store.Budget{}, invalid(what+" fallback_model", "is required when on_exhausted is fallback")
	case out.OnExhausted == store.OnExhaustedRefuse && fb != "":
		return store.Budget{}, invalid(what+" fallback_model", "is only used when on_exhausted is fallback; remove it or set on_exhausted = fallback")
	case fb != "":
		// Stored by its canonical name, so that admission serves (and
		// metrics label) the model itself, whatever alias named it.
		canon, ok := s.opts.Catalog.Resolve(fb)
		if !ok {
			return store.Budget{}, status.Errorf(codes.FailedPrecondition, "%s fallback_model: model %q is not in the catalog", what, fb)
		}
		out.FallbackModel = canon
	}
	allowance := b.GetFallbackAllowance()
	if problem := spec.CheckBudgetAmount(allowance); problem != "" {
		return store.Budget{}, invalid(what+" fallback_allowance", "%s", problem)
	}
	if allowance != 0 && out.OnExhausted != store.OnExhaustedFallback {
		return store.Budget{}, invalid(what+" fallback_allowance", "is only used when on_exhausted is fallback; remove it or set on_exhausted = fallback")
	}
	out.FallbackAllowance = allowance
	return out, nil
}

// effectivePrice is what a request to the model costs: its own price, else
// auth.default_price, else nothing; and where that came from.
func (s *Service) effectivePrice(m spec.Model) (spec.Pricing, string) {
	if m.Pricing != nil {
		return *m.Pricing, "model"
	}
	if s.opts.DefaultPrice != nil {
		return *s.opts.DefaultPrice, "default"
	}
	return spec.Pricing{}, "none"
}

// budgetWarnings says why a budget may not do what it says.
func (s *Service) budgetWarnings(ctx context.Context, b store.Budget) []string {
	var warn []string
	var allowed map[string]bool
	if p, err := s.opts.Store.GetProject(ctx, b.Project); err == nil && len(p.AllowedModels) > 0 {
		allowed = map[string]bool{}
		for _, m := range p.AllowedModels {
			if c, ok := s.opts.Catalog.Resolve(m); ok {
				m = c // allowed_models may name a model by an alias
			}
			allowed[m] = true
		}
	}
	priced := s.opts.DefaultPrice != nil && !s.opts.DefaultPrice.Free()
	if !priced {
		for _, e := range s.opts.Catalog.List() {
			if allowed != nil && !allowed[e.Model.Name] {
				continue
			}
			if p, _ := s.effectivePrice(e.Model); !p.Free() {
				priced = true
				break
			}
		}
	}
	if !priced {
		def := "unset"
		if s.opts.DefaultPrice != nil {
			def = "zero"
		}
		warn = append(warn, fmt.Sprintf("budget %s/%s: no model the project may use has a price and auth.default_price is %s: this budget never binds (give models pricing or set auth.default_price)", b.Project, b.Period, def))
	}
	if b.FallbackModel != "" && allowed != nil {
		if canon, ok := s.opts.Catalog.Resolve(b.FallbackModel); ok && !allowed[canon] {
			warn = append(warn, fmt.Sprintf("budget %s/%s: fallback model %q is not among the project's allowed_models: requests that fall back to it are refused", b.Project, b.Period, b.FallbackModel))
		}
	}
	if b.FallbackModel != "" && b.FallbackAllowance == 0 {
		if e, ok := s.opts.Catalog.Get(b.FallbackModel); ok {
			if p, _ := s.effectivePrice(e.Model); !p.Free() {
				warn = append(warn, fmt.Sprintf("budget %s/%s: fallback model %q has a price and fallback_allowance is 0: once the budget is spent, requests are refused (402) instead of falling back; set fallback_allowance to what the fallback may spend in the period", b.Project, b.Period, b.FallbackModel))
			}
		}
	}
	return warn
}

func (s *Service) budgetProto(ctx context.Context, b store.Budget) (*managev1.Budget, error) {
	out := &managev1.Budget{
		Project: b.Project, Period: b.Period, Amount: b.Amount, OnExhausted: b.OnExhausted, FallbackModel: b.FallbackModel,
		FallbackAllowance: b.FallbackAllowance, CreatedUnixMs: unixMs(b.CreatedAt), UpdatedUnixMs: unixMs(b.UpdatedAt),
		Warnings: s.budgetWarnings(ctx, b),
	}
	start := tenancy.PeriodStart(b.Period, s.now())
	end, _ := tenancy.PeriodEnd(b.Period, start)
	spent, err := s.opts.Store.ProjectSpend(ctx, b.Project, start)
	if err != nil {
		return nil, tenancyError(fmt.Sprintf("reading the spend of project %s", b.Project), err)
	}
	out.Spent = spent
	if b.OnExhausted == store.OnExhaustedFallback {
		out.FallbackSpent = max(spent-b.Amount, 0)
	}
	out.ResetsUnixMs = unixMs(end)
	return out, nil
}

// PutBudget creates or replaces a project's budget for a period.
func (s *Service) PutBudget(ctx context.Context, req *managev1.PutBudgetRequest) (*managev1.Budget, error) {
	b, err := s.budgetFromProto(req.GetBudget())
	if err != nil {
		return nil, err
	}
	op := fmt.Sprintf("setting budget %s/%s", b.Project, b.Period)
	if _, err := s.opts.Store.GetProject(ctx, b.Project); err != nil {
		return nil, tenancyError(op, err)
	}
	if err := s.opts.Store.PutBudget(ctx, b); err != nil {
		return nil, tenancyError(op, err)
	}
	got, err := s.opts.Store.GetBudget(ctx, b.Project, b.Period)
	if err != nil {
		return nil, tenancyError(op, err)
	}
	pb, err := s.budgetProto(ctx, got)
	if err != nil {
		return nil, err
	}
	s.log.Info("budget set", "project", b.Project, "period", b.Period, "amount", b.Amount, "on_exhausted", b.OnExhausted,
		"fallback_model", b.FallbackModel, "fallback_allowance", b.FallbackAllowance)
	s.tenancyChanged(b.Project)
	for _, w := range pb.Warnings {
		s.log.Warn("budget warning", "project", b.Project, "period", b.Period, "warning", w)
	}
	return pb, nil
}

// GetBudget returns one budget with its current spend and warnings.
func (s *Service) GetBudget(ctx context.Context, req *managev1.GetBudgetRequest) (*managev1.Budget, error) {
	op := fmt.Sprintf("getting budget %s/%s", req.GetProject(), req.GetPeriod())
	if err := validPeriod(op+": period", req.GetPeriod()); err != nil {
		return nil, err
	}
	b, err := s.opts.Store.GetBudget(ctx, req.GetProject(), req.GetPeriod())
	if err != nil {
		return nil, tenancyError(op, err)
	}
	return s.budgetProto(ctx, b)
}

// DeleteBudget removes a budget.
func (s *Service) DeleteBudget(ctx context.Context, req *managev1.DeleteBudgetRequest) (*managev1.DeleteBudgetResponse, error) {
	op := fmt.Sprintf("deleting budget %s/%s", req.GetProject(), req.GetPeriod())
	if err := s.opts.Store.DeleteBudget(ctx, req.GetProject(), req.GetPeriod()); err != nil {
		return nil, tenancyError(op, err)
	}
	s.log.Info("budget deleted", "project", req.GetProject(), "period", req.GetPeriod())
	s.tenancyChanged(req.GetProject())
	return &managev1.DeleteBudgetResponse{}, nil
}

// ListBudgets lists the budgets of one project or of all.
func (s *Service) ListBudgets(ctx context.Context, req *managev1.ListBudgetsRequest) (*managev1.ListBudgetsResponse, error) {
	list, err := s.opts.Store.ListBudgets(ctx, req.GetProject())
	if err != nil {
		return nil, tenancyError("listing budgets", err)
	}
	out := &managev1.ListBudgetsResponse{}
	for _, b := range list {
		pb, err := s.budgetProto(ctx, b)
		if err != nil {
			return nil, err
		}
		out.Budgets = append(out.Budgets, pb)
	}
	return out, nil
}

// ListPrices lists every catalog model's effective price.
func (s *Service) ListPrices(context.Context, *managev1.ListPricesRequest) (*managev1.ListPricesResponse, error) {
	out := &managev1.ListPricesResponse{DefaultPrice: specpb.PricingToProto(s.opts.DefaultPrice)}
	for _, e := range s.opts.Catalog.List() {
		p, src := s.effectivePrice(e.Model)
		out.Models = append(out.Models, &managev1.ModelPrice{Model: e.Model.Name, Pricing: specpb.PricingToProto(&p), Source: src})
	}
	return out, nil
}
