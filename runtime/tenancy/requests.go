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
// limits shared between control planes it is counted in this control
// plane's windows, which its slices bound for the requests that reach an
// engine.
func (a *Admission) LimitRequest(ctx context.Context, p request.Principal) (http.Header, error) {
	proj, err := a.dir.get(ctx, p.Project)
	if err != nil {
		return nil, fmt.Errorf("reading project %q: %w", p.Project, err)
	}
	sec := a.now().Unix()
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
	for _, c := range checks {
		if c.limit <= 0 {
			continue
		}
		if wait := c.w.wait(sec, 1, c.limit); wait > 0 {
			return nil, &request.Rejection{Status: http.StatusTooManyRequests, Type: c.kind(), Code: "rate_limit_exceeded",
				Reason: "limit", Header: rateHeaders(checks, sec), RetryAfter: wait, Message: fmt.Sprintf(
					"rate limit of %s reached: %d %s per minute; used %d; retry in %s",
					c.whose(), c.limit, c.kind(), c.w.sum(sec), wait)}
		}
	}
	for _, c := range checks {
		c.w.charge(sec, 1)
	}
	return rateHeaders(checks, sec), nil
}
