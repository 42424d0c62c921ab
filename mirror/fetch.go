package mirror

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Fetcher fills the store from upstream sources.
type Fetcher struct {
	// HFEndpoint is the Hugging Face hub (HF_ENDPOINT); empty is https://huggingface.co.
	HFEndpoint string
	// HFToken is sent as a bearer token to the hub; never logged.
	HFToken string
	// S3 is where s3:// sources are read.
	S3 S3Config
	// HTTPClient defaults to a client with no overall timeout (files are large).
	HTTPClient *http.Client
	// Retries is how many attempts in a row may fail without moving a byte
	// before a file's download gives up; 0 means 5.
	Retries int
	// RetryDelay is the first pause between attempts, doubled up to 10s; 0 means 1s.
	RetryDelay time.Duration
	// StallTimeout ends an attempt that receives no byte for this long (a
	// wedged connection), which is then retried; 0 means 60s.
	StallTimeout time.Duration
	Logger       *slog.Logger
	// Metrics, when set, counts the bytes received.
	Metrics *Metrics
}

func (f *Fetcher) client() *http.Client {
	if f.HTTPClient != nil {
		return f.HTTPClient
	}
	return &http.Client{Transport: http.DefaultTransport}
}

func (f *Fetcher) log() *slog.Logger {
	if f.Logger != nil {
		return f.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// Progress is shared between a running download and its readers.
type Progress struct {
	bytes atomic.Int64
	total atomic.Int64
	files atomic.Int64
	done  atomic.Int64
}

// Bytes is how many bytes of the set are on disk.
func (p *Progress) Bytes() int64 { return p.bytes.Load() }

// Total is the set's size, -1 while unknown.
func (p *Progress) Total() int64 { return p.total.Load() }

// ErrVerify is wrapped by the error of a download whose bytes do not match
// the sha256 the source gave.
var ErrVerify = errors.New("sha256 mismatch")

// Fetch fills dir/model/version from source. The version directory holds a
// marker from the first byte until the last file lands, so the bytes
// listener never offers a half set; each file is written under a hidden
// partial name, resumed with Range after a cut, verified when the source
// gives a sha256 and renamed into place. Running Fetch again after a
// failure resumes from the partial files left behind.
func (f *Fetcher) Fetch(ctx context.Context, s *Store, model, version, source string, p *Progress) error {
	if p == nil {
		p = &Progress{}
	}
	p.total.Store(-1)
	dir, err := s.versionDir(model, version)
	if err != nil {
		return err
	}
	files, err := f.resolveRetrying(ctx, source)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	unlock, err := lockVersion(dir)
	if err != nil {
		return fmt.Errorf("fetching into %s/%s: %w", model, version, err)
	}
	defer unlock()
	marker := filepath.Join(dir, incompleteMarker)
	if err := os.WriteFile(marker, []byte(source+"\n"), 0o644); err != nil {
		return fmt.Errorf("marking %s/%s incomplete: %w", model, version, err)
	}
	total := int64(0)
	for _, rf := range files {
		if rf.Size < 0 {
			total = -1
			break
		}
		total += rf.Size
	}
	p.total.Store(total)
	p.files.Store(int64(len(files)))
	log := f.log().With("model", model, "version", version, "source", logSource(source))
	log.Info("download started", "files", len(files), "bytes", total)
	var landed int64
	for _, rf := range files {
		n, err := f.fetchFile(ctx, s, dir, rf, landed, p, log)
		if err != nil {
			return fmt.Errorf("fetching %s into %s/%s: %w", rf.Path, model, version, err)
		}
		landed += n
		p.done.Add(1)
	}
	if err := os.Remove(marker); err != nil {
		return fmt.Errorf("marking %s/%s complete: %w", model, version, err)
	}
	log.Info("download complete", "files", len(files), "bytes", landed)
	return nil
}

// resolveRetrying lists the source's files, retrying what a retry may fix
// (a 5xx, a refused connection) as downloads do.
func (f *Fetcher) resolveRetrying(ctx context.Context, source string) ([]remoteFile, error) {
	delay := f.RetryDelay
	if delay <= 0 {
		delay = time.Second
	}
	retries := f.Retries
	if retries <= 0 {
		retries = 5
	}
	for attempt := 1; ; attempt++ {
		files, err := f.resolve(ctx, source)
		if err == nil || isPermanent(err) || ctx.Err() != nil || attempt >= retries {
			return files, err
		}
		f.log().Warn("listing the source failed, retrying", "source", logSource(source), "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, 10*time.Second)
	}
}

// logSource is source as logs show it: a URL without its query (a signed
// URL's signature) or user info.
func logSource(source string) string {
	if strings.HasPrefix(source, "http://") || strings.HasPrefix(source, "https://") {
		return redact(source)
	}
	return source
}

// fetchFile downloads one file and returns its size. before is the bytes
// of the set already landed, for progress.
func (f *Fetcher) fetchFile(ctx context.Context, s *Store, dir string, rf remoteFile, before int64, p *Progress, log *slog.Logger) (int64, error) {
	final := filepath.Join(dir, filepath.FromSlash(rf.Path))
	partial := filepath.Join(filepath.Dir(final), "."+filepath.Base(final)+".partial")
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return 0, err
	}
	if landed(s, final, rf) {
		p.bytes.Store(before + rf.Size)
		log.Debug("already here", "file", rf.Path)
		return rf.Size, nil
	}
	retries := f.Retries
	if retries <= 0 {
		retries = 5
	}
	first := f.RetryDelay
	if first <= 0 {
		first = time.Second
	}
	delay := first
	failures := 0
	for {
		moved, size, err := f.attempt(ctx, s, rf, partial, final, before, p)
		if err == nil {
			return size, nil
		}
		if isPermanent(err) || ctx.Err() != nil {
			return 0, err
		}
		if moved {
			failures, delay = 0, first
		}
		failures++
		if failures >= retries {
			return 0, fmt.Errorf("giving up after %d attempts without progress: %w", failures, err)
		}
		log.Warn("download interrupted, resuming", "file", rf.Path, "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, 10*time.Second)
	}
}

// ErrBusy is wrapped by the error of a Fetch into a version another
// download (in this process or another) is filling.
var ErrBusy = errors.New("another download of this model/version is running")

// lockVersion takes an exclusive lock on dir/.lock, so that `llmgw mirror
// fetch` and the management API never write the same partial files. The
// kernel drops the lock when the process dies: no stale lock survives.
func lockVersion(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, permanent(ErrBusy)
		}
		return nil, fmt.Errorf("taking the lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// landed reports whether final already holds rf: the same size, and the
// same sha256 when the source gives one (from the sidecar, so a second run
// over a complete set reads no file).
func landed(s *Store, final string, rf remoteFile) bool {
	st, err := os.Stat(final)
	if err != nil || !st.Mode().IsRegular() || rf.Size < 0 || st.Size() != rf.Size {
		return false
	}
	if rf.SHA256 == "" {
		return true
	}
	got, err := s.FileSHA256(final)
	return err == nil && got == rf.SHA256
}

// attempt resumes partial from its size and, once every byte is there,
// verifies and renames it. moved reports whether any byte was written.
func (f *Fetcher) attempt(ctx context.Context, s *Store, rf remoteFile, partial, final string, before int64, p *Progress) (moved bool, size int64, err error) {
	var offset int64
	if st, err := os.Stat(partial); err == nil {
		offset = st.Size()
	}
	if rf.Size >= 0 && offset > rf.Size {
		offset = 0
	}
	stall := f.StallTimeout
	if stall <= 0 {
		stall = time.Minute
	}
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	errStalled := fmt.Errorf("no byte received for %s", stall)
	watchdog := time.AfterFunc(stall, func() { cancel(errStalled) })
	defer watchdog.Stop()
	var body io.ReadCloser
	var info openInfo
	if rf.Size >= 0 && offset == rf.Size && offset > 0 {
		// Every byte is there already (a run stopped before the rename).
		body, info = io.NopCloser(strings.NewReader("")), openInfo{start: offset, total: rf.Size}
	} else {
		body, info, err = rf.open(actx, offset)
	}
	if err != nil {
		if errors.Is(context.Cause(actx), errStalled) {
			err = errStalled
		}
		return false, 0, err
	}
	defer body.Close()
	if rf.Size < 0 && info.total >= 0 && p.files.Load() == 1 {
		p.total.Store(info.total) // a single file whose size only its answer gave
	}
	flags := os.O_WRONLY | os.O_CREATE
	if info.start != offset || info.start == 0 {
		// The source ignored the range (or there was nothing to resume).
		flags |= os.O_TRUNC
		offset = 0
	} else {
		flags |= os.O_APPEND
	}
	out, err := os.OpenFile(partial, flags, 0o644)
	if err != nil {
		return false, 0, permanent(fmt.Errorf("opening %s: %w", partial, err))
	}
	p.bytes.Store(before + offset)
	dst := &localWriter{f: out}
	n, copyErr := io.Copy(dst, &countingReader{r: body, p: p, m: f.Metrics, onRead: func() { watchdog.Reset(stall) }})
	switch {
	case dst.err != nil:
		// The local disk failed (full, read-only): retrying cannot help.
		copyErr = permanent(fmt.Errorf("writing %s: %w", partial, dst.err))
	case copyErr != nil && errors.Is(context.Cause(actx), errStalled):
		copyErr = errStalled
	}
	if err := out.Close(); err != nil && copyErr == nil {
		copyErr = permanent(fmt.Errorf("writing %s: %w", partial, err))
	}
	moved = n > 0
	if copyErr != nil {
		return moved, 0, fmt.Errorf("after %d bytes: %w", offset+n, copyErr)
	}
	size = offset + n
	want := rf.Size
	if want < 0 {
		want = info.total
	}
	if want >= 0 && size != want {
		return moved, 0, fmt.Errorf("the answer ended at byte %d of %d", size, want)
	}
	sum := rf.SHA256
	if sum == "" {
		sum = info.sha256
	}
	got, err := hashFile(partial)
	if err != nil {
		return moved, 0, permanent(fmt.Errorf("hashing %s: %w", partial, err))
	}
	if sum != "" && got != sum {
		_ = os.Remove(partial)
		return moved, 0, permanent(fmt.Errorf("%w: the source says %s, the %d bytes received hash to %s", ErrVerify, sum, size, got))
	}
	st, err := os.Stat(partial)
	if err != nil {
		return moved, 0, permanent(err)
	}
	if err := os.Rename(partial, final); err != nil {
		return moved, 0, permanent(fmt.Errorf("renaming into place: %w", err))
	}
	// The rename keeps size and mtime: the sum just computed stays valid.
	_ = writeSidecar(final, sidecarKey(st), got)
	return moved, size, nil
}

// localWriter remembers a write error, to tell the disk's failures from the
// network's.
type localWriter struct {
	f   *os.File
	err error
}

func (w *localWriter) Write(b []byte) (int, error) {
	n, err := w.f.Write(b)
	if err != nil {
		w.err = err
	}
	return n, err
}

type countingReader struct {
	r      io.Reader
	p      *Progress
	m      *Metrics
	onRead func()
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.p.bytes.Add(int64(n))
	c.m.addFetched(n)
	if n > 0 {
		c.onRead()
	}
	return n, err
}

// ReadTokenFile reads a token from path (HF_TOKEN_FILE), trimmed; an
// empty path is no token.
func ReadTokenFile(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("the token file %s is empty", path)
	}
	return tok, nil
}

// FetchReporting runs Fetch and writes a progress line to out every
// interval and when it ends.
func (f *Fetcher) FetchReporting(ctx context.Context, s *Store, model, version, source string, out io.Writer, interval time.Duration) error {
	p := &Progress{}
	start := time.Now()
	report := func() {
		b, total := p.Bytes(), p.Total()
		rate := float64(b) / max(time.Since(start).Seconds(), 1e-3)
		if total > 0 {
			fmt.Fprintf(out, "%s/%s: %d/%d bytes (%.0f%%), file %d of %d, %.1f MB/s\n", model, version, b, total, 100*float64(b)/float64(total), min(p.done.Load()+1, p.files.Load()), p.files.Load(), rate/1e6)
		} else {
			fmt.Fprintf(out, "%s/%s: %d bytes, %.1f MB/s\n", model, version, b, rate/1e6)
		}
	}
	done := make(chan error, 1)
	go func() { done <- f.Fetch(ctx, s, model, version, source, p) }()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err == nil {
				report()
			}
			return err
		case <-tick.C:
			report()
		}
	}
}
