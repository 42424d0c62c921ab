package ctl

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/llmgw/llmgw/api/managev1"
)

func (a *app) cmdReplicas(ctx context.Context, args []string) int {
	var model string
	var generations map[string]string // model → its catalog generation
	return runQuery(ctx, a, args, query[[]*managev1.Replica]{
		name:     "replicas",
		synopsis: "replicas [--model M] [--json]",
		jsonHelp: "print the replicas as a JSON array (snake_case keys)",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&model, "model", "", "only the replicas of this model")
		},
		doing: "listing replicas",
		call: func(ctx context.Context, c *client, _ string) ([]*managev1.Replica, error) {
			resp, err := c.ListReplicas(ctx, &managev1.ListReplicasRequest{Model: model})
			if err != nil {
				return nil, err
			}
			// A control plane older than Replica.stale marks a stale
			// replica only by a model_generation other than its
			// model's generation.
			if ms, err := c.ListModels(ctx, &managev1.ListModelsRequest{}); err == nil {
				generations = map[string]string{}
				for _, m := range ms.GetModels() {
					generations[m.GetName()] = m.GetGeneration()
				}
			}
			return resp.GetReplicas(), nil
		},
		json: writeJSON[*managev1.Replica],
		table: func(w io.Writer, reps []*managev1.Replica) error {
			return writeReplicas(w, reps, generations)
		},
	})
}

// errorCellWidth bounds the ERROR column; the whole error follows the table.
const errorCellWidth = 40

