package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/llmgw/llmgw/agent/discovery"
	"github.com/llmgw/llmgw/agent/fetch"
	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/spec"
)

// cacheReport is what the weights cache holds, for the control plane, and
// the cache generation it describes.
func (a *Agent) cacheReport() (*agentv1.WeightsCache, uint64) {
	if a.weights == nil {
		return nil, 0
	}
	gen := a.weights.Generation()
	out := &agentv1.WeightsCache{}
	entries, err := a.weights.Entries()
	if err != nil {
		a.log.Warn("weights cache not listed", "err", err)
	}
	for _, e := range entries {
		out.Entries = append(out.Entries, cacheEntryToProto(e))
	}
	if d, err := discovery.ProbeDisk(a.cfg.WeightsPath()); err == nil {
		out.DiskFreeBytes, out.DiskTotalBytes = d.FreeBytes, d.TotalBytes
	}
	return out, gen
}

func cacheEntryToProto(e fetch.Entry) *agentv1.CacheEntry {
	return &agentv1.CacheEntry{Key: e.Key, Source: e.Source, SizeBytes: e.Bytes, FetchedUnixMs: e.Fetched.UnixMilli(), Partial: e.Partial}
}

// cacheChanged returns the cache report when the cache changed since the
// last one sent, nil otherwise.
func (a *Agent) cacheChanged() *agentv1.WeightsCache {
	if a.weights == nil {
		return nil
	}
	gen := a.weights.Generation()
	a.mu.Lock()
	sent := a.cacheSent
	a.mu.Unlock()
	if gen == sent {
		return nil
	}
	report, gen := a.cacheReport()
	a.mu.Lock()
	a.cacheSent = gen
	a.mu.Unlock()
	return report
}

// prefetch fetches a source into the cache ahead of the shard that will
// need it; that shard's own fetch joins this download or finds it done.
func (a *Agent) prefetch(ctx context.Context, m *agentv1.FetchWeights) {
	src, err := spec.ParseSource(m.GetSource())
	if err != nil || !src.Fetched() {
		a.log.Warn("fetch asked for a source that is not fetched", "source", m.GetSource(), "err", err)
		return
	}
	a.log.Info("fetching weights ahead of a shard", "source", m.GetSource(), "reason", m.GetReason())
	go func() {
		start := time.Now()
		path, err := a.weights.ResolveFrom(ctx, m.GetSource(), peersFromProto(m.GetPeers()), nil)
		if err != nil {
			a.log.Warn("fetch ahead of a shard failed", "source", m.GetSource(), "err", err)
			return
		}
		a.log.Info("weights fetched ahead of a shard", "source", m.GetSource(), "path", path, "took", time.Since(start).Round(time.Millisecond).String())
		a.sendCacheIfChanged()
	}()
}

// sendCacheIfChanged reports the cache at once (rather than with the next
// heartbeat) when it changed.
func (a *Agent) sendCacheIfChanged() {
	a.mu.Lock()
	send := a.send
	a.mu.Unlock()
	if send == nil {
		return
	}
	if wc := a.cacheChanged(); wc != nil {
		_ = send(&agentv1.AgentMessage{Msg: &agentv1.AgentMessage_Heartbeat{Heartbeat: &agentv1.Heartbeat{UnixMs: time.Now().UnixMilli(), WeightsCache: wc}}})
	}
}

// inUse is what the node's live shards use from the cache: their sources
// as written and, for shards adopted after a restart (whose record holds
// the local path), the key of the entry their path lies in.
func (a *Agent) inUse() map[string]bool {
	dir := a.cfg.WeightsPath()
	out := map[string]bool{}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range a.shards {
		if s.stopped {
			continue
		}
		switch s.status.GetState() {
		case agentv1.ShardState_SHARD_STATE_FAILED, agentv1.ShardState_SHARD_STATE_STOPPED:
			continue
		}
		if s.source != "" {
			out[s.source] = true
			out[fetch.Key(s.source)] = true
		}
		if s.shard != nil {
			if rel, err := filepath.Rel(dir, s.shard.Spec().Source); err == nil && !strings.HasPrefix(rel, "..") {
				key, _, _ := strings.Cut(filepath.ToSlash(rel), "/")
				out[key] = true
			}
		}
	}
	return out
}

// collect answers a CollectWeights: the entries neither the catalog keeps
// nor a live shard of this node uses are deleted (listed, for a dry run).
func (a *Agent) collect(m *agentv1.CollectWeights) *agentv1.WeightsCollected {
	keep := map[string]bool{}
	for _, k := range m.GetKeepKeys() {
		keep[k] = true
	}
	removed, errs := a.weights.Collect(keep, a.inUse(), m.GetDryRun())
	out := &agentv1.WeightsCollected{RequestId: m.GetRequestId(), Errors: errs}
	for _, e := range removed {
		out.Removed = append(out.Removed, cacheEntryToProto(e))
	}
	out.Cache, _ = a.cacheReport()
	if !m.GetDryRun() {
		a.log.Info("weights collected", "removed", len(removed), "kept_by_problems", len(errs))
	}
	return out
}

func peersFromProto(ps []*agentv1.WeightsPeer) []fetch.Peer {
	out := make([]fetch.Peer, 0, len(ps))
	for _, p := range ps {
		out = append(out, fetch.Peer{Node: p.GetNode(), Address: p.GetAddress()})
	}
	return out
}

// servePeers starts the peer listener when peer_listen is set: the
// cache's complete entries, to nodes presenting a certificate of the
// cluster CA, until ctx ends.
func (a *Agent) servePeers(ctx context.Context) error {
	if a.cfg.PeerListen == "" {
		return nil
	}
	if a.peerTLS == nil {
		return fmt.Errorf("peer_listen %s: the node identity (tls.cert, tls.key, tls.ca) does not load", a.cfg.PeerListen)
	}
	ln, err := net.Listen("tcp", a.cfg.PeerListen)
	if err != nil {
		return fmt.Errorf("peer_listen: %w", err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	a.peerAddr = net.JoinHostPort(a.cfg.Address, port)
	srv := &http.Server{Handler: a.weights.PeerHandler(), TLSConfig: a.peerTLS, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("peer listener stopped", "err", err)
		}
	}()
	a.log.Info("serving weights to peers", "listen", ln.Addr().String(), "address", a.peerAddr)
	return nil
}
