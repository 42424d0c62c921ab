package ctl

import (
	"context"
	"fmt"
	"io"

	"github.com/llmgw/llmgw/api/managev1"
)

func (a *app) cmdStatus(ctx context.Context, args []string) int {
	return runQuery(ctx, a, args, query[*managev1.Status]{
		name:     "status",
		synopsis: "status [--json]",
		jsonHelp: "print the status as JSON",
		doing:    "getting cluster status",
		call: func(ctx context.Context, c *client, _ string) (*managev1.Status, error) {
			return c.GetStatus(ctx, &managev1.GetStatusRequest{})
		},
		json:  writeJSONOne[*managev1.Status],
		table: writeStatus,
	})
}

// writeStatus prints the cluster summary: version and ready/total counts.
func writeStatus(w io.Writer, st *managev1.Status) error {
	tw := newTable(w)
	row(tw, "version:", orDash(st.GetVersion()))
	row(tw, "nodes:", fmt.Sprintf("%d/%d ready, %d lost", st.GetNodesReady(), st.GetNodesTotal(), st.GetNodesLost()))
	row(tw, "models:", fmt.Sprint(st.GetModels()))
	row(tw, "replicas:", fmt.Sprintf("%d/%d ready", st.GetReplicasReady(), st.GetReplicasTotal()))
	row(tw, "gpus:", fmt.Sprintf("%d/%d used", st.GetGpusUsed(), st.GetGpusTotal()))
	return tw.Flush()
}
