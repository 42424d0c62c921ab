package config

import "time"

// SharedLimits configures how control planes on one PostgreSQL store share
// rate limits and budgets: each leases slices of them from the store and
// admits from its slices in memory. A SQLite store serves one control
// plane, which counts in memory, and ignores this section.
type SharedLimits struct {
	// BudgetSlice is the part of a budget's amount a control plane leases
	// beyond what a request needs when its slice runs short; above 0, at most
	// 1.
	// Type: fraction.
	BudgetSlice float64 `koanf:"budget_slice" yaml:"budget_slice" json:"budget_slice"`
	// RateSlice is the same for a key's or project's RPM and TPM.
	// Type: fraction.
	RateSlice float64 `koanf:"rate_slice" yaml:"rate_slice" json:"rate_slice"`
	// SliceTTL is how long a slice lasts without renewal: the longest a dead
	// control plane's budget slices stay taken (its rate slices count a
	// minute longer, so nothing it admitted is counted twice in a rate
	// window); at least `1s`.
	SliceTTL time.Duration `koanf:"slice_ttl" yaml:"slice_ttl" json:"slice_ttl"`
	// IdleReturn is how long a budget or limit goes without a request before a
	// control plane gives back the unused part of its slice; at most
	// `slice_ttl`.
	IdleReturn time.Duration `koanf:"idle_return" yaml:"idle_return" json:"idle_return"`
}

// DefaultSharedLimits: slices of a tenth, held for a minute, given back
// after 2s idle. (A rate slice counts a minute past its lease's end
// whatever the TTL, so a dead control plane's admissions are never counted
// twice.)
func DefaultSharedLimits() SharedLimits {
	return SharedLimits{BudgetSlice: 0.1, RateSlice: 0.1, SliceTTL: time.Minute, IdleReturn: 2 * time.Second}
}

func (l SharedLimits) validate(add func(key, format string, args ...any)) {
	for _, f := range []struct {
		key string
		v   float64
	}{{"shared_limits.budget_slice", l.BudgetSlice}, {"shared_limits.rate_slice", l.RateSlice}} {
		if f.v <= 0 || f.v > 1 {
			add(f.key, "%g: must be a fraction of the limit above 0 and at most 1", f.v)
		}
	}
	if l.SliceTTL < time.Second {
		add("shared_limits.slice_ttl", "%s: must be at least 1s", l.SliceTTL)
	}
	if l.IdleReturn <= 0 || l.IdleReturn > l.SliceTTL {
		add("shared_limits.idle_return", "%s: must be positive and at most shared_limits.slice_ttl (%s)", l.IdleReturn, l.SliceTTL)
	}
}
