package manage

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sort"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	managev1 "github.com/llmgw/llmgw/api/managev1"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/spec"
)

// weightsWanted is what the catalog and the live shards need from the
// nodes' caches: the catalog models by source key (the same key the agents
// name their entries by, computed from the catalog exactly), and per node
// the shards using each key.
type weightsWanted struct {
	models map[string][]string            // key -> models
	shards map[string]map[string][]string // node -> key -> shards
}

func (s *Service) weightsWanted() weightsWanted {
	w := weightsWanted{models: map[string][]string{}, shards: map[string]map[string][]string{}}
	sources := map[string]string{}
	for _, e := range s.opts.Catalog.List() {
		if src, err := spec.ParseSource(e.Model.Source); err == nil && src.Fetched() {
			k := spec.WeightsKey(e.Model.Source)
			w.models[k] = append(w.models[k], e.Model.Name)
			sources[e.Model.Name] = e.Model.Source
		}
	}
	for _, r := range s.opts.Fleet.Replicas() {
		if r.State == fleet.ReplicaFailed {
			continue
		}
		for _, sh := range r.Shards {
			if sh.State == agentv1.ShardState_SHARD_STATE_STOPPED || sh.State == agentv1.ShardState_SHARD_STATE_FAILED {
				continue
			}
			src := sources[r.Model]
			if sh.Source != "" {
				src = sh.Source
			}
			if src == "" {
				continue
			}
			k := spec.WeightsKey(src)
			if w.shards[sh.Node] == nil {
				w.shards[sh.Node] = map[string][]string{}
			}
			w.shards[sh.Node][k] = append(w.shards[sh.Node][k], sh.ID)
		}
	}
	return w
}

// keep is the keys node must keep: every catalog model's and those of its
// live shards.
func (w weightsWanted) keep(node string) []string {
	out := make([]string, 0, len(w.models)+len(w.shards[node]))
	for k := range w.models {
		out = append(out, k)
	}
	for k := range w.shards[node] {
		if _, dup := w.models[k]; !dup {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func (w weightsWanted) entry(node string, e *agentv1.CacheEntry) *managev1.WeightsEntry {
	we := &managev1.WeightsEntry{
		Key: e.GetKey(), Source: e.GetSource(), SizeBytes: e.GetSizeBytes(), FetchedUnixMs: e.GetFetchedUnixMs(),
		Models: w.models[e.GetKey()], Shards: w.shards[node][e.GetKey()], Partial: e.GetPartial(),
	}
	we.Collectable = len(we.Models) == 0 && len(we.Shards) == 0
	return we
}

func nodeWeights(n fleet.Node) *managev1.NodeWeights {
	nw := &managev1.NodeWeights{Node: n.ID, Connected: n.Connected}
	for _, fv := range n.Inventory.GetFabrics() {
		if fv.GetInService() {
			nw.Fabric = fv.GetName()
			break
		}
	}
	if wc := n.WeightsCache(); wc != nil {
		nw.Reported = true
		nw.DiskFreeBytes, nw.DiskTotalBytes = wc.GetDiskFreeBytes(), wc.GetDiskTotalBytes()
	}
	return nw
}

// ListWeights lists every node's weights cache as its agent last reported it.
func (s *Service) ListWeights(_ context.Context, req *managev1.ListWeightsRequest) (*managev1.ListWeightsResponse, error) {
	w := s.weightsWanted()
	out := &managev1.ListWeightsResponse{}
	for _, n := range s.opts.Fleet.Nodes() {
		if req.GetNode() != "" && n.ID != req.GetNode() {
			continue
		}
		nw := nodeWeights(n)
		for _, e := range n.WeightsCache().GetEntries() {
			nw.Entries = append(nw.Entries, w.entry(n.ID, e))
		}
		out.Nodes = append(out.Nodes, nw)
	}
	if req.GetNode() != "" && len(out.Nodes) == 0 {
		return nil, status.Errorf(codes.NotFound, "node %q is not known", req.GetNode())
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].Node < out.Nodes[j].Node })
	return out, nil
}

// CollectWeights asks the connected nodes to delete the cache entries no
// catalog model and none of their live shards use, and returns what each
// deleted (or would, for a dry run). A node that does not answer in time
// is listed with the error.
func (s *Service) CollectWeights(ctx context.Context, req *managev1.CollectWeightsRequest) (*managev1.CollectWeightsResponse, error) {
	wait := time.Duration(req.GetTimeoutMs()) * time.Millisecond
	if wait <= 0 {
		wait = defaultCheckWait
	}
	w := s.weightsWanted()
	type pending struct {
		nw  *managev1.NodeWeights
		id  string
		ans <-chan *agentv1.WeightsCollected
	}
	var asked []pending
	out := &managev1.CollectWeightsResponse{}
	for _, n := range s.opts.Fleet.Nodes() {
		if req.GetNode() != "" && n.ID != req.GetNode() {
			continue
		}
		nw := nodeWeights(n)
		out.Nodes = append(out.Nodes, nw)
		if !n.Connected {
			nw.Errors = append(nw.Errors, "not connected: nothing collected")
			continue
		}
		id := "c-" + rand.Text()[:12]
		ch, err := s.opts.Fleet.RequestCollect(n.ID, &agentv1.CollectWeights{RequestId: id, KeepKeys: w.keep(n.ID), DryRun: req.GetDryRun()})
		if err != nil {
			if errors.Is(err, fleet.ErrNotConnected) {
				err = errors.New("not connected: nothing collected")
			}
			nw.Errors = append(nw.Errors, err.Error())
			continue
		}
		asked = append(asked, pending{nw: nw, id: id, ans: ch})
	}
	if req.GetNode() != "" && len(out.Nodes) == 0 {
		return nil, status.Errorf(codes.NotFound, "node %q is not known", req.GetNode())
	}
	record := func(nw *managev1.NodeWeights, ans *agentv1.WeightsCollected) {
		var freed uint64
		for _, e := range ans.GetRemoved() {
			nw.Entries = append(nw.Entries, w.entry(nw.Node, e))
			freed += e.GetSizeBytes()
		}
		nw.Errors = append(nw.Errors, ans.GetErrors()...)
		if wc := ans.GetCache(); wc != nil {
			nw.Reported = true
			nw.DiskFreeBytes, nw.DiskTotalBytes = wc.GetDiskFreeBytes(), wc.GetDiskTotalBytes()
		}
		if !req.GetDryRun() {
			s.log.Info("weights collected", "node", nw.Node, "entries", len(ans.GetRemoved()), "bytes", freed, "kept_by_problems", len(ans.GetErrors()))
		}
	}
	deadline := time.After(wait) // one deadline for every node's answer
	expired := false
	for _, p := range asked {
		if !expired {
			select {
			case ans := <-p.ans:
				record(p.nw, ans)
				continue
			case <-deadline:
				expired = true
			case <-ctx.Done():
				for _, q := range asked {
					s.opts.Fleet.CancelCollect(q.id)
				}
				return nil, status.FromContextError(ctx.Err()).Err()
			}
		}
		select {
		case ans := <-p.ans: // it came just in time
			record(p.nw, ans)
		default:
			s.opts.Fleet.CancelCollect(p.id)
			p.nw.Errors = append(p.nw.Errors, fmt.Sprintf("no answer within %s", wait))
		}
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].Node < out.Nodes[j].Node })
	return out, nil
}

