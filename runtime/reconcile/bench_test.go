package reconcile

import (
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	agentv1 "github.com/llmgw/llmgw/api/agentv1"
	"github.com/llmgw/llmgw/runtime/fleet"
	"github.com/llmgw/llmgw/runtime/models"
	"github.com/llmgw/llmgw/spec"
)

// BenchmarkPass1000 is one reconcile pass placing a whole catalog from
// scratch (500 models, about 1,000 replicas, tp 1/2/4/8 and 2-node tp 8) on
// 1,000 connected nodes of 8 H100s in fabrics of 100: snapshot included.
func BenchmarkPass1000(b *testing.B) {
	const nodes = 1000
	var ms []spec.Model
	for i := range nodes / 2 {
		p := spec.Profile{Name: "p", Engine: "sim", GPUClass: "h100-80g", TP: []int{1, 2, 4, 8, 8}[i%5]}
		if i%5 == 4 {
			p.Nodes = 2
		}
		ms = append(ms, spec.Model{Name: fmt.Sprintf("model%04d", i), Source: fmt.Sprintf("sim://m%04d", i),
			Scaling: spec.Scaling{Min: 1 + i%3, Max: 3}, Profiles: []spec.Profile{p}})
	}
	reg, err := models.New(ms, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		fl := fleet.New()
		for i := range nodes {
			id := fmt.Sprintf("node%04d", i)
			fl.Connect(&agentv1.Hello{NodeId: id, Address: "127.0.0.1", Inventory: inventory(fmt.Sprintf("ib-%02d", i/100))}, id, nil, false, &recordingConn{})
		}
		rec := New(Options{Fleet: fl, Catalog: reg, Grace: time.Hour, Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return time.Unix(1_700_000_000, 0) }})
		b.StartTimer()
		rec.Pass()
		b.StopTimer()
		if n := len(fl.Replicas()); n < nodes*9/10 {
			b.Fatalf("placed %d replicas", n)
		}
		b.StartTimer()
	}
}

// TestPassViewMatchesFreshSnapshots places a mixed catalog on 24 nodes in one
// pass twice: with the pass's one scheduler view, and with a snapshot built
// from the fleet for every replica. Every replica must land on the same
// nodes and GPUs.
func TestPassViewMatchesFreshSnapshots(t *testing.T) {
	var ms []spec.Model
	for i := range 14 {
		p := spec.Profile{Name: "p", Engine: "sim", GPUClass: "h100-80g", TP: []int{1, 2, 4, 8, 4, 3, 1}[i%7]}
		if i%7 == 4 {
			p.Nodes = 2
		}
		ms = append(ms, spec.Model{Name: fmt.Sprintf("model%02d", i), Source: fmt.Sprintf("sim://m%02d", i),
			Scaling: spec.Scaling{Min: 1 + i%3, Max: 3}, Profiles: []spec.Profile{p}})
	}
	reg, err := models.New(ms, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	pass := func(fresh bool) []string {
		rebuildEachPlacement = fresh
		defer func() { rebuildEachPlacement = false }()
		fl := fleet.New()
		for i := range 24 {
			id := fmt.Sprintf("node%02d", i)
			fl.Connect(&agentv1.Hello{NodeId: id, Address: "127.0.0.1", Inventory: inventory([]string{"ib-a", "ib-b", ""}[i%3])}, id, nil, false, &recordingConn{})
		}
		New(Options{Fleet: fl, Catalog: reg, Grace: time.Hour, Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return time.Unix(1_700_000_000, 0) }}).Pass()
		var out []string
		for _, rep := range fl.Replicas() {
			for _, s := range rep.Shards {
				out = append(out, fmt.Sprintf("%s/%d %s %v", rep.Model, s.Rank, s.Node, s.GPUs))
			}
		}
		slices.Sort(out)
		return out
	}
	got, want := pass(false), pass(true)
	if len(want) < 20 || !slices.Equal(got, want) {
		t.Fatalf("one view per pass placed\n%v\nfresh snapshots placed\n%v", got, want)
	}
}
