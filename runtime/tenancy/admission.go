// Package tenancy decides whose request may run and charges what it used:
// rate limits per key and per project (requests and tokens per minute),
// project budgets with reservations, model prices, and the usage record.
//
// Admission is a gateway.Admission. Under one lock it checks every limit
// and budget against the request's worst case (the prompt estimate plus
// max_tokens, or the model's max_output) and, only if all pass, reserves
// it; the ticket settles the reservation to the actual usage when the
// request ends. So N parallel requests can never together pass a limit or
// spend past a budget: each one sees the others' reservations.
//
// The counters are kept per subject (key, project, budget). On one control
// plane they live in this process; with Options.Shared, each subject is
// also bounded by a slice this control plane leases from the store, so
// that several control planes (or gateways) on one PostgreSQL never pass a
// limit or a budget together (shared.go).
package tenancy

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/spec"
)

// Store is what admission reads: projects, budgets and past spend.
type Store interface {
	GetProject(ctx context.Context, name string) (store.Project, error)
	ListBudgets(ctx context.Context, project string) ([]store.Budget, error)
	ProjectSpend(ctx context.Context, project string, since time.Time) (float64, error)
}

// Models gives a model's own price (nil: none) and its limits (max_output,
// context_length). *models.Registry implements it, and Lookup too, which
// admission prefers: it resolves an alias and gives the model's aliases in
// the same look.
//
// Admission looks a model up only when the request does not carry its
// terms (request.Info.Model, which the gateway fills from its own lookup)
// and for a budget's fallback model when a budget is spent.
type Models interface {
	Terms(name string) (price *spec.Pricing, limits request.Limits, ok bool)
}

// modelLookup is what *models.Registry offers beside Terms.
type modelLookup interface {
	Lookup(name string) (request.Model, bool)
}

// resolver maps an alias to its model's name; a Models without Lookup may
// offer it.
type resolver interface {
	Resolve(name string) (string, bool)
}

// Pending reports the cost of usage recorded but not yet written to the
// store, so a budget loaded from the store misses nothing. *Recorder
// implements it.
type Pending interface {
	PendingCost(project string, since time.Time) float64
}

// Options configure Admission.
type Options struct {
	Store  Store
	Models Models
	// Pending is optional.
	Pending Pending
	// DefaultRPM and DefaultTPM apply to every key and project without a
	// limit of its own; 0 means no limit.
	DefaultRPM, DefaultTPM int64
	// DefaultMaxTokens is the completion a request is assumed to reach
	// when it sets no max_tokens and its model states no max_output.
	DefaultMaxTokens int
	// DefaultPrice prices models without a price of their own; nil is free.
	DefaultPrice *spec.Pricing
	// CacheTTL is how long a project's settings and budgets are trusted
	// before they are read again (in the background).
	CacheTTL time.Duration
	Logger   *slog.Logger
	// Now is the clock (tests); nil is time.Now.
	Now func() time.Time
	// Shared, when set, shares limits and budgets with the other control
	// planes on the store (shared.go); nil counts them in this process
	// alone. Call Close to give its slices back.
	Shared *Shared
}

// Admission implements gateway.Admission.
type Admission struct {
	opts   Options
	log    *slog.Logger
	now    func() time.Time
	dir    *directory
	prices Prices

	mu      sync.Mutex
	keys    map[string]*meter
	projs   map[string]*meter
	ledgers map[ledgerKey]*ledger
	sweepAt int64
	// overshoot counts, per model, the tokens engines reported beyond
	// what was reserved (never charged).
	overshoot map[overshootKey]int64

	// shared, when set, counts limits and budgets in slices leased from
	// the store (shared.go); slices are this process's, by subject.
	shared     *Shared
	slices     map[string]*slice
	stopUpkeep context.CancelFunc
	upkeepDone chan struct{}
	// refreshed is when the ledgers last read the spend of every control
	// plane (shared.go; the upkeep goroutine's alone).
	refreshed time.Time
}

