package ctl

import (
	"context"
	"fmt"

	"github.com/llmgw/llmgw/api/managev1"
)

// cmdDrain starts draining a node (its replicas move elsewhere, each
// replacement ready before the original stops) or, with --cancel, stops a
// drain so the node takes work again.
func (a *app) cmdDrain(ctx context.Context, args []string) int {
	fs, conn := a.newAPIFlagSet("drain", "drain NODE [--cancel | --force]")
	cancel := fs.Bool("cancel", false, "stop draining and let the node take work again")
	force := fs.Bool("force", false, "drain even when a replica on the node cannot move (it stays until a node can take it or its model is removed)")
	pos, code, ok := a.parse(fs, args, 1, "the node name")
	if !ok {
		return code
	}
	node := pos[0]
	return a.withClient(ctx, conn, func(ctx context.Context, c *client) int {
		resp, err := c.DrainNode(ctx, &managev1.DrainNodeRequest{Name: node, Cancel: *cancel, Force: *force && !*cancel})
		if *cancel {
			if err != nil {
				return a.rpcError(c, "cancelling the drain of node "+node, err)
			}
			fmt.Fprintf(a.stdout, "stopped draining %s: it takes work again\n", node)
			return exitOK
		}
		if err != nil {
			return a.rpcError(c, "draining node "+node, err)
		}
		fmt.Fprintf(a.stdout, "draining %s: %s to move; watch with llmgw ctl nodes\n", node, plural(int(resp.GetReplicas()), "replica"))
		for _, b := range resp.GetBlocked() {
			fmt.Fprintf(a.stdout, "  stays until a node can take it: %s\n", b)
		}
		return exitOK
	})
}

// plural is "1 replica", "0 replicas", "3 replicas".
func plural(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
