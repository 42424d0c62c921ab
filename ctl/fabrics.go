package ctl

import (
	"context"
	"io"
	"strings"

	"github.com/llmgw/llmgw/api/managev1"
)

func (a *app) cmdFabrics(ctx context.Context, args []string) int {
	return runQuery(ctx, a, args, query[[]*managev1.Fabric]{
		name:     "fabrics",
		synopsis: "fabrics [--json]",
		jsonHelp: "print the fabrics as a JSON array (snake_case keys)",
		doing:    "listing fabrics",
		call: func(ctx context.Context, c *client, _ string) ([]*managev1.Fabric, error) {
			resp, err := c.ListFabrics(ctx, &managev1.ListFabricsRequest{})
			return resp.GetFabrics(), err
		},
		json:  writeJSON[*managev1.Fabric],
		table: writeFabrics,
	})
}

// writeFabrics prints the fabrics table: each fabric, its description and
// the declared nodes in it.
func writeFabrics(w io.Writer, fabrics []*managev1.Fabric) error {
	tw := newTable(w)
	row(tw, "FABRIC", "DESCRIPTION", "NODES")
	for _, f := range fabrics {
		row(tw,
			f.GetName(),
			orDash(oneLine(f.GetDescription(), 60)),
			orDash(strings.Join(f.GetNodes(), ",")),
		)
	}
	return tw.Flush()
}
