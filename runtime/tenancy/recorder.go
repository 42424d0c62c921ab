package tenancy

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmgw/llmgw/runtime/request"
	"github.com/llmgw/llmgw/runtime/store"
)

// Recorder defaults.
const (
	// DefaultFlushInterval bounds what a crash can lose: rows wait at most
	// this long before they are written.
	DefaultFlushInterval = 500 * time.Millisecond
	// DefaultMaxPending bounds memory while the store cannot be written:
	// beyond it the oldest rows are dropped (and counted).
	DefaultMaxPending = 1_000_000
	// flushBatch starts a write early when this many rows are waiting.
	flushBatch = 5000
	// writePause parks the writer between two transactions of a flush
	// when the process has one processor (flush).
	writePause = 100 * time.Microsecond
)

// UsageWriter is where usage rows go; store.Store implements it.
type UsageWriter interface {
	InsertUsage(ctx context.Context, rows []store.UsageRow) error
}

// txBoundedWriter is a UsageWriter whose transactions, written in the
// background on one processor, should hold at most UsageTxRows rows
// (store.Store on SQLite; 0 for no bound).
type txBoundedWriter interface {
	UsageTxRows() int
}

// RecorderOptions configure a Recorder.
type RecorderOptions struct {
	Store UsageWriter
	// Price computes a request's cost; nil records no cost.
	Price         func(model string, promptTokens, completionTokens int64) float64
	FlushInterval time.Duration
	MaxPending    int
	Logger        *slog.Logger
	// Registerer receives the recorder's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Holder, with shared limits, is this control plane's slice holder
	// (Shared.Holder): each row's cost moves from its budget slices to the
	// recorded spend as the row is written.
	Holder string
}

// Recorder is a gateway.Observer that writes a usage row per request in
// batches. Observe never blocks on the store. Close writes what is left.
type Recorder struct {
	opts RecorderOptions
	log  *slog.Logger

	mu      sync.Mutex
	pending []store.UsageRow
	// writing is the batch being written now: out of pending, maybe not
	// yet in the store.
	writing []store.UsageRow
	closed  bool

	kick chan struct{}
	stop chan struct{}
	done chan struct{}

	written, dropped, failures prometheus.Counter
	flushSeconds               prometheus.Histogram
}

// NewRecorder starts a recorder; call Close to stop it.
func NewRecorder(opts RecorderOptions) *Recorder {
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = DefaultMaxPending
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Recorder{
		opts: opts,
		log:  opts.Logger.With("component", "usage"),
		kick: make(chan struct{}, 1),
		stop: make(chan struct{}),
		done: make(chan struct{}),
		written: prometheus.NewCounter(prometheus.CounterOpts{Name: "llmgw_usage_rows_written_total",
			Help: "Usage rows written to the store."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "llmgw_usage_rows_dropped_total",
			Help: "Usage rows dropped because the store could not be written for too long."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "llmgw_usage_write_failures_total",
			Help: "Failed writes of usage rows (retried)."}),
		flushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "llmgw_usage_flush_seconds",
			Help: "Time to write one transaction of usage rows.", Buckets: prometheus.ExponentialBuckets(0.00005, 4, 10)}),
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(r.written, r.dropped, r.failures, r.flushSeconds)
	}
	go r.run()
	return r
}

// Observe implements gateway.Observer: requests nobody authenticated are
// no one's usage and are not recorded, nor are requests that named no model
// of the catalog (an unknown model's 404, a body with no model): they used
// no model, and a row with an empty model only puzzles (issue 18).
func (r *Recorder) Observe(rec request.Record) {
	if rec.Principal.Project == "" || rec.Model == "" {
		return
	}
	at := time.Now()
	if !rec.Admitted.IsZero() {
		// Dated when admitted: the row counts in the budget period whose
		// ledger and slice reserved it.
		at = rec.Admitted
	}
	row := store.UsageRow{
		At:               at,
		RequestID:        rec.RequestID,
		Project:          rec.Principal.Project,
		KeyID:            rec.Principal.KeyID,
		Model:            rec.Model,
		Replica:          rec.ReplicaID,
		Endpoint:         rec.Endpoint,
		Status:           rec.Status,
		PromptTokens:     int64(rec.PromptTokens),
		CompletionTokens: int64(rec.CompletionTokens),
		Latency:          rec.Latency,
		TTFT:             rec.TTFT,
		Stream:           rec.Stream,
		Holder:           r.opts.Holder,
	}
	switch {
	case rec.Priced:
		// What admission charged: the slices and ledgers hold that, and a
		// price changed since must not make the row differ.
		row.Cost = rec.Cost
	case r.opts.Price != nil && row.PromptTokens+row.CompletionTokens > 0:
		// A request admission never charged (refused, or no admission):
		// priced here. One that used nothing costs nothing, without
		// asking the catalog.
		row.Cost = r.opts.Price(rec.Model, row.PromptTokens, row.CompletionTokens)
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		// Late requests after Close are written on their own, so a clean
		// stop loses nothing that finished.
		r.write([]store.UsageRow{row})
		return
	}
	r.pending = append(r.pending, row)
	if over := len(r.pending) - r.opts.MaxPending; over > 0 {
		r.pending = r.pending[over:]
		r.dropped.Add(float64(over))
	}
	n := len(r.pending)
	r.mu.Unlock()
	if n >= flushBatch {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

// PendingCost implements Pending: the cost of rows not yet written. A batch
// being written counts too, so a reader of the store in the meantime may
// count it twice, never miss it.
func (r *Recorder) PendingCost(project string, since time.Time) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var cost float64
	for _, rows := range [][]store.UsageRow{r.pending, r.writing} {
		for _, row := range rows {
			if row.Project == project && !row.At.Before(since) {
				cost += row.Cost
			}
		}
	}
	return cost
}

func (r *Recorder) run() {
	defer close(r.done)
	t := time.NewTicker(r.opts.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		case <-r.kick:
		}
		r.flush(runtime.GOMAXPROCS(0) == 1)
	}
}

// flush writes the pending rows; on failure the rows not yet written are
// put back in front to be tried again. With short set (the background
// writer on one processor) and fewer than flushBatch rows waiting, it
// writes as many to a transaction as the store takes (txBoundedWriter)
// and parks writePause between two; otherwise the whole batch goes in one
// transaction.
//
// SQLite's writes are CPU work the Go scheduler does not interrupt for
// milliseconds (it is Go code here): a batch of a few hundred rows in one
// transaction held a processor for 2–3 ms, and with one processor
// (GOMAXPROCS 1: a control plane on one CPU) every request arriving
// meanwhile waited for it, the network being looked at only when the
// processor is idle. So there the store bounds a transaction at a few
// rows and the writer parks between two, which lets the processor run the
// requests that came in (the gateway overhead bench, proxies on one CPU,
// p99 added at 1,000 requests/s: 0.95–1.8 ms with whole batches,
// 0.86–0.93 ms in chunks of 8, 0.45–0.6 ms with no flush at all). A
// pause costs the writer about a millisecond when nothing else runs (the
// poller's resolution), which holds it to some 6,000 rows a second: a
// backlog of flushBatch rows or more (the writer falling behind) is
// written whole, as are the batches of a writer with more processors
// (the others serve requests meanwhile) and what Close writes.
func (r *Recorder) flush(short bool) bool {
	r.mu.Lock()
	rows := r.pending
	r.pending, r.writing = nil, rows
	r.mu.Unlock()
	chunk := len(rows)
	short = short && len(rows) < flushBatch
	if bw, ok := r.opts.Store.(txBoundedWriter); ok && short && bw.UsageTxRows() > 0 {
		chunk = bw.UsageTxRows()
	}
	for len(rows) > 0 {
		n := min(len(rows), chunk)
		if !r.write(rows[:n]) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.writing = nil
			r.pending = append(rows, r.pending...)
			if over := len(r.pending) - r.opts.MaxPending; over > 0 {
				r.pending = r.pending[over:]
				r.dropped.Add(float64(over))
			}
			return false
		}
		rows = rows[n:]
		r.mu.Lock()
		r.writing = rows
		r.mu.Unlock()
		if len(rows) > 0 {
			time.Sleep(writePause) // yielding the CPU, not waiting for an outcome
		}
	}
	return true
}

func (r *Recorder) write(rows []store.UsageRow) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := r.opts.Store.InsertUsage(ctx, rows); err != nil {
		r.failures.Inc()
		r.log.Error("writing usage", "rows", len(rows), "err", err)
		return false
	}
	r.flushSeconds.Observe(time.Since(start).Seconds())
	r.written.Add(float64(len(rows)))
	return true
}

// Close stops the background writer and writes every pending row,
// retrying until ctx ends. Rows observed after Close are written one by
// one as they come.
func (r *Recorder) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	close(r.stop)
	<-r.done
	for !r.flush(false) {
		select {
		case <-ctx.Done():
			r.mu.Lock()
			lost := len(r.pending)
			r.mu.Unlock()
			return fmt.Errorf("%d usage rows could not be written before shutdown: %w", lost, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}
