// Package download moves weights from where they are published to a local
// directory: the one resumable downloader behind the mirror's upstream
// fetch (`llmgw mirror fetch`) and the agent's weights cache.
//
// A source (hf:, http(s)://, a mirror's set ending in "/", s3://) is first
// listed into its files (List), then each file is written under a hidden
// partial name beside its final one, resumed with a Range request from the
// partial's size after a cut, its sha256 computed as the bytes arrive and
// checked against the one the source gave, and renamed into place only
// when whole (Fetch). A file under its final name is therefore always whole;
// where a whole set must appear at once, the caller fetches into a
// directory of its own and renames or marks it afterwards.
package download

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// ErrVerify is wrapped by the error of a download whose bytes do not match
// the sha256 the source gave.
var ErrVerify = errors.New("sha256 mismatch")

// permanentError is a failure a retry cannot fix: a 404, a 401, a corrupt
// file, a disk that refuses the bytes.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as one a retry cannot fix.
func Permanent(err error) error {
	if err == nil || IsPermanent(err) {
		return err
	}
	return permanentError{err}
}

// IsPermanent reports whether err was marked as one a retry cannot fix.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// Downloader fetches sources' files with resume, verification and retries.
type Downloader struct {
	Upstreams
	// MaxFailures is how many attempts in a row may fail without moving a
	// byte before a file (or a listing) gives up; 0 means no such limit.
	MaxFailures int
	// GiveUpAfter gives up once the download moved nothing for this long
	// by its Progress's idle clock (Idle: no byte, nor a move to a new
	// source); 0 means no such limit. With neither limit set, MaxFailures
	// is 5.
	GiveUpAfter time.Duration
	// RetryDelay is the first wait after an attempt that moved nothing,
	// doubling up to MaxRetryDelay (defaults 250ms and 5s). An attempt
	// that moved bytes is followed at once.
	RetryDelay, MaxRetryDelay time.Duration
	// StallTimeout ends an attempt that receives no byte for this long (a
	// wedged connection), which is then resumed; 0 means 60s.
	StallTimeout time.Duration
	// FreeBytes, when set, measures the space left on the filesystem
	// holding a path: a file that does not fit fails before a byte of it
	// is written.
	FreeBytes func(path string) (uint64, error)
	// OnBytes, when set, is called with every chunk of bytes received.
	OnBytes func(n int)
	Logger  *slog.Logger
}

func (d *Downloader) log() *slog.Logger {
	if d.Logger != nil {
		return d.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// Progress is how far a download is, shared between it and its readers.
// The zero value is ready to use.
//
// It keeps the download's one idle clock: when it last moved (a byte
// received, a peer's bytes grown, a move to a new source: Moved). Idle
// reads it, and so does the downloader's GiveUpAfter, so every reader of
// "how long has this download moved nothing" agrees.
type Progress struct {
	// Clock, when set, is the idle clock's time (time.Now when nil): a
	// test moves it on rather than sleeping. Set before the download
	// starts.
	Clock func() time.Time

	mu         sync.Mutex
	landed     int64 // bytes of files already in place
	current    int64 // bytes of the file being written
	total      int64
	totalKnown bool
	files      int
	filesDone  int
	lastMove   time.Time // the idle clock: the last byte, or Moved
	lastErr    string
	// elsewhere is the bytes a peer this download waits on holds, while
	// away says it waits (Elsewhere) and its own transfer has not started
	// again.
	elsewhere int64
	away      bool
	// changed is closed, and cleared, at the next change of the bytes
	// held (Changed).
	changed chan struct{}
}

// Changed returns a channel closed the next time the download's bytes on
// disk change (bytes written, a file landed, a partial emptied): a reader
// following the files as they grow waits on it rather than polling.
func (p *Progress) Changed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.changed == nil {
		p.changed = make(chan struct{})
	}
	return p.changed
}

// notify wakes Changed's waiters; p.mu is held.
func (p *Progress) notify() {
	if p.changed != nil {
		close(p.changed)
		p.changed = nil
	}
}

// Bytes is how many bytes of the source are on disk, or, while the
// download waits on a peer that holds more (Elsewhere), the peer's: it
// never goes back for a wait.
func (p *Progress) Bytes() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.away && p.elsewhere > p.landed+p.current {
		return p.elsewhere
	}
	return p.landed + p.current
}

