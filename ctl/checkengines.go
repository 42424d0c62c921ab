package ctl

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/api/managev1"
)

// cmdCheckEngines asks a node's agent to run its engine checks again (after
// an engine was fixed on the machine), waits for the results and prints
// them. It exits 1 when an engine cannot start.
func (a *app) cmdCheckEngines(ctx context.Context, args []string) int {
	fs, conn := a.newAPIFlagSet("check-engines", "check-engines NODE [--wait 60s]")
	wait := fs.Duration("wait", 60*time.Second, "how long to wait for the agent's results")
	pos, code, ok := a.parse(fs, args, 1, "the node name")
	if !ok {
		return code
	}
	if *wait <= 0 {
		return a.usageErrorf(fs, "--wait must be positive, got %s", *wait)
	}
	node := pos[0]
	c, code, ok := a.dial(conn)
	if !ok {
		return code
	}
	defer c.close()
	// The call lasts as long as the agent takes, plus --timeout for the
	// management API itself.
	cctx, cancel := context.WithTimeout(ctx, *wait+c.timeout)
	defer cancel()
	resp, err := c.CheckNodeEngines(cctx, &managev1.CheckNodeEnginesRequest{Name: node, TimeoutMs: wait.Milliseconds()})
	if err != nil {
		return a.rpcError(c, "checking the engines of node "+node, err)
	}
	n := resp.GetNode()
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ENGINE\tRESULT\tPATH\tFLAGS\tDETAIL")
	failed := 0
	var notes []string
	for _, ch := range n.GetEngineChecks() {
		result, detail := "ok", ch.GetVersion()
		if !ch.GetOk() {
			failed++
			result, detail = "FAILED", ch.GetError()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", ch.GetEngine(), result, ch.GetPath(), flagsColumn(ch), detail)
		switch {
		case ch.GetHelpWarning() != "":
			notes = append(notes, ch.GetEngine()+": "+ch.GetHelpWarning())
		case len(ch.GetFlags()) > 0:
			notes = append(notes, fmt.Sprintf("%s: flags read from `%s`", ch.GetEngine(), ch.GetHelpCommand()))
		}
	}
	_ = tw.Flush()
	for _, note := range notes {
		fmt.Fprintln(a.stdout, note)
	}
	state := n.GetState()
	if r := n.GetReason(); r != "" {
		state += ": " + r
	}
	fmt.Fprintf(a.stdout, "node %s is %s\n", n.GetId(), state)
	if failed > 0 {
		fmt.Fprintf(a.stderr, "llmgw ctl: node %s: %s cannot start\n", node, plural(failed, "engine"))
		return exitError
	}
	return exitOK
}

// flagsColumn says what the check knows of an engine's flags: how many its
// help lists, "not checked" when the help could not be read in full, and
// "-" when no help was read (an older agent, a failed engine, sim).
func flagsColumn(ch *agentv1.EngineCheck) string {
	switch {
	case ch.GetHelpWarning() != "":
		return "not checked"
	case len(ch.GetFlags()) > 0:
		return fmt.Sprint(len(ch.GetFlags()))
	}
	return "-"
}
