package tenancy

import (
	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/spec"
)

// Prices prices usage: a model's own price, else the default, else free.
// Admission reserves and settles with it and the usage recorder writes
// each row's cost with it, so both count alike; it needs neither of them.
type Prices struct {
	// Models gives the models' own prices; nil: no model has one.
	Models Models
	// Default prices models without a price of their own (auth.
	// default_price); nil is free.
	Default *spec.Pricing
}

// Of returns a model's price.
func (p Prices) Of(model string) spec.Pricing {
	if p.Models != nil {
		if own, _, ok := p.Models.Terms(model); ok && own != nil {
			return *own
		}
	}
	return p.of(request.Model{Name: model})
}

// of returns the price of a model whose terms are known: its own, else
// the default, else free.
func (p Prices) of(m request.Model) spec.Pricing {
	if m.Price != nil {
		return *m.Price
	}
	if p.Default != nil {
		return *p.Default
	}
	return spec.Pricing{}
}

// Cost is what the given usage of a model costs at its price.
func (p Prices) Cost(model string, promptTokens, completionTokens int64) float64 {
	return p.Of(model).Cost(promptTokens, completionTokens)
}

// Priced reports whether any price exists that a budget could count:
// the default price or one of the given models' own.
func (p Prices) Priced(models []string) bool {
	if p.Default != nil && !p.Default.Free() {
		return true
	}
	if p.Models == nil {
		return false
	}
	for _, m := range models {
		if own, _, ok := p.Models.Terms(m); ok && own != nil && !own.Free() {
			return true
		}
	}
	return false
}