// Moving is the figure whose growth shows the download moving: the bytes
// on disk, or while it waits on a peer (Elsewhere), the peer's, which grow
// whether or not they are more than the bytes on disk.
func (p *Progress) Moving() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.away {
		return p.elsewhere
	}
	return p.landed + p.current
}

// Total is the source's size, -1 while unknown.
func (p *Progress) Total() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.totalKnown {
		return -1
	}
	return p.total
}

// Files is how many files the source has (0 before it was listed), and
// FilesDone how many of them are in place.
func (p *Progress) Files() (files, done int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.files, p.filesDone
}

// LastError is the error the last failed attempt ended with, "" if none.
func (p *Progress) LastError() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastErr
}

// now is the idle clock's time.
func (p *Progress) now() time.Time {
	if p.Clock != nil {
		return p.Clock()
	}
	return time.Now()
}

// Idle is how long the download has moved nothing, by its clock: since
// it last received a byte (or a peer's bytes grew, Elsewhere), went on to
// a new source (Moved), or started (Begin); since the zero time, so past
// any limit, when it has not started.
func (p *Progress) Idle() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return max(p.now().Sub(p.lastMove), 0)
}

// Begin marks the download started (its idle clock runs from now) if
// nothing did yet.
func (p *Progress) Begin() { p.start() }

// Moved marks the download gone on to a new source (after a peer failed
// it, or a wait on one ended): its idle clock starts again from now, for
// the stall report and GiveUpAfter alike, as it would for a byte.
func (p *Progress) Moved() {
	p.mu.Lock()
	p.lastMove = p.now()
	p.mu.Unlock()
}

// Elsewhere records that n bytes of the source are held elsewhere on this
// download's behalf (a peer it waits for, fetching the source itself):
// until its own transfer starts again (Fetch) they are reported as its
// bytes where they are more than it holds (Bytes), and their growth counts
// as bytes received (the download is not stalled while they grow).
func (p *Progress) Elsewhere(n int64) {
	p.mu.Lock()
	prev := p.landed + p.current
	if p.away {
		prev = p.elsewhere
	}
	if n > prev || p.lastMove.IsZero() {
		p.lastMove = p.now()
	}
	p.elsewhere, p.away = n, true
	p.mu.Unlock()
}

func (p *Progress) start() {
	p.mu.Lock()
	if p.lastMove.IsZero() {
		p.lastMove = p.now()
	}
	p.mu.Unlock()
}

func (p *Progress) received(n int64) {
	p.mu.Lock()
	p.current += n
	if n > 0 {
		p.lastMove = p.now()
		p.notify()
	}
	p.mu.Unlock()
}

func (p *Progress) setCurrent(n int64) {
	p.mu.Lock()
	p.current = n
	p.notify()
	p.mu.Unlock()
}

func (p *Progress) fileLanded(size int64) {
	p.mu.Lock()
	p.landed += size
	p.current = 0
	p.filesDone++
	p.notify()
	p.mu.Unlock()
}

func (p *Progress) failed(err error) {
	p.mu.Lock()
	p.lastErr = err.Error()
	p.mu.Unlock()
}

// setFiles records the listing: the total is known when every size is.
func (p *Progress) setFiles(files []File) {
	var total int64
	known := true
	for _, f := range files {
		if f.Size < 0 {
			known = false
			break
		}
		total += f.Size
	}
	p.mu.Lock()
	p.files, p.total, p.totalKnown = len(files), total, known
	p.mu.Unlock()
}

// learnt adds a size only the answer gave, once every other file's is known.
func (p *Progress) learnt(size int64, files []File, i int) {
	for j, f := range files {
		if j != i && f.Size < 0 {
			return
		}
	}
	var total int64
	for j, f := range files {
		if j == i {
			total += size
		} else {
			total += f.Size
		}
	}
	p.mu.Lock()
	p.total, p.totalKnown = total, true
	p.mu.Unlock()
}

// Landed is one file in place: its path inside the directory, size and
// sha256 (computed from the bytes, or the source's for a file the caller
// said was already there).
type Landed struct {
	Path   string
	Size   int64
	SHA256 string
}

