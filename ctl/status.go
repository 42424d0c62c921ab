package ctl

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

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
		json: writeJSONOne[*managev1.Status],
		table: func(w io.Writer, st *managev1.Status) error {
			return writeStatus(w, st, a.now())
		},
	})
}

// writeStatus prints the cluster summary: version and ready/total counts,
// then, when control planes share the store, the leader, its lease and
// every control plane, then where the models' weights are, per fabric.
func writeStatus(w io.Writer, st *managev1.Status, now time.Time) error {
	if err := writeStatusCounts(w, st, now); err != nil {
		return err
	}
	if len(st.GetHoldings()) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := newTable(w)
	row(tw, "MODEL", "NODES HOLDING ITS WEIGHTS, PER FABRIC")
	for _, h := range st.GetHoldings() {
		row(tw, h.GetModel(), holdingText(h))
	}
	return tw.Flush()
}

func writeStatusCounts(w io.Writer, st *managev1.Status, now time.Time) error {
	tw := newTable(w)
	row(tw, "version:", orDash(st.GetVersion()))
	row(tw, "nodes:", fmt.Sprintf("%d/%d ready, %d lost", st.GetNodesReady(), st.GetNodesTotal(), st.GetNodesLost()))
	row(tw, "models:", fmt.Sprint(st.GetModels()))
	row(tw, "replicas:", fmt.Sprintf("%d/%d ready", st.GetReplicasReady(), st.GetReplicasTotal()))
	row(tw, "gpus:", fmt.Sprintf("%d/%d used", st.GetGpusUsed(), st.GetGpusTotal()))
	if ha := st.GetHa(); ha != nil {
		leader := "none (an election is under way)"
		if ha.GetLeader() != "" {
			ends := "ended " + humanAgo(now, ha.GetLeaseExpiresUnixMs()) + " ago"
			if left := time.UnixMilli(ha.GetLeaseExpiresUnixMs()).Sub(now); left > 0 {
				ends = "ends in " + humanDuration(left)
			}
			leader = fmt.Sprintf("%s (token %d, since %s ago, lease %s; %s lease renewed every %s)", ha.GetLeader(), ha.GetToken(),
				humanAgo(now, ha.GetLeaseAcquiredUnixMs()), ends,
				humanDuration(time.Duration(ha.GetLeaseTtlMs())*time.Millisecond), humanDuration(time.Duration(ha.GetRenewMs())*time.Millisecond))
		}
		row(tw, "leader:", leader)
		row(tw, "answered by:", orDash(ha.GetAnsweredBy()))
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(ha.GetControlPlanes()) == 0 {
			return nil
		}
		fmt.Fprintln(w)
		tw = newTable(w)
		row(tw, "CONTROL PLANE", "ROLE", "AGENTS", "MANAGE", "CLIENT", "VERSION", "LAST SEEN")
		for _, cp := range ha.GetControlPlanes() {
			row(tw, cp.GetName(), cp.GetRole(), orDash(cp.GetAgentAddr()), orDash(cp.GetManageAddr()), orDash(cp.GetClientAddr()),
				orDash(cp.GetVersion()), humanAgo(now, cp.GetLastSeenUnixMs()))
		}
	}
	return tw.Flush()
}

// holdingText says how many nodes of each fabric hold a model's weights:
// "ib-a 2/2 nodes, ib-b 0/3 nodes, no fabric 0/1 nodes".
func holdingText(h *managev1.ModelHoldings) string {
	parts := make([]string, 0, len(h.GetFabrics()))
	for _, f := range h.GetFabrics() {
		name := f.GetFabric()
		if name == "" {
			name = "no fabric"
		}
		parts = append(parts, fmt.Sprintf("%s %d/%d nodes", name, f.GetHolding(), f.GetNodes()))
	}
	return strings.Join(parts, ", ")
}
