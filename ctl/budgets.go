package ctl

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/spec"
)

const budgetsUsage = `usage: llmgw ctl budgets [list|set|delete] ...
  budgets [--project P] [--json]     list budgets with what was spent this period
  budgets set PROJECT --period day|month|total --amount X [--on-exhausted refuse|fallback] [--fallback MODEL]
              [--fallback-allowance Y] [--json]
                                     create or replace the project's budget for the period; once X is
                                     spent, MODEL serves until Y more is spent (0: only a free MODEL)
  budgets delete PROJECT --period P  remove a budget
`

func (a *app) cmdBudgets(ctx context.Context, args []string) int {
	return a.listOrGroup("budgets", budgetsUsage, args, func(args []string) int {
		var project string
		return runQuery(ctx, a, args, query[[]*managev1.Budget]{
			name: "budgets", synopsis: "budgets [--project P] [--json]", jsonHelp: "print the budgets as a JSON array (snake_case keys)",
			flags: func(fs *flag.FlagSet) { fs.StringVar(&project, "project", "", "only the budgets of this project") },
			doing: "listing budgets",
			call: func(ctx context.Context, c *client, _ string) ([]*managev1.Budget, error) {
				resp, err := c.ListBudgets(ctx, &managev1.ListBudgetsRequest{Project: project})
				return resp.GetBudgets(), err
			},
			json: writeJSON[*managev1.Budget], table: writeBudgets,
		})
	}, map[string]func([]string) int{
		"set":    func(args []string) int { return a.budgetSet(ctx, args) },
		"delete": func(args []string) int { return a.budgetDelete(ctx, args) },
	})
}

// money renders an amount in the operator's unit, as short as it can be
// read back exactly.
func money(x float64) string {
	return strconv.FormatFloat(x, 'f', -1, 64)
}

func budgetAction(b *managev1.Budget) string {
	if b.GetOnExhausted() == "fallback" {
		return fmt.Sprintf("fallback to %s (allowance %s, %.4g used)", b.GetFallbackModel(), money(b.GetFallbackAllowance()), b.GetFallbackSpent())
	}
	return orDash(b.GetOnExhausted())
}

