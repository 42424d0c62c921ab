package tenancy

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/store"
)

// flakyWriter fails while failing is set, else appends.
type flakyWriter struct {
	mu      sync.Mutex
	failing bool
	rows    []store.UsageRow
	writes  int
}

func (w *flakyWriter) InsertUsage(_ context.Context, rows []store.UsageRow) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failing {
		return errors.New("disk full")
	}
	w.writes++
	w.rows = append(w.rows, rows...)
	return nil
}

func (w *flakyWriter) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.rows)
}

// testChunk is the rows failNth takes to a transaction.
const testChunk = 8

// failNth fails its nth write (counting from 1) once, else appends; it
// takes testChunk rows to a transaction.
type failNth struct {
	n, calls int
	sizes    []int
	rows     []store.UsageRow
}

func (w *failNth) UsageTxRows() int { return testChunk }

func (w *failNth) InsertUsage(_ context.Context, rows []store.UsageRow) error {
	w.calls++
	if w.calls == w.n {
		return errors.New("disk full")
	}
	w.sizes = append(w.sizes, len(rows))
	w.rows = append(w.rows, rows...)
	return nil
}

// TestFlushWritesInChunks: a short flush (the background writer on one
// processor) writes at most the store's UsageTxRows rows to a
// transaction; when one fails, the rows already written stay written and
// only the rest are tried again, in order, so no row is lost or doubled.
func TestFlushWritesInChunks(t *testing.T) {
	w := &failNth{n: 3}
	r := NewRecorder(RecorderOptions{Store: w, FlushInterval: time.Hour})
	defer func() { _ = r.Close(t.Context()) }()
	for i := range 100 {
		r.Observe(record("p", i))
	}
	if r.flush(true) {
		t.Fatal("the flush whose third transaction failed reported success")
	}
	r.mu.Lock()
	left := len(r.pending)
	r.mu.Unlock()
	if left != 100-2*testChunk {
		t.Fatalf("after a failed third transaction %d rows wait, want %d", left, 100-2*testChunk)
	}
	if !r.flush(true) {
		t.Fatal("the second flush failed")
	}
	// Two transactions before the failure, then the rest, each at most
	// testChunk rows.
	want := []int{testChunk, testChunk}
	for left := 100 - 2*testChunk; left > 0; left -= testChunk {
		want = append(want, min(left, testChunk))
	}
	if !slices.Equal(w.sizes, want) {
		t.Errorf("transactions of %v rows, want %v", w.sizes, want)
	}
	if len(w.rows) != 100 {
		t.Fatalf("%d rows written, want 100", len(w.rows))
	}
	for i, row := range w.rows {
		if row.CompletionTokens != int64(i) {
			t.Fatalf("row %d has completion %d: rows lost, doubled or out of order", i, row.CompletionTokens)
		}
	}
}

// TestWholeBatchesUnlessShort: what Close writes, a writer with more
// than one processor (flush not short) and a backlog of flushBatch rows
// or more go in one transaction: chunks with pauses between hold a
// writer on one processor to some 6,000 rows a second, and a backlog
// would grow until rows were dropped.
func TestWholeBatchesUnlessShort(t *testing.T) {
	for _, tt := range []struct {
		name  string
		rows  int
		short bool
	}{{"close or more processors", 100, false}, {"backlog", flushBatch, true}} {
		t.Run(tt.name, func(t *testing.T) {
			w := &failNth{}
			r := NewRecorder(RecorderOptions{Store: w, FlushInterval: time.Hour})
			defer func() { _ = r.Close(t.Context()) }()
			for i := range tt.rows {
				r.Observe(record("p", i))
			}
			if !r.flush(tt.short) {
				t.Fatal("flush failed")
			}
			if !slices.Equal(w.sizes, []int{tt.rows}) {
				t.Errorf("transactions of %v rows, want one of %d", w.sizes, tt.rows)
			}
		})
	}
}

// TestSQLiteBoundsUsageTransactions: the SQLite store asks, through the
// interface the recorder looks for, for short transactions of usage rows
// (its writes hold a processor); without it the recorder would write
// whole batches there too.
func TestSQLiteBoundsUsageTransactions(t *testing.T) {
	st, err := store.Open(t.Context(), t.TempDir()+"/usage.db")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	bw, ok := st.(txBoundedWriter)
	if !ok || bw.UsageTxRows() <= 0 {
		t.Fatalf("the SQLite store does not bound a usage transaction (txBoundedWriter %v)", ok)
	}
}

func record(project string, completion int) request.Record {
	return request.Record{Principal: request.Principal{KeyID: "k", Project: project}, Model: "m", Status: 200,
		PromptTokens: 3, CompletionTokens: completion, Endpoint: "/v1/chat/completions", RequestID: "r"}
}