// holdings says, for each catalog model whose weights nodes fetch (or find
// at a local path), how many nodes of each fabric hold them: a model seeded
// into one fabric shows the others holding none.
func (s *Service) holdings() []*managev1.ModelHoldings {
	nodes := s.opts.Fleet.Nodes()
	perFabric := map[string]int32{}
	for _, n := range nodes {
		perFabric[n.Fabric()]++
	}
	fabrics := make([]string, 0, len(perFabric))
	for f := range perFabric {
		fabrics = append(fabrics, f)
	}
	sort.Strings(fabrics)
	var out []*managev1.ModelHoldings
	entries := s.opts.Catalog.List()
	sort.Slice(entries, func(i, j int) bool { return entries[i].Model.Name < entries[j].Model.Name })
	for _, e := range entries {
		src, err := spec.ParseSource(e.Model.Source)
		if err != nil || (!src.Fetched() && src.Kind != spec.SourceLocal) {
			continue
		}
		holding := map[string]int32{}
		for _, n := range nodes {
			if n.Holds(e.Model.Source) || holdsLocal(n, src) {
				holding[n.Fabric()]++
			}
		}
		mh := &managev1.ModelHoldings{Model: e.Model.Name, Source: e.Model.Source}
		for _, f := range fabrics {
			mh.Fabrics = append(mh.Fabrics, &managev1.FabricHolding{Fabric: f, Nodes: perFabric[f], Holding: holding[f]})
		}
		out = append(out, mh)
	}
	return out
}

// holdsLocal reports whether a node's model_dirs hold a local source.
func holdsLocal(n fleet.Node, src spec.Source) bool {
	if src.Kind != spec.SourceLocal {
		return false
	}
	for _, mf := range n.Inventory.GetModels() {
		if mf.GetPath() == src.Path {
			return true
		}
	}
	return false
}
