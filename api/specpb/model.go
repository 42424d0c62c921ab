// Package specpb converts the contract's vocabulary (package spec) to and
// from the protocol messages (agentv1, managev1): the one conversion the
// control plane, the agent, `llmgw ctl` and the Terraform provider share.
package specpb

import (
	"fmt"
	"slices"
	"time"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/spec"
)

// ModelToProto converts a catalog model definition to the management API's
// Model. Durations are sent in their catalog spelling ("5m", "1h30m"); a zero
// duration is sent as absent.
func ModelToProto(m spec.Model) *managev1.Model {
	out := &managev1.Model{
		Name:           m.Name,
		Aliases:        slices.Clone(m.Aliases),
		Source:         m.Source,
		RoutingProfile: m.RoutingProfile,
		ContextLength:  int32(m.ContextLength),
		MaxOutput:      int32(m.MaxOutput),
		Rollout:        m.Rollout,
		Scaling: &managev1.Scaling{
			Min:         int32(m.Scaling.Min),
			Max:         int32(m.Scaling.Max),
			IdleTimeout: durationText(m.Scaling.IdleTimeout),
		},
		Pricing: PricingToProto(m.Pricing),
	}
	for _, p := range m.Profiles {
		out.Profiles = append(out.Profiles, ProfileToProto(p))
	}
	return out
}

// ModelFromProto converts the management API's Model to a catalog model
// definition, leaving out the output-only fields (origin, generation,
// status). It fails only on a duration that does not parse, naming its key.
func ModelFromProto(m *managev1.Model) (spec.Model, error) {
	if m == nil {
		return spec.Model{}, fmt.Errorf("model: is required")
	}
	out := spec.Model{
		Name:           m.GetName(),
		Aliases:        slices.Clone(m.GetAliases()),
		Source:         m.GetSource(),
		RoutingProfile: m.GetRoutingProfile(),
		ContextLength:  int(m.GetContextLength()),
		MaxOutput:      int(m.GetMaxOutput()),
		Rollout:        m.GetRollout(),
		Pricing:        PricingFromProto(m.GetPricing()),
	}
	if s := m.GetScaling(); s != nil {
		idle, err := parseDuration("scaling.idle_timeout", s.GetIdleTimeout())
		if err != nil {
			return spec.Model{}, err
		}
		out.Scaling = spec.Scaling{Min: int(s.GetMin()), Max: int(s.GetMax()), IdleTimeout: idle}
	}
	for i, p := range m.GetProfiles() {
		sp, err := ProfileFromProto(p)
		if err != nil {
			return spec.Model{}, fmt.Errorf("profiles[%d].%w", i, err)
		}
		out.Profiles = append(out.Profiles, sp)
	}
	return out, nil
}

// PricingToProto converts a price; nil (no price of its own) stays nil.
func PricingToProto(p *spec.Pricing) *managev1.Pricing {
	if p == nil {
		return nil
	}
	return &managev1.Pricing{PromptPer_1K: p.PromptPer1K, CompletionPer_1K: p.CompletionPer1K}
}

// PricingFromProto converts a price; nil stays nil.
func PricingFromProto(p *managev1.Pricing) *spec.Pricing {
	if p == nil {
		return nil
	}
	return &spec.Pricing{PromptPer1K: p.GetPromptPer_1K(), CompletionPer1K: p.GetCompletionPer_1K()}
}

// durationText is d in the catalog's spelling, or "" for zero.
func durationText(d spec.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// parseDuration reads a duration the API sent; "" is zero.
func parseDuration(key, s string) (spec.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: cannot parse %q as a duration", key, s)
	}
	return spec.Duration(d), nil
}