// NewAdmission returns an Admission.
func NewAdmission(opts Options) *Admission {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.DefaultMaxTokens <= 0 {
		opts.DefaultMaxTokens = 4096
	}
	if opts.CacheTTL <= 0 {
		opts.CacheTTL = 5 * time.Second
	}
	a := &Admission{
		opts:      opts,
		log:       opts.Logger.With("component", "admission"),
		now:       opts.Now,
		keys:      map[string]*meter{},
		projs:     map[string]*meter{},
		ledgers:   map[ledgerKey]*ledger{},
		overshoot: map[overshootKey]int64{},
		prices:    Prices{Models: opts.Models, Default: opts.DefaultPrice},
	}
	a.dir = newDirectory(opts.Store, opts.CacheTTL, opts.Now, a.log)
	if sh := opts.Shared; sh != nil {
		c := *sh
		if c.BudgetSlice <= 0 {
			c.BudgetSlice = DefaultSliceFraction
		}
		if c.RateSlice <= 0 {
			c.RateSlice = DefaultSliceFraction
		}
		if c.TTL <= 0 {
			c.TTL = DefaultSliceTTL
		}
		if c.Idle <= 0 {
			c.Idle = DefaultSliceIdle
		}
		if c.RateLinger <= 0 {
			c.RateLinger = DefaultRateLinger
		}
		a.shared, a.slices = &c, map[string]*slice{}
		var ctx context.Context
		ctx, a.stopUpkeep = context.WithCancel(context.Background())
		a.upkeepDone = make(chan struct{})
		go a.upkeep(ctx)
	}
	return a
}

// meter counts one subject's requests and tokens over the last minute.
type meter struct {
	requests, tokens window
	lastUsed         int64
}

func (a *Admission) meterFor(m map[string]*meter, id string, now int64) *meter {
	mt := m[id]
	if mt == nil {
		mt = &meter{}
		m[id] = mt
	}
	mt.lastUsed = now
	return mt
}

// sweep forgets meters idle for longer than the window. Called with mu held.
func (a *Admission) sweep(now int64) {
	if now < a.sweepAt {
		return
	}
	a.sweepAt = now + windowSlots
	for _, m := range []map[string]*meter{a.keys, a.projs} {
		for id, mt := range m {
			if now-mt.lastUsed > windowSlots {
				delete(m, id)
			}
		}
	}
}

// lookup returns the catalog's terms of a model by name or alias: the
// canonical name, aliases, own price and limits. A model the catalog does
// not know is returned under the name given, with no terms of its own.
func (a *Admission) lookup(name string) request.Model {
	switch m := a.opts.Models.(type) {
	case nil:
		return request.Model{Name: name}
	case modelLookup:
		if t, ok := m.Lookup(name); ok {
			return t
		}
		return request.Model{Name: name}
	}
	// A Models without Lookup: resolve an alias when it can, then the
	// terms.
	if r, ok := a.opts.Models.(resolver); ok && name != "" {
		if c, ok := r.Resolve(name); ok {
			name = c
		}
	}
	t := request.Model{Name: name}
	if price, limits, ok := a.opts.Models.Terms(name); ok {
		t.Price, t.Limits = price, limits
	}
	return t
}

// terms returns the terms of the model a request asks for: those the
// request carries (the gateway's lookup), else the catalog's.
func (a *Admission) terms(model string, req request.Info) request.Model {
	if req.Model.Name == model && model != "" {
		return req.Model
	}
	return a.lookup(model)
}

// Allows implements gateway.ModelFilter: whether the principal's project
// may use the model. A project whose settings cannot be read is shown
// everything; admission refuses what it must when the request comes.
func (a *Admission) Allows(ctx context.Context, p request.Principal, model string) bool {
	proj, err := a.dir.get(ctx, p.Project)
	if err != nil || len(proj.project.AllowedModels) == 0 {
		return true
	}
	return a.allowed(proj.project, a.lookup(model))
}

// allowed reports whether a project may use a canonical model: its
// allowed_models is empty or names the model or one of its aliases.
func (a *Admission) allowed(p store.Project, m request.Model) bool {
	if len(p.AllowedModels) == 0 || slices.Contains(p.AllowedModels, m.Name) {
		return true
	}
	if slices.ContainsFunc(p.AllowedModels, m.Known) {
		return true
	}
	if _, ok := a.opts.Models.(modelLookup); ok {
		return false // Lookup gave every alias
	}
	r, ok := a.opts.Models.(resolver)
	if !ok {
		return false
	}
	for _, name := range p.AllowedModels {
		if c, ok := r.Resolve(name); ok && c == m.Name {
			return true
		}
	}
	return false
}

