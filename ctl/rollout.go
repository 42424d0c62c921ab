package ctl

import (
	"context"
	"fmt"
	"strings"

	"github.com/llmgw/llmgw/api/managev1"
)

// cmdRollout asks the control plane to replace a model's stale replicas
// (placed for an earlier generation of its profiles) one at a time, each
// replacement ready before the replica it replaces stops: what a model
// whose rollout is "manual" waits for.
func (a *app) cmdRollout(ctx context.Context, args []string) int {
	fs, conn := a.newAPIFlagSet("rollout", "rollout MODEL")
	pos, code, ok := a.parse(fs, args, 1, "the model name")
	if !ok {
		return code
	}
	c, code, ok := a.dial(conn)
	if !ok {
		return code
	}
	defer c.close()
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	res, err := c.RolloutModel(cctx, &managev1.RolloutModelRequest{Name: pos[0]})
	if err != nil {
		return a.rpcError(c, "rolling out model "+pos[0], err)
	}
	if len(res.GetReplicas()) == 0 {
		fmt.Fprintf(a.stdout, "model %s: no stale replica; nothing to roll\n", pos[0])
		return exitOK
	}
	fmt.Fprintf(a.stdout, "model %s: replacing %s one at a time, each replacement ready first: %s\n",
		pos[0], plural(len(res.GetReplicas()), "stale replica"), strings.Join(res.GetReplicas(), ", "))
	fmt.Fprintf(a.stdout, "follow it with: llmgw ctl replicas --model %s\n", pos[0])
	return exitOK
}
