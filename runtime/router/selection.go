package router

import (
	"fmt"
	"slices"
	"strings"

	"github.com/llmgw/llmgw/spec"
)

// Selector is a selection policy: it chooses one upstream of a non-empty pool
// for a request with the given prefix key (possibly nil). It must be safe for
// concurrent use and must not modify the pool; the Router increments the
// chosen upstream's counter. Returning nil means no upstream is acceptable.
type Selector interface {
	Select(p *Pool, key Key) *Upstream
}

// LeastLoaded picks the upstream whose load after taking the request,
// (queue + 1) / weight, is lowest, so a weight-2 replica carries twice
// the requests of a weight-1 one. The queue is the more of the requests in
// flight through this router and those the engine last reported running or
// waiting. Ties are broken round-robin, starting at a position that advances
// on every pick, so equal load spreads evenly. It ignores the key.
type LeastLoaded struct{}

// Select implements Selector.
func (LeastLoaded) Select(p *Pool, _ Key) *Upstream { return p.leastLoaded() }

// RoundRobin takes the upstreams in turn, whatever their load and weight:
// the baseline the others are measured against.
type RoundRobin struct{}

// Select implements Selector.
func (RoundRobin) Select(p *Pool, _ Key) *Upstream { return p.upstreams[p.Rotate()] }

var (
	_ Selector = LeastLoaded{}
	_ Selector = RoundRobin{}
	_ Selector = PrefixAffinity{}
)

// Routing profiles: the names a model's routing_profile may take, and the
// policy each selects. "chat", the default, keeps conversations on the
// replica that holds their prefix.
var profiles = map[string]Selector{
	"chat":         PrefixAffinity{},
	"prefix":       PrefixAffinity{},
	"least-loaded": LeastLoaded{},
	"round-robin":  RoundRobin{},
}

// ProfileNames lists the routing profiles (spec.RoutingProfiles).
func ProfileNames() []string { return slices.Clone(spec.RoutingProfiles) }

// Policy returns the selection policy a routing profile names.
func Policy(profile string) (Selector, error) {
	if s, ok := profiles[profile]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("unknown routing profile %q: use one of %s", profile, strings.Join(ProfileNames(), ", "))
}