// Cost is what the given usage of a model costs at its price.
func (a *Admission) Cost(model string, promptTokens, completionTokens int64) float64 {
	return a.prices.Cost(model, promptTokens, completionTokens)
}

// Priced reports whether any price exists that a budget could count:
// the default price or one of the given models' own.
func (a *Admission) Priced(models []string) bool { return a.prices.Priced(models) }

// maxWorst bounds a worst case so the arithmetic never overflows; the
// gateway already refuses absurd max_tokens, n and best_of.
const maxWorst = int64(1) << 40

// perChoice is the most completion tokens one choice of the request may
// have on the model: max_tokens, else the model's max_output, else the
// default; never more than the model can produce (its max_output, else its
// context_length). The gateway refuses a max_tokens above that for the
// model asked for; a budget's fallback model may produce less, and then
// the request is bounded to it. 0 for embeddings.
func (a *Admission) perChoice(m request.Model, req request.Info) int {
	if req.Endpoint == "/v1/embeddings" {
		return 0
	}
	limits := m.Limits
	n := req.MaxTokens
	switch {
	case n > 0:
	case limits.MaxOutput > 0:
		n = limits.MaxOutput
	default:
		n = a.opts.DefaultMaxTokens
	}
	if limit := limits.Completion(); limit > 0 && n > limit {
		n = limit
	}
	return n
}

// promptBound is the most prompt tokens the request may count: the
// gateway's bound (request.EstimatePromptTokens), never more than the
// model's context_length, since an engine refuses a longer prompt.
func (a *Admission) promptBound(m request.Model, req request.Info) int64 {
	n := min(max(int64(req.PromptEstimate), 0), maxWorst)
	if l := m.Limits; l.ContextLength > 0 {
		n = min(n, int64(l.ContextLength))
	}
	return n
}

// fallbacks looks up the fallback models of a request's budgets, once each,
// when one of them is needed (a budget the request does not fit): each
// line's fallback becomes its canonical name (a budget stored before
// fallback models were resolved at set time may name an alias), and the
// result holds each one's terms by that name.
func (a *Admission) fallbacks(lines []budgetLine) map[string]request.Model {
	out := map[string]request.Model{}
	byName := map[string]string{}
	for i := range lines {
		bl := &lines[i]
		if bl.fallback == "" {
			continue
		}
		c, ok := byName[bl.fallback]
		if !ok {
			m := a.lookup(bl.fallback)
			c, byName[bl.fallback] = m.Name, m.Name
			out[c] = m
		}
		bl.fallback = c
	}
	return out
}

// completionCap is the most completion tokens the request may produce:
// perChoice for each choice of each prompt.
func (a *Admission) completionCap(perChoice int, req request.Info) int64 {
	choices := int64(max(req.N, req.BestOf, 1)) * int64(max(req.Prompts, 1))
	if int64(perChoice) > maxWorst/choices {
		return maxWorst
	}
	return int64(perChoice) * choices
}

// limitOf returns own when set, else def.
func limitOf(own, def int64) int64 {
	if own > 0 {
		return own
	}
	return def
}

// check is one rate limit to test: a window, its limit, and whose it is.
type check struct {
	w      *window
	limit  int64
	tokens bool   // a token limit, else a request limit
	subj   string // "key" or "project"
	id     string
}

func (c check) kind() string {
	if c.tokens {
		return "tokens"
	}
	return "requests"
}

func (c check) whose() string { return fmt.Sprintf("%s %q", c.subj, c.id) }