func TestRecorderBatchesAndFlushesOnClose(t *testing.T) {
	w := &flakyWriter{}
	// A long interval: only Close writes.
	r := NewRecorder(RecorderOptions{Store: w, FlushInterval: time.Hour,
		Price: func(_ string, p, c int64) float64 { return float64(p + c) }})
	for i := 0; i < 100; i++ {
		r.Observe(record("p", i))
	}
	r.Observe(request.Record{Status: 401}) // unauthenticated: no one's usage
	// An unknown model's 404: no model was used, no row (issue 18).
	r.Observe(request.Record{Principal: request.Principal{KeyID: "k", Project: "p"}, Status: 404, Endpoint: "/v1/chat/completions", RequestID: "r404"})
	if got := r.PendingCost("p", time.Time{}); got != 100*3+4950 {
		t.Errorf("PendingCost = %v", got)
	}
	if w.count() != 0 {
		t.Fatalf("rows written before a flush: %d", w.count())
	}
	if err := r.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	// A store with no bound on a transaction takes the batch whole.
	if w.count() != 100 || w.writes != 1 {
		t.Fatalf("after Close: %d rows in %d writes, want 100 in 1", w.count(), w.writes)
	}
	if w.rows[5].Cost != 8 || w.rows[5].Project != "p" || w.rows[5].KeyID != "k" || w.rows[5].CompletionTokens != 5 {
		t.Errorf("row = %+v", w.rows[5])
	}
	// After Close a late request is still written.
	r.Observe(record("p", 1))
	if w.count() != 101 {
		t.Errorf("a row observed after Close was lost")
	}
}

func TestRecorderFlushesByItself(t *testing.T) {
	w := &flakyWriter{}
	r := NewRecorder(RecorderOptions{Store: w, FlushInterval: 10 * time.Millisecond})
	defer r.Close(t.Context())
	r.Observe(record("p", 1))
	deadline := time.Now().Add(5 * time.Second)
	for w.count() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the row was not written within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRecorderRetriesAndBoundsMemory(t *testing.T) {
	w := &flakyWriter{failing: true}
	reg := prometheus.NewRegistry()
	r := NewRecorder(RecorderOptions{Store: w, FlushInterval: time.Hour, MaxPending: 10, Registerer: reg})
	for i := 0; i < 15; i++ {
		r.Observe(record("p", i))
	}
	if r.flush(false) {
		t.Fatal("flush reported success while the store fails")
	}
	if got := testutil.ToFloat64(r.dropped); got != 5 {
		t.Errorf("dropped = %v, want 5", got)
	}
	w.mu.Lock()
	w.failing = false
	w.mu.Unlock()
	if err := r.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The newest ten survive, in order.
	if w.count() != 10 || w.rows[0].CompletionTokens != 5 || w.rows[9].CompletionTokens != 14 {
		t.Errorf("rows after retry: %d, first %+v", w.count(), w.rows)
	}
	if got := testutil.ToFloat64(r.written); got != 10 {
		t.Errorf("written = %v", got)
	}
}

func TestRecorderCloseGivesUp(t *testing.T) {
	w := &flakyWriter{failing: true}
	r := NewRecorder(RecorderOptions{Store: w, FlushInterval: time.Hour})
	r.Observe(record("p", 1))
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if err := r.Close(ctx); err == nil {
		t.Fatal("Close succeeded though nothing could be written")
	}
}

// BenchmarkUsageWrites measures rows per second into a real SQLite store
// through the recorder's flush as its background writer calls it: 1,000
// rows pending at a time, written a few to a transaction (SQLite's
// UsageTxRows) with writePause between two when the process has one
// processor, whole otherwise.
func BenchmarkUsageWrites(b *testing.B) {
	st, err := store.Open(b.Context(), b.TempDir()+"/usage.db")
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	r := NewRecorder(RecorderOptions{Store: st, FlushInterval: time.Hour})
	defer func() { _ = r.Close(b.Context()) }()
	batch := make([]store.UsageRow, 1000)
	for i := range batch {
		batch[i] = store.UsageRow{At: time.Now(), RequestID: "0123456789abcdef0123456789abcdef", Project: "default",
			KeyID: "key-abc", Model: "qwen/coder-3b", Replica: "qwen-1", Endpoint: "/v1/chat/completions",
			Status: 200, PromptTokens: 120, CompletionTokens: 300, Cost: 0.0042, Latency: time.Second, TTFT: 50 * time.Millisecond}
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		r.mu.Lock()
		r.pending = append(r.pending, batch...)
		r.mu.Unlock()
		if !r.flush(runtime.GOMAXPROCS(0) == 1) {
			b.Fatal("flush failed")
		}
	}
	b.ReportMetric(float64(b.N*len(batch))/time.Since(start).Seconds(), "rows/s")
}
