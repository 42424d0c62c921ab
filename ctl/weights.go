package ctl

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/llmgw/llmgw/api/managev1"
)

// cmdWeights lists every node's weights cache and what could be freed or,
// with --collect, asks the nodes to delete it.
func (a *app) cmdWeights(ctx context.Context, args []string) int {
	fs, conn := a.newAPIFlagSet("weights", "weights [--node N] [--collect [--dry-run] [--wait 60s]] [--json]")
	node := fs.String("node", "", "only this node")
	collect := fs.Bool("collect", false, "delete the cached weights no catalog model and no live shard of the node uses")
	dryRun := fs.Bool("dry-run", false, "with --collect: ask the nodes what they would delete, deleting nothing")
	wait := fs.Duration("wait", 60*time.Second, "with --collect: how long to wait for the nodes' answers")
	asJSON := fs.Bool("json", false, "print the nodes as a JSON array (snake_case keys)")
	if _, code, ok := a.parse(fs, args, 0, ""); !ok {
		return code
	}
	if *dryRun && !*collect {
		return a.usageErrorf(fs, "--dry-run goes with --collect")
	}
	if *wait <= 0 {
		return a.usageErrorf(fs, "--wait must be positive, got %s", *wait)
	}
	c, code, ok := a.dial(conn)
	if !ok {
		return code
	}
	defer c.close()
	if !*collect {
		cctx, cancel := c.callCtx(ctx)
		defer cancel()
		resp, err := c.ListWeights(cctx, &managev1.ListWeightsRequest{Node: *node})
		if err != nil {
			return a.rpcError(c, "listing the weights caches", err)
		}
		if *asJSON {
			return a.printed(writeJSON(a.stdout, resp.GetNodes()))
		}
		return a.printed(writeWeights(a.stdout, resp.GetNodes()))
	}
	cctx, cancel := context.WithTimeout(ctx, *wait+c.timeout)
	defer cancel()
	resp, err := c.CollectWeights(cctx, &managev1.CollectWeightsRequest{Node: *node, DryRun: *dryRun, TimeoutMs: wait.Milliseconds()})
	if err != nil {
		return a.rpcError(c, "collecting weights", err)
	}
	if *asJSON {
		if code := a.printed(writeJSON(a.stdout, resp.GetNodes())); code != exitOK {
			return code
		}
	} else if code := a.printed(writeCollected(a.stdout, resp.GetNodes(), *dryRun)); code != exitOK {
		return code
	}
	failed := false
	for _, n := range resp.GetNodes() {
		for _, e := range n.GetErrors() {
			fmt.Fprintf(a.stderr, "llmgw ctl: node %s: %s\n", n.GetNode(), e)
			failed = true
		}
	}
	if failed {
		return exitError
	}
	return exitOK
}

// printed turns an output error into the exit code.
func (a *app) printed(err error) int {
	if err != nil {
		fmt.Fprintf(a.stderr, "llmgw ctl: writing output: %v\n", err)
		return exitError
	}
	return exitOK
}

// writeWeights prints every cache entry with who uses it, then per node
// what could be freed and the disk it is on.
func writeWeights(w io.Writer, nodes []*managev1.NodeWeights) error {
	tw := newTable(w)
	row(tw, "NODE", "KEY", "SIZE", "USED BY", "SOURCE")
	for _, n := range nodes {
		for _, e := range n.GetEntries() {
			used := strings.Join(e.GetModels(), ",")
			if sh := e.GetShards(); len(sh) > 0 {
				used = strings.Trim(used+",shards "+strings.Join(sh, ","), ",")
			}
			if e.GetCollectable() {
				used = "nothing: collectable"
			}
			row(tw, n.GetNode(), e.GetKey(), sizeText(e.GetSizeBytes()), used, e.GetSource())
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, n := range nodes {
		if !n.GetReported() {
			fmt.Fprintf(w, "%s: cache not reported (its agent does not report one)\n", n.GetNode())
			continue
		}
		var held, free uint64
		collectable := 0
		for _, e := range n.GetEntries() {
			held += e.GetSizeBytes()
			if e.GetCollectable() {
				free += e.GetSizeBytes()
				collectable++
			}
		}
		line := fmt.Sprintf("%s: %s, %s; %s could be freed (%s)", n.GetNode(), entries(len(n.GetEntries())), sizeText(held), sizeText(free), entries(collectable))
		if t := n.GetDiskTotalBytes(); t > 0 {
			line += fmt.Sprintf("; disk %s free of %s", sizeText(n.GetDiskFreeBytes()), sizeText(t))
		}
		if !n.GetConnected() {
			line += " (not connected)"
		}
		fmt.Fprintln(w, line)
	}
	return nil
}

// writeCollected prints what each node deleted (or would).
func writeCollected(w io.Writer, nodes []*managev1.NodeWeights, dryRun bool) error {
	verb := "deleted"
	if dryRun {
		verb = "would delete"
	}
	for _, n := range nodes {
		var freed uint64
		for _, e := range n.GetEntries() {
			freed += e.GetSizeBytes()
			what, source := e.GetKey(), e.GetSource()
			if e.GetPartial() {
				what = "partial download " + what
				if source == "" {
					source = "source not recorded"
				}
			}
			if _, err := fmt.Fprintf(w, "%s: %s %s (%s, %s)\n", n.GetNode(), verb, what, source, sizeText(e.GetSizeBytes())); err != nil {
				return err
			}
		}
		if _, err := fmt.Fprintf(w, "%s: %s %s, %s\n", n.GetNode(), verb, entries(len(n.GetEntries())), sizeText(freed)); err != nil {
			return err
		}
	}
	return nil
}

// sizeText renders bytes in binary units with one decimal below 10.
func sizeText(b uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, i := float64(b), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 || v >= 10 {
		return fmt.Sprintf("%.0f %s", v, units[i])
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// entries is "1 entry", "3 entries".
func entries(n int) string {
	if n == 1 {
		return "1 entry"
	}
	return fmt.Sprintf("%d entries", n)
}
