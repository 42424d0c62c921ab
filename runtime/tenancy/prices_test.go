package tenancy

import (
	"testing"

	"github.com/llmgw/llmgw/spec"
)

func TestPrices(t *testing.T) {
	own := fakeModels{"own": {PromptPer1K: 1, CompletionPer1K: 2}}
	def := &spec.Pricing{PromptPer1K: 0.5, CompletionPer1K: 0.5}
	tests := []struct {
		name   string
		prices Prices
		model  string
		cost   float64
		priced bool
	}{
		{"a model's own price", Prices{Models: own}, "own", 1 + 2, true},
		{"own price over the default", Prices{Models: own, Default: def}, "own", 1 + 2, true},
		{"the default for a model without one", Prices{Models: own, Default: def}, "other", 0.5 + 0.5, true},
		{"free without either", Prices{Models: fakeModels{}}, "other", 0, false},
		{"no models at all", Prices{}, "other", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.prices.Cost(tt.model, 1000, 1000); got != tt.cost {
				t.Errorf("Cost = %v, want %v", got, tt.cost)
			}
			if got := tt.prices.Priced([]string{tt.model}); got != tt.priced {
				t.Errorf("Priced = %v, want %v", got, tt.priced)
			}
		})
	}
}