// Admit implements gateway.Admission.
func (a *Admission) Admit(ctx context.Context, p request.Principal, model string, req request.Info) (request.Ticket, error) {
	proj, err := a.dir.get(ctx, p.Project)
	if err != nil {
		return nil, fmt.Errorf("reading project %q: %w", p.Project, err)
	}
	terms := a.terms(model, req)
	if !a.allowed(proj.project, terms) {
		return nil, &request.Rejection{Status: http.StatusForbidden, Type: "permission_error", Code: "model_not_allowed",
			Reason: "model_not_allowed", Message: fmt.Sprintf("project %q may not use model %q", p.Project, model)}
	}
	now := a.now()
	if err := a.loadLedgers(ctx, p.Project, proj.budgets, now); err != nil {
		return nil, err
	}

	prompt := a.promptBound(terms, req)
	perChoice := a.perChoice(terms, req)
	return growing(ctx, a, func(grown map[growKey]bool) (request.Ticket, []growth, error) {
		return a.admitOnce(p, proj, terms, req, a.now(), prompt, perChoice, grown)
	})
}

// growing decides a request with once and, while once finds this control
// plane's slices of shared limits too short (the growths it returns),
// leases more (a store round trip once per slice, not per request) and
// decides again, up to four times; the last answer stands.
func growing[T any](ctx context.Context, a *Admission, once func(grown map[growKey]bool) (T, []growth, error)) (T, error) {
	var grown map[growKey]bool
	for attempt := 0; ; attempt++ {
		v, gs, err := once(grown)
		if len(gs) == 0 || attempt == 4 {
			return v, err
		}
		if grown == nil {
			grown = map[growKey]bool{}
		}
		for _, g := range gs {
			grown[growKey{g.s, g.fallback}] = true
		}
		if err := a.grow(ctx, gs); err != nil {
			var zero T
			return zero, err
		}
	}
}

// rateChecks tests a request against each rate check, under the
// admission lock: it needs 1 of a request limit and worst (its prompt
// bound plus completion) of a token limit, in the window and, with
// shared limits, in this control plane's slice. It returns the slices
// the request uses; or the slices too short, not grown yet for this
// request, with the refusal to give if they cannot grow; or a refusal.
func (a *Admission) rateChecks(checks []check, now time.Time, worst, prompt, completion int64, grown map[growKey]bool) ([]*slice, []growth, error) {
	sec := now.Unix()
	var gs []growth
	var used []*slice
	for _, c := range checks {
		if c.limit <= 0 {
			continue
		}
		need := int64(1)
		if c.tokens {
			need = worst
		}
		if need > c.limit {
			return nil, nil, &request.Rejection{Status: http.StatusTooManyRequests, Type: c.kind(), Code: "rate_limit_exceeded",
				Reason: "limit", Header: rateHeaders(checks, sec), Message: fmt.Sprintf(
					"the request may use up to %d tokens (prompt estimate %d + max_tokens %d), more than the limit of %d tokens per minute of %s; lower max_tokens",
					need, prompt, completion, c.limit, c.whose())}
		}
		if wait := c.w.wait(sec, need, c.limit); wait > 0 {
			return nil, nil, &request.Rejection{Status: http.StatusTooManyRequests, Type: c.kind(), Code: "rate_limit_exceeded",
				Reason: "limit", Header: rateHeaders(checks, sec), RetryAfter: wait, Message: fmt.Sprintf(
					"rate limit of %s reached: %d %s per minute; used %d, this request needs %d; retry in %s",
					c.whose(), c.limit, c.kind(), c.w.sum(sec), need, wait)}
		}
		if a.shared == nil {
			continue
		}
		// Shared: the request must also fit this control plane's slice
		// of the limit.
		sl := a.sliceFor(rateSubject(c), c.w, "", time.Time{})
		used = append(used, sl)
		if sl.room(now, false) >= float64(need) {
			continue
		}
		if grown[growKey{sl, false}] {
			return nil, nil, &request.Rejection{Status: http.StatusTooManyRequests, Type: c.kind(), Code: "rate_limit_exceeded",
				Reason: "limit", Header: rateHeaders(checks, sec), RetryAfter: a.shared.Idle, Message: fmt.Sprintf(
					"rate limit of %s reached: %d %s per minute over all control planes; this one may use %d more, this request needs %d; retry in %s",
					c.whose(), c.limit, c.kind(), max(int64(sl.room(now, false)), 0), need, a.shared.Idle)}
		}
		gs = append(gs, growth{s: sl, extra: float64(need), limit: float64(c.limit)})
	}
	if len(gs) > 0 {
		return nil, gs, &request.Rejection{Status: http.StatusTooManyRequests, Type: "requests", Code: "rate_limit_exceeded",
			Reason: "limit", RetryAfter: a.shared.Idle, Message: "rate limit reached over all control planes; retry shortly"}
	}
	return used, nil, nil
}

