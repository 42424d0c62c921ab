package server

import (
	"context"
	"log/slog"
	"time"
)

// PruneEvery is how often the control plane deletes message content past
// its project's retention, or of a project that turned keeping it off.
const PruneEvery = time.Hour

// contentPruner is the store's part that prunes.
type contentPruner interface {
	PruneContent(ctx context.Context, now time.Time) (int64, error)
}

// pruneContent prunes once at start and then every interval until ctx
// ends. Reads never return expired content, so between two prunes
// nothing past its retention is served; the prune is what removes it
// from disk.
func pruneContent(ctx context.Context, st contentPruner, every time.Duration, now func() time.Time, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		n, err := st.PruneContent(ctx, now())
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("pruning message content", "err", err)
		case n > 0:
			log.Info("pruned message content", "rows", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
