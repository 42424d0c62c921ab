package ctl

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/llmgw/llmgw/api/managev1"
)

func (a *app) cmdExplain(ctx context.Context, args []string) int {
	return runQuery(ctx, a, args, query[*managev1.Explanation]{
		name:     "explain-placement",
		synopsis: "explain-placement MODEL [--json]",
		arg:      "the model name",
		jsonHelp: "print the explanation as JSON (snake_case keys)",
		doing:    "explaining placement of",
		call: func(ctx context.Context, c *client, model string) (*managev1.Explanation, error) {
			return c.ExplainPlacement(ctx, &managev1.ExplainPlacementRequest{Model: model})
		},
		json:  writeJSONOne[*managev1.Explanation],
		table: writeExplanation,
	})
}

// writeExplanation prints the control plane's own text when it sent one;
// otherwise it renders the verdicts: per profile, every node and why.
func writeExplanation(w io.Writer, ex *managev1.Explanation) error {
	if text := ex.GetText(); text != "" {
		if !strings.HasSuffix(text, "\n") {
			text += "\n"
		}
		_, err := io.WriteString(w, text)
		return err
	}
	if ex.GetPlaced() {
		fmt.Fprintf(w, "model %s places with profile %s\n", ex.GetModel(), orDash(ex.GetProfile()))
	} else {
		fmt.Fprintf(w, "model %s does not place\n", ex.GetModel())
	}
	for _, p := range ex.GetProfiles() {
		verdict := "does not place"
		if p.GetPlaced() {
			verdict = "places"
		}
		fmt.Fprintf(w, "\nprofile %s: %s", p.GetProfile(), verdict)
		if s := p.GetSummary(); s != "" {
			fmt.Fprintf(w, ": %s", s)
		}
		fmt.Fprintln(w)
		if len(p.GetNodes()) == 0 {
			continue
		}
		tw := newTable(w)
		row(tw, "  NODE", "FEASIBLE", "SCORE", "REASON")
		for _, n := range p.GetNodes() {
			feasible, score := "no", "-"
			if n.GetFeasible() {
				feasible, score = "yes", fmt.Sprintf("%.2f", n.GetScore())
			}
			row(tw, "  "+n.GetNode(), feasible, score, orDash(n.GetReason()))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
