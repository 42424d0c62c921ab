package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-testing/statecheck"
)

// stateCheckFunc checks llmgw_model.m's generation in the state with f.
type stateCheckFunc func(ctx context.Context, generation string) error

func (f stateCheckFunc) CheckState(ctx context.Context, req statecheck.CheckStateRequest, resp *statecheck.CheckStateResponse) {
	if req.State == nil || req.State.Values == nil || req.State.Values.RootModule == nil {
		resp.Error = fmt.Errorf("no state")
		return
	}
	for _, r := range req.State.Values.RootModule.Resources {
		if r.Address != "llmgw_model.m" {
			continue
		}
		gen, _ := r.AttributeValues["generation"].(string)
		resp.Error = f(ctx, gen)
		return
	}
	resp.Error = fmt.Errorf("llmgw_model.m is not in the state")
}
