package scheduler

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Placed reports whether any profile placed.
func (e Explanation) Placed() bool {
	for _, p := range e.Profiles {
		if p.Placed {
			return true
		}
	}
	return false
}

// String renders the explanation for the CLI: a headline, then per profile
// its summary and a table of every node with its verdict.
func (e Explanation) String() string {
	var b strings.Builder
	switch {
	case len(e.Profiles) == 0:
		fmt.Fprintf(&b, "model %s: not placed: it has no profiles\n", e.Model)
		return b.String()
	case e.Placed():
		last := e.Profiles[len(e.Profiles)-1]
		fmt.Fprintf(&b, "model %s: placed with profile %s\n", e.Model, last.Profile)
	default:
		fmt.Fprintf(&b, "model %s: not placed (%d %s tried)\n", e.Model, len(e.Profiles), plural(len(e.Profiles), "profile", "profiles"))
	}
	for _, p := range e.Profiles {
		fmt.Fprintf(&b, "\nprofile %s: %s\n", p.Profile, p.Summary)
		if len(p.Nodes) == 0 {
			continue
		}
		var table strings.Builder
		tw := tabwriter.NewWriter(&table, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  NODE\tFEASIBLE\tSCORE\tREASON")
		for _, v := range p.Nodes {
			feasible, score := "no", "-"
			if v.Feasible {
				feasible, score = "yes", strconv.FormatFloat(v.Score, 'f', 3, 64)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", v.NodeID, feasible, score, v.Reason)
		}
		_ = tw.Flush() // writes to a strings.Builder, which never fails
		for line := range strings.Lines(table.String()) {
			b.WriteString(strings.TrimRight(line, " \n"))
			b.WriteByte('\n')
		}
	}
	return b.String()
}