// List lists source's files, retrying what a retry may fix (a 5xx, a
// refused connection) under the same limits as a file.
func (d *Downloader) List(ctx context.Context, source string, p *Progress) ([]File, error) {
	if p == nil {
		p = &Progress{}
	}
	p.start()
	var files []File
	err := d.retry(ctx, p, "listing "+LogSource(source), func() (bool, error) {
		var err error
		files, err = d.Upstreams.List(ctx, source)
		return false, err
	})
	if err != nil {
		return nil, err
	}
	p.setFiles(files)
	return files, nil
}

// Fetch downloads files into dir, one after the other. have, when not nil,
// says whether a file is already in place under its final name (and its
// sha256), so that it is not fetched again. On an error, the files that
// landed before it are returned with it, so that a caller that tries again
// can tell have their sha256s without reading them again.
func (d *Downloader) Fetch(ctx context.Context, dir string, files []File, p *Progress, have func(final string, f File) (sha256 string, ok bool)) ([]Landed, error) {
	if p == nil {
		p = &Progress{}
	}
	p.start()
	p.setFiles(files)
	p.mu.Lock()
	p.landed, p.current, p.filesDone = 0, 0, 0 // this fetch's: an earlier one's files are counted again below
	p.away = false
	p.mu.Unlock()
	out := make([]Landed, 0, len(files))
	for i := range files {
		f := files[i]
		final := filepath.Join(dir, filepath.FromSlash(f.Path))
		if have != nil {
			if sum, ok := have(final, f); ok {
				st, err := os.Stat(final)
				if err == nil {
					p.fileLanded(st.Size())
					out = append(out, Landed{Path: f.Path, Size: st.Size(), SHA256: sum})
					continue
				}
			}
		}
		if err := os.MkdirAll(filepath.Dir(final), 0o750); err != nil {
			return out, Permanent(fmt.Errorf("creating %s: %w", filepath.Dir(final), err))
		}
		l, err := d.file(ctx, final, &f, files, i, p)
		if err != nil {
			return out, err
		}
		p.fileLanded(l.Size)
		out = append(out, l)
	}
	return out, nil
}

// PartialName is where a file is written until it is whole.
func PartialName(final string) string {
	return filepath.Join(filepath.Dir(final), "."+filepath.Base(final)+".partial")
}

// file downloads f to final through its partial file, retrying.
func (d *Downloader) file(ctx context.Context, final string, f *File, files []File, i int, p *Progress) (Landed, error) {
	partial := PartialName(final)
	var l Landed
	err := d.retry(ctx, p, f.Path, func() (bool, error) {
		sum, size, moved, err := d.attempt(ctx, f, partial, files, i, p)
		if err == nil {
			l = Landed{Path: f.Path, Size: size, SHA256: sum}
		}
		return moved > 0, err
	})
	if err != nil {
		return Landed{}, err
	}
	if err := os.Rename(partial, final); err != nil {
		return Landed{}, Permanent(fmt.Errorf("moving %s to %s: %w", partial, final, err))
	}
	return l, nil
}

// retry runs attempt until it succeeds, fails for good, or the limits say
// to give up.
func (d *Downloader) retry(ctx context.Context, p *Progress, what string, attempt func() (moved bool, err error)) error {
	first := d.RetryDelay
	if first <= 0 {
		first = 250 * time.Millisecond
	}
	most := d.MaxRetryDelay
	if most <= 0 {
		most = 5 * time.Second
	}
	maxFailures := d.MaxFailures
	if maxFailures <= 0 && d.GiveUpAfter <= 0 {
		maxFailures = 5
	}
	wait, failures := first, 0
	for {
		moved, err := attempt()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if IsPermanent(err) {
			return err
		}
		p.failed(err)
		if moved {
			// Bytes came before the cut: ask again at once, and start the
			// wait afresh should the next attempt move nothing.
			wait, failures = first, 0
			d.log().Debug("download interrupted, resuming", "what", what, "err", err)
			continue
		}
		failures++
		if maxFailures > 0 && failures >= maxFailures {
			return fmt.Errorf("giving up after %d attempts without progress: %w", failures, err)
		}
		if d.GiveUpAfter > 0 {
			if idle := p.Idle(); idle >= d.GiveUpAfter {
				return fmt.Errorf("%w (no byte moved for %s)", err, idle.Round(time.Second))
			}
		}
		d.log().Debug("download failed, retrying", "what", what, "err", err, "in", wait.String())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, most)
	}
}