// admitOnce decides a request under the admission lock and reserves it.
// With shared limits it may instead return the slices that are too short
// (never grown yet for this request), with the refusal to give if they
// cannot grow.
func (a *Admission) admitOnce(p request.Principal, proj projectInfo, terms request.Model, req request.Info, now time.Time,
	prompt int64, perChoice int, grown map[growKey]bool) (request.Ticket, []growth, error) {
	completion := a.completionCap(perChoice, req)
	worst := prompt + completion
	sec := now.Unix()

	a.mu.Lock()
	defer a.mu.Unlock()
	a.sweep(sec)
	var buf [4]check
	checks := buf[:0]
	var km *meter
	if p.KeyID != "" {
		km = a.meterFor(a.keys, p.KeyID, sec)
		checks = append(checks,
			check{&km.requests, limitOf(p.RPM, a.opts.DefaultRPM), false, "key", p.KeyID},
			check{&km.tokens, limitOf(p.TPM, a.opts.DefaultTPM), true, "key", p.KeyID})
	}
	pm := a.meterFor(a.projs, p.Project, sec)
	checks = append(checks,
		check{&pm.requests, limitOf(proj.project.RPM, a.opts.DefaultRPM), false, "project", p.Project},
		check{&pm.tokens, limitOf(proj.project.TPM, a.opts.DefaultTPM), true, "project", p.Project})

	used, gs, err := a.rateChecks(checks, now, worst, prompt, completion, grown)
	if err != nil {
		return nil, gs, err
	}

	// Budgets: every budget of the project must hold the worst case of
	// the model served (budgets.go decides which).
	var lines []budgetLine
	for _, b := range proj.budgets {
		l := a.ledgers[ledgerKey{p.Project, b.Period}]
		if l == nil {
			continue // loaded above; deleted meanwhile
		}
		l.roll(now)
		// The fallback is looked up (and its name resolved) only when a
		// budget is spent: a.fallbacks below.
		bl := budgetLine{budget: b, ledger: l, fallback: b.FallbackModel, now: now}
		if a.shared != nil {
			start := PeriodStart(b.Period, now)
			bl.sl = a.sliceFor(store.BudgetSubject(p.Project, b.Period, start), nil, p.Project, start)
		}
		lines = append(lines, bl)
	}
	served := terms
	price := a.prices.of(terms)
	cost := price.Cost(prompt, completion)
	if a.shared != nil {
		// A slice too short for the model asked for grows before a
		// fallback is considered. A slice taken against a budget since
		// lowered is taken again against the new amount first: its room
		// was granted against the old one.
		for i := range lines {
			bl := &lines[i]
			switch {
			case grown[growKey{bl.sl, false}]:
			case bl.sl.limit > bl.limitFor(bl.fallback, true)+1e-9:
				gs = append(gs, growth{s: bl.sl, extra: cost, limit: bl.budget.Amount, retake: true})
			case !bl.fits(cost, "", false):
				gs = append(gs, growth{s: bl.sl, extra: cost, limit: bl.budget.Amount})
			}
		}
		if len(gs) > 0 {
			return nil, gs, &request.Rejection{Status: http.StatusPaymentRequired, Type: "insufficient_quota", Code: "budget_exceeded",
				Reason: "budget", Message: fmt.Sprintf("a budget of project %q is spent over all control planes", p.Project)}
		}
	}
	if len(lines) > 0 && !allFit(lines, cost) {
		fbs := a.fallbacks(lines)
		fbPerChoice := perChoice
		fallbackCost := func(fb string) float64 {
			// The rate windows were checked for perChoice: the fallback
			// gets no more, and less when it can produce less.
			fbPerChoice = min(perChoice, a.perChoice(fbs[fb], req))
			return a.prices.of(fbs[fb]).Cost(prompt, a.completionCap(fbPerChoice, req))
		}
		d := decideBudgets(lines, cost, fallbackCost, func(m string) bool { return a.allowed(proj.project, fbs[m]) })
		if d.refused != nil {
			rej := &request.Rejection{Status: http.StatusPaymentRequired, Type: "insufficient_quota", Code: "budget_exceeded",
				Reason: "budget", Message: budgetMessage(p.Project, d)}
			if a.shared != nil && d.fallbackTried != "" {
				fbCost := fallbackCost(d.fallbackTried)
				for i := range lines {
					bl := &lines[i]
					if !bl.fits(fbCost, d.fallbackTried, true) && !grown[growKey{bl.sl, true}] {
						gs = append(gs, growth{s: bl.sl, extra: fbCost, limit: bl.limitFor(d.fallbackTried, true), fallback: true})
					}
				}
			}
			return nil, gs, rej
		}
		if d.served != "" {
			served, cost, perChoice = fbs[d.served], d.cost, fbPerChoice
			price = a.prices.of(served)
			completion = a.completionCap(perChoice, req)
		}
	}
	held := make([]*ledger, 0, len(lines))
	for _, bl := range lines {
		held = append(held, bl.ledger)
	}

	// Everything passed: reserve.
	for _, c := range checks {
		if c.tokens {
			c.w.charge(sec, worst)
		} else {
			c.w.charge(sec, 1)
		}
	}
	t := &ticket{a: a, model: served.Name, price: price, served: served, rate: rateNow(checks, sec), sec: sec, worst: worst, cost: cost, project: p.Project,
		prompt: prompt, completion: completion, maxTokens: perChoice, windows: make([]*window, 0, 2)}
	if km != nil {
		t.windows = append(t.windows, &km.tokens)
	}
	t.windows = append(t.windows, &pm.tokens)
	for _, l := range held {
		l.reserve(cost)
	}
	t.ledgers = held
	for _, sl := range used {
		sl.used = now
	}
	for _, bl := range lines {
		if bl.sl != nil {
			bl.sl.reserved += cost
			bl.sl.used = now
			t.slices = append(t.slices, bl.sl)
		}
	}
	return t, nil, nil
}

