package tenancy

import (
	"context"
	"fmt"
	"net/http"

	"github.com/llmgw/llmgw/runtime/request"
)

// LimitRequest implements gateway.RequestLimiter: a request that reaches
// no engine (memory notes, /mcp) counts as one request against the key's
// and the project's requests per minute, and is refused as Admit refuses
// one when either is reached. It takes no tokens and no budget. With
// limits shared between control planes it is counted as Admit counts a
// request: in this control plane's window and in its slice of each
// limit, leased from the store, so the requests of every route over all
// control planes stay within the limit.
func (a *Admission) LimitRequest(ctx context.Context, p request.Principal) (http.Header, error) {
	proj, err := a.dir.get(ctx, p.Project)
	if err != nil {
		return nil, fmt.Errorf("reading project %q: %w", p.Project, err)
	}
	return growing(ctx, a, func(grown map[growKey]bool) (http.Header, []growth, error) {
		return a.limitOnce(p, proj, grown)
	})
}

// limitOnce decides a request that reaches no engine under the admission
// lock, and counts it; or returns the slices too short (see rateChecks).
func (a *Admission) limitOnce(p request.Principal, proj projectInfo, grown map[growKey]bool) (http.Header, []growth, error) {
	now := a.now()
	sec := now.Unix()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sweep(sec)
	checks := make([]check, 0, 2)
	if p.KeyID != "" {
		km := a.meterFor(a.keys, p.KeyID, sec)
		checks = append(checks, check{&km.requests, limitOf(p.RPM, a.opts.DefaultRPM), false, "key", p.KeyID})
	}
	pm := a.meterFor(a.projs, p.Project, sec)
	checks = append(checks, check{&pm.requests, limitOf(proj.project.RPM, a.opts.DefaultRPM), false, "project", p.Project})
	used, gs, err := a.rateChecks(checks, now, 0, 0, 0, grown)
	if err != nil {
		return nil, gs, err
	}
	for _, c := range checks {
		c.w.charge(sec, 1)
	}
	for _, sl := range used {
		sl.used = now
	}
	return rateHeaders(checks, sec), nil, nil
}