func writeBudgets(w io.Writer, budgets []*managev1.Budget) error {
	tw := newTable(w)
	row(tw, "PROJECT", "PERIOD", "AMOUNT", "SPENT", "RESETS", "WHEN SPENT")
	for _, b := range budgets {
		resets := "never"
		if b.GetResetsUnixMs() != 0 {
			resets = timeText(b.GetResetsUnixMs())
		}
		row(tw, b.GetProject(), b.GetPeriod(), money(b.GetAmount()), costText(b.GetSpent()), resets, budgetAction(b))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, b := range budgets {
		for _, s := range b.GetWarnings() {
			fmt.Fprintf(w, "warning: %s\n", s)
		}
	}
	return nil
}

func (a *app) budgetSet(ctx context.Context, args []string) int {
	fs, conn := a.newAPIFlagSet("budgets set", "budgets set PROJECT --period day|month|total --amount X [--on-exhausted refuse|fallback] [--fallback MODEL] [--fallback-allowance Y] [--json]")
	period := fs.String("period", "", "day, month or total (UTC calendar days and months)")
	amount := fs.Float64("amount", -1, "what the project may spend in the period, in the unit models are priced in")
	onExhausted := fs.String("on-exhausted", "refuse", "what a spent budget does: refuse (402) or fallback")
	fallback := fs.String("fallback", "", "the model requests go to once the budget is spent (with --on-exhausted fallback); an alias is stored as the model's own name")
	allowance := fs.Float64("fallback-allowance", 0, "what the fallback model may spend in the period beyond --amount, in the same unit (0: only a free fallback serves)")
	asJSON := fs.Bool("json", false, "print the budget as JSON")
	pos, code, ok := a.parse(fs, args, 1, "the project")
	if !ok {
		return code
	}
	if *period == "" {
		return a.usageErrorf(fs, "--period is required: day, month or total")
	}
	if !isSet(fs, "amount") {
		return a.usageErrorf(fs, "--amount is required")
	}
	if problem := spec.CheckBudgetAmount(*amount); problem != "" {
		return a.usageErrorf(fs, "--amount %s: %s", fs.Lookup("amount").Value, problem)
	}
	if problem := spec.CheckBudgetAmount(*allowance); problem != "" {
		return a.usageErrorf(fs, "--fallback-allowance %s: %s", fs.Lookup("fallback-allowance").Value, problem)
	}
	if *fallback != "" && !isSet(fs, "on-exhausted") {
		*onExhausted = "fallback"
	}
	b := &managev1.Budget{Project: pos[0], Period: *period, Amount: *amount, OnExhausted: *onExhausted, FallbackModel: *fallback,
		FallbackAllowance: *allowance}
	return mutation(ctx, a, fs, conn, asJSON, fmt.Sprintf("setting budget %s/%s", pos[0], *period), func(ctx context.Context, c *client) (*managev1.Budget, error) {
		return c.PutBudget(ctx, &managev1.PutBudgetRequest{Budget: b})
	}, func(w io.Writer, b *managev1.Budget) {
		fmt.Fprintf(w, "budget %s/%s: amount %s, %s spent this period; when spent: %s\n",
			b.GetProject(), b.GetPeriod(), money(b.GetAmount()), costText(b.GetSpent()), budgetAction(b))
		printWarnings(w, b.GetWarnings())
	})
}

func (a *app) budgetDelete(ctx context.Context, args []string) int {
	fs, conn := a.newAPIFlagSet("budgets delete", "budgets delete PROJECT --period day|month|total")
	period := fs.String("period", "", "day, month or total")
	pos, code, ok := a.parse(fs, args, 1, "the project")
	if !ok {
		return code
	}
	if *period == "" {
		return a.usageErrorf(fs, "--period is required: day, month or total")
	}
	return mutation(ctx, a, fs, conn, nil, fmt.Sprintf("deleting budget %s/%s", pos[0], *period), func(ctx context.Context, c *client) (*managev1.DeleteBudgetResponse, error) {
		return c.DeleteBudget(ctx, &managev1.DeleteBudgetRequest{Project: pos[0], Period: *period})
	}, func(w io.Writer, _ *managev1.DeleteBudgetResponse) {
		fmt.Fprintf(w, "deleted budget %s/%s\n", pos[0], *period)
	})
}

func (a *app) cmdPrices(ctx context.Context, args []string) int {
	return runQuery(ctx, a, args, query[*managev1.ListPricesResponse]{
		name: "prices", synopsis: "prices [--json]", jsonHelp: "print the default price and every model's as JSON (snake_case keys)",
		doing: "listing prices",
		call: func(ctx context.Context, c *client, _ string) (*managev1.ListPricesResponse, error) {
			return c.ListPrices(ctx, &managev1.ListPricesRequest{})
		},
		json: writeJSONOne[*managev1.ListPricesResponse], table: writePrices,
	})
}

func writePrices(w io.Writer, p *managev1.ListPricesResponse) error {
	if d := p.GetDefaultPrice(); d != nil {
		fmt.Fprintf(w, "default price (auth.default_price): prompt %s, completion %s per 1k tokens\n\n", money(d.GetPromptPer_1K()), money(d.GetCompletionPer_1K()))
	} else {
		fmt.Fprint(w, "default price (auth.default_price): unset, models without a price are free\n\n")
	}
	tw := newTable(w)
	row(tw, "MODEL", "PROMPT/1K", "COMPLETION/1K", "FROM")
	for _, m := range p.GetModels() {
		row(tw, m.GetModel(), money(m.GetPricing().GetPromptPer_1K()), money(m.GetPricing().GetCompletionPer_1K()), m.GetSource())
	}
	return tw.Flush()
}
