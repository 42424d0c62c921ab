package ctl

import (
	"context"
	"fmt"

	"github.com/llmgw/llmgw/runtime/api/managev1"
)

func (a *app) cmdStatus(ctx context.Context, args []string) int {
	fs := a.newFlagSet("status", "status [--json]")
	var conn connFlags
	conn.register(fs, a.env)
	asJSON := fs.Bool("json", false, "print the status as JSON")
	if _, code, ok := a.parse(fs, args, 0, ""); !ok {
		return code
	}
	c, code, ok := a.dial(&conn)
	if !ok {
		return code
	}
	defer c.close()
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	st, err := c.GetStatus(cctx, &managev1.GetStatusRequest{})
	if err != nil {
		return a.rpcError(c, "getting cluster status", err)
	}
	if *asJSON {
		if err := writeJSONOne(a.stdout, st); err != nil {
			return a.errorf("%v", err)
		}
		return exitOK
	}
	tw := newTable(a.stdout)
	row(tw, "version:", orDash(st.GetVersion()))
	row(tw, "nodes:", fmt.Sprintf("%d/%d ready, %d lost", st.GetNodesReady(), st.GetNodesTotal(), st.GetNodesLost()))
	row(tw, "models:", fmt.Sprint(st.GetModels()))
	row(tw, "replicas:", fmt.Sprintf("%d/%d ready", st.GetReplicasReady(), st.GetReplicasTotal()))
	row(tw, "gpus:", fmt.Sprintf("%d/%d used", st.GetGpusUsed(), st.GetGpusTotal()))
	if err := tw.Flush(); err != nil {
		return a.errorf("writing output: %v", err)
	}
	return exitOK
}