// errRestart is wrapped by an answer that cannot follow the bytes held: the
// partial file is emptied before the error is returned.
var errRestart = errors.New("the answer does not follow the bytes held")

// attempt makes one request for the rest of f into partial. It returns the
// file's sha256 and size once the whole file is in and verified, and how
// many bytes this attempt moved.
func (d *Downloader) attempt(ctx context.Context, f *File, partial string, files []File, i int, p *Progress) (sum string, size, moved int64, err error) {
	fh, err := os.OpenFile(partial, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return "", 0, 0, Permanent(fmt.Errorf("opening %s: %w", partial, err))
	}
	defer fh.Close()
	h := sha256.New()
	st, err := fh.Stat()
	if err != nil {
		return "", 0, 0, Permanent(fmt.Errorf("reading %s: %w", partial, err))
	}
	have := st.Size()
	if !st.Mode().IsRegular() {
		have = 0 // a device (tests use /dev/full): nothing to resume
	}
	// restart empties the partial: what the source sent cannot follow it.
	restart := func() error {
		if err := fh.Truncate(0); err != nil {
			return Permanent(fmt.Errorf("truncating %s: %w", partial, err))
		}
		if _, err := fh.Seek(0, io.SeekStart); err != nil {
			return Permanent(fmt.Errorf("truncating %s: %w", partial, err))
		}
		h.Reset()
		have = 0
		f.HeldUnchecked = false // nothing held any more
		p.setCurrent(0)
		return nil
	}
	if f.Size >= 0 && have > f.Size {
		if err := restart(); err != nil {
			return "", 0, 0, err
		}
	}
	// Bytes nothing checked are kept only if a sha256 will check the whole
	// file: a whole file has no answer to bring one, so it is fetched again.
	if f.HeldUnchecked && f.SHA256 == "" && have > 0 && f.Size >= 0 && have == f.Size {
		d.log().Info("the bytes held were not checked and nothing gives a sha256 to check them with, fetching from the start", "file", f.Where, "had", have)
		if err := restart(); err != nil {
			return "", 0, 0, err
		}
	}
	if n, err := io.CopyN(h, fh, have); err != nil || n != have { // the bytes an earlier attempt left
		return "", 0, 0, Permanent(fmt.Errorf("reading %s: %w", partial, err))
	}
	p.setCurrent(have)

	stall := d.StallTimeout
	if stall <= 0 {
		stall = time.Minute
	}
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	errStalled := fmt.Errorf("no byte received for %s", stall)
	watchdog := time.AfterFunc(stall, func() { cancel(errStalled) })
	defer watchdog.Stop()

	var body io.ReadCloser
	var ans Answer
	open := func() error {
		var err error
		body, ans, err = f.open(actx, have)
		if err != nil {
			if errors.Is(err, errRestart) {
				if rerr := restart(); rerr != nil {
					return rerr
				}
			}
			if errors.Is(context.Cause(actx), errStalled) {
				err = fmt.Errorf("%s: %w", f.Where, errStalled)
			}
		}
		return err
	}
	if f.Size >= 0 && have == f.Size {
		// Every byte is there already (stopped before the rename).
		body, ans = io.NopCloser(eofReader{}), Answer{Start: have, Total: have}
	} else {
		if err := open(); err != nil {
			return "", 0, 0, err
		}
		if f.HeldUnchecked && have > 0 && ans.Start == have && f.SHA256 == "" && ans.SHA256 == "" {
			// Resumed, the bytes held would never be checked.
			body.Close()
			d.log().Info("the bytes held were not checked and the answer gives no sha256 to check them with, fetching from the start", "file", f.Where, "had", have)
			if err := restart(); err != nil {
				return "", 0, 0, err
			}
			if err := open(); err != nil {
				return "", 0, 0, err
			}
		}
	}
	defer func() { body.Close() }()
	if ans.Start != have {
		if ans.Start != 0 {
			if err := restart(); err != nil {
				return "", 0, 0, err
			}
			return "", 0, 0, fmt.Errorf("%s: the answer starts at byte %d, not at %d as asked", f.Where, ans.Start, have)
		}
		d.log().Info("the source ignored the Range request, fetching from the start", "file", f.Where, "had", have)
		if err := restart(); err != nil {
			return "", 0, 0, err
		}
	}
	if ans.SHA256 != "" {
		if f.SHA256 != "" && f.SHA256 != ans.SHA256 {
			_ = restart()
			return "", 0, 0, Permanent(fmt.Errorf("%s: %w: the answer says %s, the listing said %s", f.Where, ErrVerify, ans.SHA256, f.SHA256))
		}
		f.SHA256 = ans.SHA256
	}
	if ans.Total >= 0 {
		if f.Size >= 0 && f.Size != ans.Total {
			return "", 0, 0, Permanent(fmt.Errorf("%s: the file is %d bytes, the listing says %d", f.Where, ans.Total, f.Size))
		}
		if f.Size < 0 {
			f.Size = ans.Total
			files[i].Size = ans.Total
			p.learnt(ans.Total, files, i)
		}
	}
	if need := f.Size - have; f.Size >= 0 && need > 0 && d.FreeBytes != nil {
		free, err := d.FreeBytes(filepath.Dir(partial))
		if err == nil && free < uint64(need) {
			return "", 0, 0, Permanent(fmt.Errorf("writing %s: %d more bytes needed for %s, %d free on its filesystem", partial, need, f.Where, free))
		}
	}
	n, cerr := d.copy(fh, body, h, p, partial, func() { watchdog.Reset(stall) })
	moved, have = n, have+n
	if cerr != nil {
		if !IsPermanent(cerr) && errors.Is(context.Cause(actx), errStalled) {
			cerr = errStalled
		}
		return "", 0, moved, fmt.Errorf("%s: after %d bytes: %w", f.Where, have, cerr)
	}
	if f.Size >= 0 && have != f.Size {
		return "", 0, moved, fmt.Errorf("%s: the answer ended at byte %d of %d", f.Where, have, f.Size)
	}
	got := hex.EncodeToString(h.Sum(nil))
	if f.SHA256 != "" && got != f.SHA256 {
		_ = fh.Close()
		if err := os.Remove(partial); err != nil {
			d.log().Warn("removing a corrupt download", "path", partial, "err", err)
		}
		p.setCurrent(0)
		return "", 0, moved, Permanent(fmt.Errorf("%s: %w: the source says %s, the %d bytes received hash to %s; the download was discarded", f.Where, ErrVerify, f.SHA256, have, got))
	}
	if err := fh.Sync(); err != nil {
		return "", 0, moved, Permanent(fmt.Errorf("writing %s: %w", partial, bare(err)))
	}
	return got, have, moved, nil
}

