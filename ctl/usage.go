package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/llmgw/api/managev1"
)

// parseSpan reads a length of time: a Go duration ("36h", "90m") or whole
// days ("7d").
func parseSpan(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%q is not a number of days", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a duration", s)
	}
	return d, nil
}

// parseDate reads a UTC date ("2026-03-01", midnight) or an RFC 3339 time.
func parseDate(s string) (time.Time, error) {
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q is not a date (2026-03-01) or an RFC 3339 time", s)
}

// parseWhen reads --since and --until: a date, an RFC 3339 time, or a span
// meaning that long ago ("24h", "7d").
func parseWhen(s string, now time.Time) (time.Time, error) {
	if d, err := parseSpan(s); err == nil {
		return now.Add(-d), nil
	}
	if t, err := parseDate(s); err == nil {
		return t, nil
	}
	return time.Time{}, errors.New("give a date (2026-03-01), an RFC 3339 time or a time ago (24h, 7d)")
}

const usageSynopsis = "usage [--project P] [--model M] [--since 7d|2026-03-01] [--until T] [--by-day] [--rows] [--json]"

// cmdUsage prints usage totals by project and model (and day), or with
// --rows the requests themselves.
func (a *app) cmdUsage(ctx context.Context, args []string) int {
	fs, conn := a.newAPIFlagSet("usage", usageSynopsis)
	f := &managev1.UsageFilter{}
	fs.StringVar(&f.Project, "project", "", "only this project")
	fs.StringVar(&f.Model, "model", "", "only this model (its canonical name)")
	since := fs.String("since", "", "from this date or time (inclusive), or this long ago (24h, 7d)")
	until := fs.String("until", "", "up to this date or time (exclusive), or this long ago")
	byDay := fs.Bool("by-day", false, "one total per UTC day")
	rows := fs.Bool("rows", false, "list the requests themselves (newest last), not totals")
	limit := fs.Int("limit", 1000, "with --rows: at most this many rows")
	asJSON := fs.Bool("json", false, "print JSON (snake_case keys)")
	if _, code, ok := a.parse(fs, args, 0, ""); !ok {
		return code
	}
	for _, w := range []struct {
		flag string
		val  string
		dst  *int64
	}{{"since", *since, &f.SinceUnixMs}, {"until", *until, &f.UntilUnixMs}} {
		if w.val == "" {
			continue
		}
		t, err := parseWhen(w.val, a.now())
		if err != nil {
			return a.usageErrorf(fs, "--%s %q: %v", w.flag, w.val, err)
		}
		*w.dst = t.UnixMilli()
	}
	if *rows && *byDay {
		return a.usageErrorf(fs, "--rows lists requests; --by-day groups totals: give one")
	}
	return a.withClient(ctx, conn, func(ctx context.Context, c *client) int {
		if *rows {
			return a.usageRows(ctx, c, f, *limit, *asJSON)
		}
		resp, err := c.SummarizeUsage(ctx, &managev1.SummarizeUsageRequest{Filter: f, ByDay: *byDay})
		if err != nil {
			return a.rpcError(c, "summarizing usage", err)
		}
		if *asJSON {
			if err := writeJSON(a.stdout, resp.GetTotals()); err != nil {
				return a.errorf("%v", err)
			}
			return exitOK
		}
		if err := writeUsageTotals(a.stdout, resp.GetTotals(), *byDay); err != nil {
			return a.errorf("writing output: %v", err)
		}
		if len(resp.GetTotals()) == 0 {
			// Issue 18: a newcomer reading usage right after a request
			// thinks it was lost.
			fmt.Fprintln(a.stderr, "llmgw ctl usage: no usage in this window; a request's row is written about half a second after it ends")
		}
		return exitOK
	})
}

func (a *app) usageRows(ctx context.Context, c *client, f *managev1.UsageFilter, limit int, asJSON bool) int {
	var all []*managev1.UsageRow
	token := ""
	for len(all) < limit {
		size := min(limit-len(all), 1000)
		resp, err := c.ListUsage(ctx, &managev1.ListUsageRequest{Filter: f, PageSize: int32(size), PageToken: token})
		if err != nil {
			return a.rpcError(c, "listing usage", err)
		}
		all = append(all, resp.GetRows()...)
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if asJSON {
		if err := writeJSON(a.stdout, all); err != nil {
			return a.errorf("%v", err)
		}
		return exitOK
	}
	tw := newTable(a.stdout)
	row(tw, "TIME", "PROJECT", "KEY", "MODEL", "STATUS", "PROMPT", "COMPLETION", "COST", "LATENCY", "TTFT")
	for _, r := range all {
		row(tw, timeText(r.GetAtUnixMs()), r.GetProject(), orDash(r.GetKeyId()), r.GetModel(), strconv.Itoa(int(r.GetStatus())),
			strconv.FormatInt(r.GetPromptTokens(), 10), strconv.FormatInt(r.GetCompletionTokens(), 10), costText(r.GetCost()),
			fmt.Sprintf("%dms", r.GetLatencyMs()), fmt.Sprintf("%dms", r.GetTtftMs()))
	}
	if err := tw.Flush(); err != nil {
		return a.errorf("writing output: %v", err)
	}
	if len(all) == limit && token != "" {
		fmt.Fprintf(a.stderr, "llmgw ctl usage: stopped at --limit %d rows; narrow --since/--until or raise --limit\n", limit)
	}
	return exitOK
}

func writeUsageTotals(w io.Writer, totals []*managev1.UsageTotal, byDay bool) error {
	tw := newTable(w)
	head := []string{"PROJECT", "MODEL", "REQUESTS", "PROMPT", "COMPLETION", "COST"}
	if byDay {
		head = append([]string{"DAY"}, head...)
	}
	row(tw, head...)
	for _, t := range totals {
		cols := []string{t.GetProject(), t.GetModel(), strconv.FormatInt(t.GetRequests(), 10),
			strconv.FormatInt(t.GetPromptTokens(), 10), strconv.FormatInt(t.GetCompletionTokens(), 10), costText(t.GetCost())}
		if byDay {
			cols = append([]string{t.GetDay()}, cols...)
		}
		row(tw, cols...)
	}
	return tw.Flush()
}
