package ctl

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/llmgw/llmgw/api/managev1"
)

func (a *app) cmdNodes(ctx context.Context, args []string) int {
	return runQuery(ctx, a, args, query[[]*managev1.Node]{
		name:     "nodes",
		synopsis: "nodes [--json]",
		jsonHelp: "print the nodes as a JSON array (snake_case keys)",
		doing:    "listing nodes",
		call: func(ctx context.Context, c *client, _ string) ([]*managev1.Node, error) {
			resp, err := c.ListNodes(ctx, &managev1.ListNodesRequest{})
			return resp.GetNodes(), err
		},
		json: writeJSON[*managev1.Node],
		table: func(w io.Writer, nodes []*managev1.Node) error {
			return writeNodes(w, nodes, a.now())
		},
	})
}

// writeNodes prints the nodes table (a node the control plane holds no
// declaration for is marked undeclared in the STATE column), then a line for every node with
// something to explain (why it is not ready, GPU discovery errors, fabrics
// out of service).
func writeNodes(w io.Writer, nodes []*managev1.Node, now time.Time) error {
	tw := newTable(w)
	row(tw, "NODE", "STATE", "GPUS", "MEM", "DISK", "CLASSES", "FABRICS", "REPLICAS", "LAST SEEN")
	for _, n := range nodes {
		row(tw,
			n.GetId(),
			nodeState(n),
			nodeGPUs(n),
			humanBytes(n.GetMemoryTotalBytes()),
			nodeDisk(n),
			orDash(strings.Join(nodeClasses(n), ",")),
			orDash(nodeFabrics(n)),
			fmt.Sprint(n.GetReplicas()),
			humanAgo(now, n.GetLastSeenUnixMs()),
		)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var notes []string
	for _, n := range nodes {
		if r := n.GetReason(); r != "" {
			notes = append(notes, fmt.Sprintf("%s: %s: %s", n.GetId(), orDash(n.GetState()), r))
		}
		// The control plane puts the GPU error in the reason too: once is
		// enough (issue 18 saw it twice).
		if e := n.GetGpuError(); e != "" && !strings.Contains(n.GetReason(), e) {
			notes = append(notes, fmt.Sprintf("%s: GPU discovery: %s", n.GetId(), e))
		}
		for line := range strings.Lines(n.GetDrainBlocked()) {
			notes = append(notes, fmt.Sprintf("%s: drain blocked: %s", n.GetId(), strings.TrimSpace(line)))
		}
		for _, f := range n.GetFabrics() {
			if !f.GetInService() {
				why := strings.Join(f.GetProblems(), "; ")
				notes = append(notes, fmt.Sprintf("%s: fabric %s out of service: %s", n.GetId(), f.GetName(), orDash(why)))
			}
		}
	}
	if len(notes) > 0 {
		_, err := fmt.Fprintf(w, "\n%s\n", strings.Join(notes, "\n"))
		return err
	}
	return nil
}

// nodeState is the node's state as the server reports it, followed by
// " (undeclared)" when the control plane holds no declaration for the node
// (its agent runs on its own file), e.g. "ready (undeclared)".
func nodeState(n *managev1.Node) string {
	s := orDash(n.GetState())
	if !n.GetDeclared() {
		s += " (undeclared)"
	}
	return s
}

// nodeGPUs is "free/total free", "-" for a node without GPUs and "unknown"
// when discovery failed.
func nodeGPUs(n *managev1.Node) string {
	total := len(n.GetGpus())
	if total == 0 {
		if n.GetGpuError() != "" {
			return "unknown"
		}
		return "-"
	}
	free := total - len(n.GetUsedGpus())
	if free < 0 {
		free = 0
	}
	return fmt.Sprintf("%d/%d free", free, total)
}

// nodeClasses are the distinct GPU classes of a node, sorted.
func nodeClasses(n *managev1.Node) []string {
	var classes []string
	for _, g := range n.GetGpus() {
		if c := g.GetClass(); c != "" && !slices.Contains(classes, c) {
			classes = append(classes, c)
		}
	}
	slices.Sort(classes)
	return classes
}

// nodeFabrics names the node's fabrics, marking those out of service.
func nodeFabrics(n *managev1.Node) string {
	names := make([]string, 0, len(n.GetFabrics()))
	for _, f := range n.GetFabrics() {
		if f.GetInService() {
			names = append(names, f.GetName())
		} else {
			names = append(names, f.GetName()+"(out)")
		}
	}
	return strings.Join(names, ",")
}

// nodeDisk is the free space of the filesystem holding the node's weights
// cache against its size, "120G/400G"; a dash when the node did not report
// it (not that it has no space).
func nodeDisk(n *managev1.Node) string {
	if n.WeightsDiskTotalBytes == nil {
		return "-"
	}
	return humanBytes(n.GetWeightsDiskFreeBytes()) + "/" + humanBytes(n.GetWeightsDiskTotalBytes())
}