// copy writes body into fh, counting every byte, and hashes what it wrote
// into h on another goroutine, so that hashing overlaps the network and the
// disk (on a small machine the sha256 alone would halve the rate). h is
// complete when copy returns. A write error is the disk's (permanent), a
// read error the source's.
func (d *Downloader) copy(fh *os.File, body io.Reader, h hash.Hash, p *Progress, path string, onRead func()) (int64, error) {
	const buffers = 4
	free := make(chan []byte, buffers)
	for range buffers {
		free <- make([]byte, 1<<20)
	}
	toHash := make(chan []byte, buffers)
	hashed := make(chan struct{})
	go func() {
		defer close(hashed)
		for b := range toHash {
			h.Write(b) // a hash.Hash never fails
			free <- b[:cap(b)]
		}
	}()
	defer func() {
		close(toHash)
		<-hashed
	}()
	var n int64
	for {
		buf := <-free
		r, rerr := body.Read(buf)
		if r > 0 {
			onRead()
			if d.OnBytes != nil {
				d.OnBytes(r)
			}
			w, werr := fh.Write(buf[:r])
			n += int64(w)
			p.received(int64(w))
			toHash <- buf[:w]
			if werr != nil {
				return n, Permanent(fmt.Errorf("writing %s: %w", path, bare(werr)))
			}
		} else {
			free <- buf
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, fmt.Errorf("reading the answer: %w", rerr)
		}
	}
}

// bare drops the *os.PathError around err, whose path the message names
// already.
func bare(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }
