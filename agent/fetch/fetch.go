// Package fetch downloads a model's weights into the node's cache before an
// engine is launched, so an engine is only ever given a local path. The
// bytes are moved by internal/download, the mirror's downloader too.
//
// A fetched source (an http(s) file, a mirror's set ending in "/",
// hf:org/repo/file, hf:org/repo[@revision], s3://bucket/key or
// s3://bucket/prefix/) is kept under <dir>/<key>/, key being the first 16 hex
// digits of the sha256 of the source as written. While it downloads it
// lives in <dir>/.<key>.partial/, each file as .<name>.partial until its
// bytes are in and verified; the directory is renamed to <key>/ once every
// file landed, with a .complete record beside them. So nothing is ever
// visible under the final name before it is whole, an interrupted download
// resumes from the bytes it has (a Range request), and one download serves
// every shard of the node that asks for the same source. Files a peer sent
// while it was itself fetching, that nothing checked yet, are listed in
// the partial directory's .unchecked until they are (unchecked.go).
package fetch

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/llmgw/llmgw/agent/discovery"
	"github.com/llmgw/llmgw/internal/buildinfo"
	"github.com/llmgw/llmgw/internal/download"
	"github.com/llmgw/llmgw/spec"
)

// CompleteFile is the record written into a cache entry when it is whole.
const CompleteFile = ".complete"

// DefaultHFEndpoint is the Hugging Face hub, used when neither the options
// nor HF_ENDPOINT name another.
const DefaultHFEndpoint = download.DefaultHFEndpoint

// Options configure a Cache.
type Options struct {
	// Dir is the cache directory.
	Dir string
	// Client makes the requests; nil means a client without an overall
	// timeout (a download may take hours; stalls are watched instead).
	Client *http.Client
	// HFEndpoint is the hub's base URL for hf: sources.
	HFEndpoint string
	// HFToken, when set, is sent as a bearer token to HFEndpoint.
	HFToken string
	// S3 is where s3:// sources are read (download.S3ConfigFromEnv reads
	// the AWS_* variables).
	S3 download.S3Config
	// StallAfter is how long a download may move no byte before it is
	// reported stalled (default 60s).
	StallAfter time.Duration
	// GiveUpAfter is how long a download may move no byte before it fails
	// with its last error (default 10m).
	GiveUpAfter time.Duration
	// ProgressEvery is how often progress is reported (default 1s).
	ProgressEvery time.Duration
	// FreeBytes measures the space left on the filesystem holding a path
	// (default: discovery.ProbeDisk); a file that does not fit fails before
	// a byte of it is written.
	FreeBytes func(path string) (uint64, error)
	// PeerClient, when set, is the TLS to speak to a peer node with (its
	// node id given): sources are then asked of the peers a fetch names
	// before the source itself (PeerTLS).
	PeerClient func(node string) *tls.Config
	// PeerPoll is how often a peer that is still fetching is asked again
	// (default 500ms).
	PeerPoll time.Duration
	// PeerStartGrace is how long a peer that answers it has no such entry
	// (404) is asked again, every PeerPoll, before the next source: the
	// control plane names a peer fetching the source in the pass that
	// told it to, and this node may ask before that peer has begun
	// (default 2s).
	PeerStartGrace time.Duration
	Logger         *slog.Logger
}

// Progress is how far one source's download is.
type Progress struct {
	Source string
	// Done and Total are bytes; Total is 0 while unknown.
	Done, Total int64
	// BytesPerSecond is the recent rate.
	BytesPerSecond int64
	// Stalled is set when the download moved nothing for StallAfter: no
	// byte, nor a move to the source it fetches from now (its idle clock,
	// download.Progress.Idle);
	// LastError is the last error a request ended with, if any.
	Stalled   bool
	LastError string
}

// Cache is one node's weights cache.
type Cache struct {
	opts Options
	log  *slog.Logger
	dl   *download.Downloader

	mu       sync.Mutex
	inflight map[string]*call
	// gen counts changes to the complete entries (Generation).
	gen uint64
	// pins counts, per entry key, the users that hold it (Pin): a pinned
	// entry is never collected.
	pins map[string]int
	// now is the downloads' idle clock's time (newProgress): time.Now, set
	// once in New; a test moves it on instead of sleeping.
	now func() time.Time

	// Test hooks, set by a test before the cache fetches anything (each
	// cache its own, so tests running in parallel cannot race on them):
	// fetchedAll is told each source whose files are all in and verified,
	// before the entry is recorded and synced to disk; hashingLanded each
	// file haveLanded reads to hash.
	fetchedAll    func(source string)
	hashingLanded func(final string)
}

// call is one download that any number of waiters share.
type call struct {
	done    chan struct{}
	path    string
	err     error
	cancel  context.CancelFunc
	waiters int
	// abandoned is set when every waiter left and the download was
	// cancelled.
	abandoned bool
	watch     map[int]func(Progress)
	nextID    int
	// progress is the running download's, for peers asking how far it is.
	progress *download.Progress
	// listing is the source's files while the download writes them (nil
	// before, and while it waits on a peer), for peers that follow the
	// partial files as they grow; under c.mu (followable).
	listing []download.File
	// waiting counts the download's waits on a peer of its own (waitPeer);
	// under c.mu (fetchState).
	waiting int
}

// newProgress is a download's progress on the cache's idle clock
// (Cache.now): its stall report, its followers' X-Llmgw-Fetching-Idle,
// their cut and GiveUpAfter all read it.
func (c *Cache) newProgress() *download.Progress {
	return &download.Progress{Clock: c.now}
}

// New returns a cache in opts.Dir, creating it.
func New(opts Options) (*Cache, error) {
	if opts.Dir == "" {
		return nil, errors.New("weights cache: no directory")
	}
	if err := os.MkdirAll(opts.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("creating the weights cache %s: %w", opts.Dir, err)
	}
	// An entry a collection moved aside and did not finish deleting (the
	// agent died mid-way) is deleted now: it was no one's any more.
	if des, err := os.ReadDir(opts.Dir); err == nil {
		for _, de := range des {
			k, ok := strings.CutSuffix(strings.TrimPrefix(de.Name(), "."), ".deleting")
			k = strings.TrimSuffix(k, partialSuffix) // a partial download being collected
			if ok && strings.HasPrefix(de.Name(), ".") && keyRE.MatchString(k) {
				_ = os.RemoveAll(filepath.Join(opts.Dir, de.Name()))
			}
		}
	}
	if opts.Client == nil {
		opts.Client = &http.Client{}
	}
	if opts.HFEndpoint == "" {
		opts.HFEndpoint = os.Getenv("HF_ENDPOINT")
	}
	if opts.HFEndpoint == "" {
		opts.HFEndpoint = DefaultHFEndpoint
	}
	opts.HFEndpoint = strings.TrimSuffix(opts.HFEndpoint, "/")
	if opts.StallAfter <= 0 {
		opts.StallAfter = 60 * time.Second
	}
	if opts.GiveUpAfter <= 0 {
		opts.GiveUpAfter = 10 * time.Minute
	}
	if opts.ProgressEvery <= 0 {
		opts.ProgressEvery = time.Second
	}
	if opts.PeerStartGrace <= 0 {
		opts.PeerStartGrace = 2 * time.Second
	}
	if opts.PeerPoll <= 0 {
		opts.PeerPoll = 500 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.FreeBytes == nil {
		opts.FreeBytes = func(path string) (uint64, error) {
			d, err := discovery.ProbeDisk(path)
			return d.FreeBytes, err
		}
	}
	dl := &download.Downloader{
		Upstreams:    download.Upstreams{Client: opts.Client, HFEndpoint: opts.HFEndpoint, HFToken: opts.HFToken, S3: opts.S3, UserAgent: buildinfo.UserAgent("llmgw-agent")},
		GiveUpAfter:  opts.GiveUpAfter,
		StallTimeout: opts.StallAfter,
		FreeBytes:    opts.FreeBytes,
		Logger:       opts.Logger,
	}
	return &Cache{opts: opts, log: opts.Logger, dl: dl, inflight: map[string]*call{}, pins: map[string]int{}, now: time.Now}, nil
}

// Pin holds source's entry for a user (a shard about to resolve it and run
// from it) until release is called: Collect keeps a pinned entry whatever
// it was told is in use. Taken before the fetch, it closes the window in
// which a collection that listed what is in use a moment earlier could
// delete an entry a starting shard found complete. release may be called
// more than once.
func (c *Cache) Pin(source string) (release func()) {
	key := Key(source)
	c.mu.Lock()
	c.pins[key]++
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			if c.pins[key]--; c.pins[key] <= 0 {
				delete(c.pins, key)
			}
			c.mu.Unlock()
		})
	}
}

// Key is the name of source's entry in the cache: the first 16 hex digits
// of the sha256 of the source as written.
func Key(source string) string { return spec.WeightsKey(source) }

// EntryDir is where source's files are once complete.
func (c *Cache) EntryDir(source string) string { return filepath.Join(c.opts.Dir, Key(source)) }

func (c *Cache) partialDir(source string) string {
	return filepath.Join(c.opts.Dir, "."+Key(source)+".partial")
}

// Resolve returns what the engine is given for source: for a fetched one
// the local path in the cache (downloading it first, once however many
// callers ask), for a local path the path once it exists, and anything else
// as written. progress, when not nil, is called as the download moves, from
// another goroutine, until Resolve returns.
func (c *Cache) Resolve(ctx context.Context, source string, progress func(Progress)) (string, error) {
	return c.ResolveFrom(ctx, source, nil, progress)
}

// ResolveFrom is Resolve asking peers (nodes of the same fabric that hold
// the source or are fetching it), in order, before the source itself. A
// peer that fails, or disappears mid-transfer, costs a resume from the
// next peer or the source: the bytes already here are kept and verified.
// When the download is already running, it goes on from where it fetches.
func (c *Cache) ResolveFrom(ctx context.Context, source string, peers []Peer, progress func(Progress)) (string, error) {
	src, err := spec.ParseSource(source)
	if err != nil {
		return "", fmt.Errorf("source %q: %w", source, err)
	}
	switch src.Kind {
	case spec.SourceLocal:
		if _, err := os.Stat(src.Path); err != nil {
			return "", fmt.Errorf("source %s: %w", source, err)
		}
		return source, nil
	case spec.SourceURL, spec.SourceSet, spec.SourceHF, spec.SourceS3:
		return c.fetch(ctx, src, peers, progress)
	default:
		return source, nil
	}
}

// fetch joins or starts the download of src and waits for it.
func (c *Cache) fetch(ctx context.Context, src spec.Source, peers []Peer, progress func(Progress)) (string, error) {
	if p, ok, err := c.complete(src); ok || err != nil {
		return p, err
	}
	c.mu.Lock()
	cl, running := c.inflight[src.Raw]
	if !running || cl.abandoned {
		// A download every caller left is being cancelled: the new one
		// starts once it has let go of the partial files.
		var prev chan struct{}
		if running {
			prev = cl.done
		}
		dctx, cancel := context.WithCancel(context.Background())
		// Begun: its fetch moves nothing yet, but it began now; a peer
		// asking before it runs is told it idled since, not since the
		// epoch (which reads as a stall and is left at once).
		cl = &call{done: make(chan struct{}), cancel: cancel, watch: map[int]func(Progress){}, progress: c.newProgress()}
		cl.progress.Begin()
		c.inflight[src.Raw] = cl
		go c.run(dctx, cl, src, peers, prev)
	}
	cl.waiters++
	id := cl.nextID
	cl.nextID++
	if progress != nil {
		cl.watch[id] = progress
	}
	c.mu.Unlock()

	leave := func() {
		c.mu.Lock()
		delete(cl.watch, id)
		cl.waiters--
		if cl.waiters == 0 {
			cl.abandoned = true
			cl.cancel() // nobody waits any more: the partial stays for the next ask
		}
		c.mu.Unlock()
	}
	select {
	case <-cl.done:
		leave()
		return cl.path, cl.err
	case <-ctx.Done():
		leave()
		return "", fmt.Errorf("fetching %s: %w", src.Raw, ctx.Err())
	}
}

// complete returns the path to give the engine when src's entry is whole.
// An entry whose files no longer match its record (removed or truncated by
// hand) is an error: it is not fetched over, nor given to an engine.
func (c *Cache) complete(src spec.Source) (string, bool, error) {
	dir := c.EntryDir(src.Raw)
	b, err := os.ReadFile(filepath.Join(dir, CompleteFile))
	if err != nil {
		return "", false, nil
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return "", false, fmt.Errorf("cache entry %s: %s is not readable (%w); remove the entry to fetch %s again", dir, CompleteFile, err, src.Raw)
	}
	for _, f := range rec.Files {
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		st, err := os.Stat(p)
		if err != nil || st.Size() != f.Size {
			return "", false, fmt.Errorf("cache entry %s: %s is missing or not %d bytes as fetched; remove the entry to fetch %s again", dir, p, f.Size, src.Raw)
		}
	}
	if download.IsSet(src.Raw) || len(rec.Files) != 1 {
		return dir, true, nil
	}
	return filepath.Join(dir, filepath.FromSlash(rec.Files[0].Path)), true, nil
}

// run downloads src and completes cl.
func (c *Cache) run(ctx context.Context, cl *call, src spec.Source, peers []Peer, prev chan struct{}) {
	p := cl.progress
	if prev != nil {
		<-prev
		p.Moved() // the idle clock runs from here, not from the wait
	}
	stop, reported := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(reported)
		c.reportLoop(src.Raw, p, cl, stop)
	}()
	path, err := c.download(ctx, src, peers, p, cl)
	close(stop)
	<-reported // no progress reaches a waiter after Resolve returned
	c.mu.Lock()
	if c.inflight[src.Raw] == cl {
		delete(c.inflight, src.Raw)
	}
	if err == nil {
		c.gen++
	}
	cl.path, cl.err = path, err
	c.mu.Unlock()
	close(cl.done)
	cl.cancel()
	switch {
	case err != nil && ctx.Err() != nil:
		c.log.Info("fetch abandoned: no shard waits for it", "source", src.Raw)
	default:
		c.log.Info("fetched", "source", src.Raw, "path", path)
	}
}

// reportLoop sends cl's watchers the download's progress every
// ProgressEvery until stop closes.
func (c *Cache) reportLoop(source string, dp *download.Progress, cl *call, stop chan struct{}) {
	t := time.NewTicker(c.opts.ProgressEvery)
	defer t.Stop()
	var prevDone int64
	prevAt := time.Now()
	var rate float64
	wasStalled := false
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			p := Progress{Source: source, Done: dp.Bytes(), Total: max(dp.Total(), 0), LastError: dp.LastError()}
			// Stalled by the idle clock followers are told of
			// (idleHeader), a move to the next source counting as a move.
			p.Stalled = dp.Idle() >= c.opts.StallAfter
			dt := now.Sub(prevAt).Seconds()
			if dt > 0 {
				// Between two attempts the partial is counted afresh, so
				// Done may dip for an instant: that is no negative rate.
				inst := max(float64(p.Done-prevDone)/dt, 0)
				if rate == 0 {
					rate = inst
				} else {
					rate = 0.5*rate + 0.5*inst
				}
			}
			prevDone, prevAt = p.Done, now
			p.BytesPerSecond = int64(rate)
			if p.Stalled != wasStalled {
				wasStalled = p.Stalled
				if p.Stalled {
					c.log.Warn("fetch stalled", "source", p.Source, "done_bytes", p.Done, "total_bytes", p.Total, "last_error", p.LastError)
				} else {
					c.log.Info("fetch moving again", "source", p.Source, "done_bytes", p.Done)
				}
			}
			c.mu.Lock()
			watchers := make([]func(Progress), 0, len(cl.watch))
			for _, w := range cl.watch {
				watchers = append(watchers, w)
			}
			c.mu.Unlock()
			for _, w := range watchers {
				w(p)
			}
		}
	}
}

// record is the .complete file: what the entry holds and where it came from.
type record struct {
	Source  string       `json:"source"`
	Files   []recordFile `json:"files"`
	Fetched time.Time    `json:"fetched"`
}

type recordFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"`
}

func writeRecord(dir string, r record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	// On disk before the rename that makes the entry whole.
	p := filepath.Join(dir, CompleteFile)
	if err := writeSynced(p, append(b, '\n')); err != nil {
		return fmt.Errorf("writing %s: %w", p, err)
	}
	return nil
}

// writeSynced writes b to the file at p, created or truncated, and syncs
// it: on disk when it returns, ready to be renamed into place.
func writeSynced(p string, b []byte) error {
	fh, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	_, err = fh.Write(b)
	if err == nil {
		err = fh.Sync()
	}
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncTree syncs dir and every directory below it (a set's files land in
// subdirectories).
func syncTree(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return syncDir(p)
		}
		return nil
	})
}

// syncDir flushes a directory's entries (names created, renamed into it) to
// disk.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}

// followable sets what the peers following cl's download may follow: the
// source's files while it writes them, none (nil) while it writes none,
// when they are answered 503 with its progress. cl may be nil.
func (c *Cache) followable(cl *call, files []download.File) {
	if cl == nil {
		return
	}
	c.mu.Lock()
	cl.listing = slices.Clone(files)
	c.mu.Unlock()
}

// download fetches every file of src into the partial directory, records
// it, renames it to the entry's name and returns the path for the engine.
// The peers following cl may follow it while it writes files.
func (c *Cache) download(ctx context.Context, src spec.Source, peers []Peer, p *download.Progress, cl *call) (string, error) {
	if path, ok, err := c.complete(src); ok || err != nil {
		return path, err // completed by a call that ended while this one started
	}
	tmp := c.partialDir(src.Raw)
	if err := os.MkdirAll(tmp, 0o750); err != nil {
		return "", fmt.Errorf("fetching %s: creating %s: %w", src.Raw, tmp, err)
	}
	// What is being fetched here, for a collection that finds it left
	// behind; removed before the directory becomes the entry.
	if err := os.WriteFile(filepath.Join(tmp, sourceFile), []byte(src.Raw+"\n"), 0o640); err != nil {
		return "", fmt.Errorf("fetching %s: %w", src.Raw, err)
	}
	// Files a peer sent that an earlier run stopped before checking are
	// not kept.
	if _, err := dropUnchecked(tmp); err != nil {
		return "", fmt.Errorf("fetching %s: %w", src.Raw, err)
	}
	// The source's listing first: it is what a peer's bytes are checked
	// against.
	files, err := c.dl.List(ctx, src.Raw, p)
	if err != nil {
		return "", fmt.Errorf("fetching %s: %w", src.Raw, err)
	}
	var landed []download.Landed
	from := "source"
	for _, peer := range peers {
		l, err := c.fromPeer(ctx, peer, Key(src.Raw), tmp, files, p, cl)
		if err == nil {
			landed, from = l, "peer "+peer.Node
			break
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("fetching %s: %w", src.Raw, ctx.Err())
		}
		c.log.Warn("fetch from a peer failed, trying the next source", "source", src.Raw, "peer", peer.Node, "err", err)
		// On to the next source now: the idle clock starts again, for
		// the stall report, the followers and GiveUpAfter alike.
		p.Moved()
	}
	if landed == nil {
		// A partial file with bytes a peer sent unchecked is resumed only
		// where the source's sha256 checks the whole file.
		held, err := dropUnchecked(tmp)
		if err != nil {
			return "", fmt.Errorf("fetching %s: %w", src.Raw, err)
		}
		files = slices.Clone(files)
		for i := range files {
			files[i].HeldUnchecked = held[files[i].Path]
		}
		c.followable(cl, files)
		landed, err = c.dl.Fetch(ctx, tmp, files, p, c.haveLanded)
		if err != nil && len(peers) > 0 && errors.Is(err, download.ErrVerify) {
			// Bytes a peer sent while it was itself fetching were not
			// verified yet: resumed from the source they fail the check as
			// a whole. The file was discarded; fetch it afresh, once.
			c.log.Warn("a file resumed after a peer's bytes failed verification, fetching it again from the source", "source", src.Raw, "err", err)
			landed, err = c.dl.Fetch(ctx, tmp, files, p, c.haveLanded)
		}
		if err != nil {
			return "", fmt.Errorf("fetching %s: %w", src.Raw, err)
		}
	}
	c.log.Info("fetch complete", "source", src.Raw, "from", from)
	if c.fetchedAll != nil {
		c.fetchedAll(src.Raw)
	}
	rec := record{Source: src.Raw, Fetched: time.Now().UTC()}
	for _, l := range landed {
		rec.Files = append(rec.Files, recordFile{Path: l.Path, Size: l.Size, SHA256: l.SHA256})
	}
	// The files (synced as each landed), the record, then the partial
	// directory's names are on disk before the rename, and the rename is
	// before the entry is given out: a crash leaves a partial to resume or
	// a whole entry, never a complete-looking one with bytes missing.
	_ = os.Remove(filepath.Join(tmp, sourceFile))
	if err := clearUnchecked(tmp); err != nil {
		return "", fmt.Errorf("fetching %s: %w", src.Raw, err)
	}
	if err := writeRecord(tmp, rec); err != nil {
		return "", fmt.Errorf("fetching %s: %w", src.Raw, err)
	}
	if err := syncTree(tmp); err != nil {
		return "", fmt.Errorf("fetching %s: %w", src.Raw, err)
	}
	final := c.EntryDir(src.Raw)
	if err := os.Rename(tmp, final); err != nil {
		return "", fmt.Errorf("fetching %s: moving %s to %s: %w", src.Raw, tmp, final, err)
	}
	if err := syncDir(c.opts.Dir); err != nil {
		return "", fmt.Errorf("fetching %s: %w", src.Raw, err)
	}
	path, _, err := c.complete(src)
	return path, err
}
