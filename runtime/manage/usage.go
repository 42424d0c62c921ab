package manage

import (
	"context"
	"strconv"
	"time"

	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/runtime/store"
)

// Page sizes of ListUsage.
const (
	defaultUsagePage = 100
	maxUsagePage     = 1000
)

func usageQuery(f *managev1.UsageFilter, byDay bool) (store.UsageQuery, error) {
	q := store.UsageQuery{Project: f.GetProject(), Model: f.GetModel(), ByDay: byDay}
	if ms := f.GetSinceUnixMs(); ms != 0 {
		q.Since = time.UnixMilli(ms).UTC()
	}
	if ms := f.GetUntilUnixMs(); ms != 0 {
		q.Until = time.UnixMilli(ms).UTC()
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Until.After(q.Since) {
		return q, invalid("usage until", "%s is not after since %s", q.Until.Format(time.RFC3339), q.Since.Format(time.RFC3339))
	}
	return q, nil
}

// SummarizeUsage returns usage totals by project and model (and day).
func (s *Service) SummarizeUsage(ctx context.Context, req *managev1.SummarizeUsageRequest) (*managev1.SummarizeUsageResponse, error) {
	q, err := usageQuery(req.GetFilter(), req.GetByDay())
	if err != nil {
		return nil, err
	}
	totals, err := s.opts.Store.SummarizeUsage(ctx, q)
	if err != nil {
		return nil, tenancyError("summarizing usage", err)
	}
	out := &managev1.SummarizeUsageResponse{}
	for _, t := range totals {
		pt := &managev1.UsageTotal{Project: t.Project, Model: t.Model, Requests: t.Requests,
			PromptTokens: t.PromptTokens, CompletionTokens: t.CompletionTokens, Cost: t.Cost}
		if !t.Day.IsZero() {
			pt.Day = t.Day.UTC().Format(time.DateOnly)
		}
		out.Totals = append(out.Totals, pt)
	}
	return out, nil
}

// ListUsage returns usage rows page by page; the page token is the last
// row's id.
func (s *Service) ListUsage(ctx context.Context, req *managev1.ListUsageRequest) (*managev1.ListUsageResponse, error) {
	q, err := usageQuery(req.GetFilter(), false)
	if err != nil {
		return nil, err
	}
	size := int(req.GetPageSize())
	switch {
	case size < 0:
		return nil, invalid("usage page_size", "must not be negative, got %d", size)
	case size == 0:
		size = defaultUsagePage
	case size > maxUsagePage:
		size = maxUsagePage
	}
	var after int64
	if tok := req.GetPageToken(); tok != "" {
		after, err = strconv.ParseInt(tok, 10, 64)
		if err != nil || after < 0 {
			return nil, invalid("usage page_token", "%q is not a token a previous page returned", tok)
		}
	}
	// One row more than the page tells whether another page follows.
	rows, err := s.opts.Store.ListUsage(ctx, q, after, size+1)
	if err != nil {
		return nil, tenancyError("listing usage", err)
	}
	out := &managev1.ListUsageResponse{}
	if len(rows) > size {
		rows = rows[:size]
		out.NextPageToken = strconv.FormatInt(rows[size-1].ID, 10)
	}
	for _, r := range rows {
		out.Rows = append(out.Rows, &managev1.UsageRow{
			Id: r.ID, AtUnixMs: unixMs(r.At), RequestId: r.RequestID, Project: r.Project, KeyId: r.KeyID,
			Model: r.Model, Replica: r.Replica, Status: int32(r.Status), PromptTokens: r.PromptTokens,
			CompletionTokens: r.CompletionTokens, Cost: r.Cost, LatencyMs: r.Latency.Milliseconds(),
			TtftMs: r.TTFT.Milliseconds(), Stream: r.Stream,
		})
	}
	return out, nil
}