func money(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// rateHeaders builds OpenAI's x-ratelimit-* headers from the tightest
// request and token limits, as they stand now.
func rateHeaders(checks []check, now int64) http.Header {
	h := make(http.Header, 6)
	rs := rateNow(checks, now)
	rs.set(h)
	return h
}

// rateState is what the x-ratelimit-* headers say, taken under the
// admission lock; the headers are written from it after (set), off the
// lock and, for an admitted request, while its engine works.
type rateState [2]struct {
	ok          bool // a limit of this kind applies
	limit, left int64
	reset       time.Duration
}

// rateNow takes the tightest request and token limits of checks, as they
// stand at now.
func rateNow(checks []check, now int64) rateState {
	var rs rateState
	for kind, tokens := range []bool{false, true} {
		var best *check
		var bestLeft int64
		for i := range checks {
			c := &checks[i]
			if c.tokens != tokens || c.limit <= 0 {
				continue
			}
			left := c.limit - c.w.sum(now)
			if best == nil || left < bestLeft {
				best, bestLeft = c, left
			}
		}
		if best == nil {
			continue
		}
		rs[kind].ok, rs[kind].limit, rs[kind].left = true, best.limit, max(bestLeft, 0)
		rs[kind].reset = best.w.wait(now, best.limit, best.limit)
	}
	return rs
}

// set writes the headers into h.
func (rs *rateState) set(h http.Header) {
	// One backing array for the six values: a request's headers are
	// made on every admission.
	vals := make([]string, 0, 6)
	for kind, names := range [2]*[3]string{&requestHeaders, &tokenHeaders} {
		r := &rs[kind]
		if !r.ok {
			continue
		}
		vals = append(vals, strconv.FormatInt(r.limit, 10), strconv.FormatInt(r.left, 10), r.reset.String())
		n := len(vals)
		h[names[0]] = vals[n-3 : n-2 : n-2]
		h[names[1]] = vals[n-2 : n-1 : n-1]
		h[names[2]] = vals[n-1 : n : n]
	}
}

var (
	requestHeaders = [3]string{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"}
	tokenHeaders   = [3]string{"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"}
)

// ticket is an admitted request's reservations.
type ticket struct {
	a     *Admission
	model string
	// price is the served model's price when it was admitted: what the
	// request is charged at (a price changed later applies to requests
	// admitted after it).
	price   spec.Pricing
	served  request.Model
	project string
	rate    rateState // for the x-ratelimit-* headers (SetHeaders)
	sec     int64
	worst   int64
	cost    float64
	windows []*window
	// ledgers hold this request's reservation, and so do slices when
	// limits are shared.
	ledgers []*ledger
	slices  []*slice
	// prompt and completion are the worst case reserved; maxTokens is the
	// completion per choice it covers.
	prompt, completion int64
	maxTokens          int
	once               sync.Once
	charged            request.Usage
}

func (t *ticket) Model() string { return t.model }

// Served is the catalog's entry of the model serving the request, so the
// gateway need not look a budget's fallback up again.
func (t *ticket) Served() request.Model { return t.served }

func (t *ticket) MaxTokens() int { return t.maxTokens }

func (t *ticket) SetHeaders(h http.Header) { t.rate.set(h) }

// Settle replaces the reservation with what the request used, never more
// than was reserved: usage above the reservation (an engine that
// generated past max_tokens, a prompt that counted more than its bound) is
// not charged, but counted as overshoot (llmgw_usage_overshoot_tokens_total)
// and logged. A request abandoned before anything could be counted is
// charged its reservation. The spend goes to every budget the project has
// now, including one added while the request ran.
func (t *ticket) Settle(u request.Usage) request.Usage {
	t.once.Do(func() {
		var prompt, completion int64
		switch {
		case u.Abandoned:
			prompt, completion = t.prompt, t.completion
			u = request.Usage{PromptTokens: int(prompt), CompletionTokens: int(completion),
				TotalTokens: int(prompt + completion), Estimated: true, Abandoned: true}
		case u.Reported || u.Estimated:
			prompt, completion = max(int64(u.PromptTokens), 0), max(int64(u.CompletionTokens), 0)
		}
		overPrompt, overCompletion := max(prompt-t.prompt, 0), max(completion-t.completion, 0)
		if overPrompt > 0 || overCompletion > 0 {
			prompt, completion = prompt-overPrompt, completion-overCompletion
			u.PromptTokens, u.CompletionTokens = int(prompt), int(completion)
			u.TotalTokens = int(prompt + completion)
			if u.Reported {
				// Only the engine's own count is overshoot; the gateway's
				// estimate is merely capped.
				t.a.overshot(t.model, overPrompt, overCompletion, true)
			}
		}
		// Charged at the price it was admitted at, which is what it
		// reserved; never more than the reservation.
		actual := min(t.price.Cost(prompt, completion), t.cost)
		now := t.a.now()
		t.a.mu.Lock()
		defer t.a.mu.Unlock()
		for _, w := range t.windows {
			w.add(t.sec, now.Unix(), prompt+completion-t.worst)
		}
		for _, l := range t.ledgers {
			l.release(t.cost)
		}
		for _, sl := range t.slices {
			if sl.reserved -= t.cost; sl.reserved < 1e-9 {
				sl.reserved = 0
			}
		}
		// The spend counts in the period the request was admitted in, which
		// reserved it (the usage row is dated then too): a request running
		// over midnight charges the old day, not the new one, whose slice
		// never reserved it.
		admitted := time.Unix(t.sec, 0).UTC()
		for _, period := range []string{store.PeriodDay, store.PeriodMonth, store.PeriodTotal} {
			start := PeriodStart(period, admitted)
			if l := t.a.ledgers[ledgerKey{t.project, period}]; l != nil {
				l.roll(now)
				if l.start.Equal(start) {
					l.charge(actual)
				}
			}
			// The usage row charges this control plane's slice of each
			// budget the project has; so does this.
			if t.a.shared != nil {
				if sl := t.a.slices[store.BudgetSubject(t.project, period, start)]; sl != nil {
					sl.consumed += actual
				}
			}
		}
		u.Priced, u.Cost, u.Admitted = true, actual, admitted
		t.charged = u
	})
	return t.charged
}