// writeReplicas prints the replicas table and, for every failed replica, its
// error and each failed shard's error with the engine's last output lines:
// the operator's diagnosis. A live replica the control plane calls stale
// (its own profile was since edited in what its engine is built from)
// reads "ready (stale profile)" until the rollout replaces it; so does one
// whose model_generation is not its model's in generations (model →
// generation; nil marks nothing), which is how a control plane older than
// Replica.stale tells it.
func writeReplicas(w io.Writer, replicas []*managev1.Replica, generations map[string]string) error {
	tw := newTable(w)
	row(tw, "REPLICA", "MODEL", "PROFILE", "STATE", "SHARDS", "NODES", "RUN/WAIT/KV", "ERROR")
	for _, r := range replicas {
		state, errText := r.GetState(), r.GetError()
		if fs, fe := replicaFetch(r); fs != "" && r.GetState() == "starting" {
			state = fs
			if errText == "" {
				errText = fe
			}
		}
		g, known := generations[r.GetModel()]
		stale := r.GetStale() || (known && g != "" && r.GetModelGeneration() != "" && r.GetModelGeneration() != g)
		if stale && (state == "ready" || state == "starting") {
			state += " (stale profile)"
		}
		row(tw,
			r.GetId(),
			r.GetModel(),
			orDash(r.GetProfile()),
			orDash(state),
			replicaShards(r),
			orDash(strings.Join(replicaNodes(r), ",")),
			engineLoad(r.GetEngineLoad()),
			orDash(oneLine(errText, errorCellWidth)),
		)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range replicas {
		for _, s := range r.GetShards() {
			if f := s.GetFetch(); f.GetStalled() && s.GetState() == "starting" {
				at := fmt.Sprintf("%d of %d bytes", f.GetBytesDone(), f.GetBytesTotal())
				if f.GetBytesTotal() <= 0 {
					at = fmt.Sprintf("%d bytes (size not known yet)", f.GetBytesDone())
				}
				fmt.Fprintf(w, "\nreplica %s (%s): shard %d on %s: fetch of %s stalled at %s; last error: %s\n",
					r.GetId(), r.GetModel(), s.GetRank(), orDash(s.GetNode()), f.GetSource(), at, orDash(f.GetLastError()))
			}
		}
		if !replicaFailed(r) {
			continue
		}
		fmt.Fprintf(w, "\nreplica %s (%s) failed: %s\n", r.GetId(), r.GetModel(), orDash(r.GetError()))
		for _, s := range r.GetShards() {
			if s.GetState() != "failed" {
				continue
			}
			fmt.Fprintf(w, "  shard %d on %s: %s\n", s.GetRank(), orDash(s.GetNode()), orDash(s.GetError()))
			if len(s.GetLastOutput()) == 0 {
				fmt.Fprintln(w, "    (no engine output)")
				continue
			}
			fmt.Fprintln(w, "    engine output, last lines:")
			for _, line := range s.GetLastOutput() {
				fmt.Fprintf(w, "    | %s\n", line)
			}
		}
	}
	return nil
}

// replicaFailed reports whether a replica or any of its shards failed.
func replicaFailed(r *managev1.Replica) bool {
	if r.GetState() == "failed" {
		return true
	}
	return slices.ContainsFunc(r.GetShards(), func(s *managev1.Shard) bool { return s.GetState() == "failed" })
}

// replicaShards is "ready/expected".
func replicaShards(r *managev1.Replica) string {
	ready := 0
	for _, s := range r.GetShards() {
		if s.GetState() == "ready" {
			ready++
		}
	}
	expected := int(r.GetShardsExpected())
	if expected == 0 {
		expected = len(r.GetShards())
	}
	return fmt.Sprintf("%d/%d", ready, expected)
}

// replicaNodes are the nodes a replica's shards run on, in rank order.
func replicaNodes(r *managev1.Replica) []string {
	shards := slices.Clone(r.GetShards())
	slices.SortStableFunc(shards, func(x, y *managev1.Shard) int { return int(x.GetRank()) - int(y.GetRank()) })
	var nodes []string
	for _, s := range shards {
		if n := s.GetNode(); n != "" && !slices.Contains(nodes, n) {
			nodes = append(nodes, n)
		}
	}
	return nodes
}

// replicaFetch describes the weights fetch of a replica's shards, if one is
// under way: "fetching 41% 380 MB/s" for the least advanced shard, or
// "stalled" with the source and the last error when a shard's fetch moves
// no byte; both "" when no shard is fetching.
func replicaFetch(r *managev1.Replica) (state, errText string) {
	var slowest *managev1.ShardFetch
	for _, s := range r.GetShards() {
		f := s.GetFetch()
		if f == nil {
			continue
		}
		if f.GetStalled() {
			e := "stalled: " + f.GetSource()
			if f.GetLastError() != "" {
				e += ": " + f.GetLastError()
			} else {
				e += ": no byte moved"
			}
			return "stalled", e
		}
		if slowest == nil || fraction(f) < fraction(slowest) {
			slowest = f
		}
	}
	if slowest == nil {
		return "", ""
	}
	rate := fmt.Sprintf("%.0f MB/s", float64(slowest.GetBytesPerSecond())/1e6)
	if slowest.GetBytesTotal() <= 0 {
		return fmt.Sprintf("fetching %.0f MB %s", float64(slowest.GetBytesDone())/1e6, rate), ""
	}
	out := fmt.Sprintf("fetching %.0f%% %s", 100*fraction(slowest), rate)
	if bps := slowest.GetBytesPerSecond(); bps > 0 {
		left := time.Duration(float64(slowest.GetBytesTotal()-slowest.GetBytesDone()) / float64(bps) * float64(time.Second))
		out += ", " + left.Round(time.Second).String() + " left"
	}
	return out, ""
}

func fraction(f *managev1.ShardFetch) float64 {
	if f.GetBytesTotal() <= 0 {
		return 0
	}
	return float64(f.GetBytesDone()) / float64(f.GetBytesTotal())
}

// engineLoad is what a replica's engine last said of its load: requests
// running, requests waiting, and the share of its KV cache in use ("-"
// when it publishes no metrics, or not the KV share).
func engineLoad(l *managev1.EngineLoad) string {
	if l == nil {
		return "-"
	}
	kv := "-"
	if l.GetKvCacheUsage() >= 0 {
		kv = fmt.Sprintf("%.0f%%", l.GetKvCacheUsage()*100)
	}
	return fmt.Sprintf("%d/%d/%s", l.GetRunning(), l.GetWaiting(), kv)
}
