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
	"time"

	"github.com/llmgw/llmgw/internal/buildinfo"
	dl "github.com/llmgw/llmgw/internal/download"

	"golang.org/x/sys/unix"
)

// Fetcher fills the store from upstream sources, through the downloader
// the agents' weights cache uses too (internal/download).
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

func (f *Fetcher) log() *slog.Logger {
	if f.Logger != nil {
		return f.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func (f *Fetcher) downloader() *dl.Downloader {
	retries := f.Retries
	if retries <= 0 {
		retries = 5
	}
	delay := f.RetryDelay
	if delay <= 0 {
		delay = time.Second
	}
	d := &dl.Downloader{
		Upstreams:   dl.Upstreams{Client: f.HTTPClient, HFEndpoint: f.HFEndpoint, HFToken: f.HFToken, S3: f.S3, UserAgent: buildinfo.UserAgent("llmgw-mirror")},
		MaxFailures: retries, RetryDelay: delay, MaxRetryDelay: 10 * time.Second,
		StallTimeout: f.StallTimeout, Logger: f.log(),
	}
	if f.Metrics != nil {
		d.OnBytes = f.Metrics.addFetched
	}
	return d
}

// Progress is shared between a running download and its readers.
type Progress = dl.Progress

// ErrVerify is wrapped by the error of a download whose bytes do not match
// the sha256 the source gave.
var ErrVerify = dl.ErrVerify

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
	dir, err := s.versionDir(model, version)
	if err != nil {
		return err
	}
	d := f.downloader()
	files, err := d.List(ctx, source, p)
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
	log := f.log().With("model", model, "version", version, "source", logSource(source))
	log.Info("download started", "files", len(files), "bytes", p.Total())
	landedFiles, err := d.Fetch(ctx, dir, files, p, func(final string, rf dl.File) (string, bool) {
		return landed(s, final, rf)
	})
	if err != nil {
		return fmt.Errorf("fetching into %s/%s: %w", model, version, err)
	}
	var total int64
	for _, l := range landedFiles {
		total += l.Size
		final := filepath.Join(dir, filepath.FromSlash(l.Path))
		if st, err := os.Stat(final); err == nil && l.SHA256 != "" {
			// The rename kept size and mtime: the sum computed while the
			// bytes came stays valid.
			_ = writeSidecar(final, sidecarKey(st), l.SHA256)
		}
	}
	if err := os.Remove(marker); err != nil {
		return fmt.Errorf("marking %s/%s complete: %w", model, version, err)
	}
	log.Info("download complete", "files", len(files), "bytes", total)
	return nil
}

func logSource(source string) string { return dl.LogSource(source) }

func isPermanent(err error) bool { return dl.IsPermanent(err) }

func permanent(err error) error { return dl.Permanent(err) }

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
func landed(s *Store, final string, rf dl.File) (string, bool) {
	st, err := os.Stat(final)
	if err != nil || !st.Mode().IsRegular() || rf.Size < 0 || st.Size() != rf.Size {
		return "", false
	}
	got, err := s.FileSHA256(final)
	if err != nil || (rf.SHA256 != "" && got != rf.SHA256) {
		return "", false
	}
	return got, true
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
			files, done := p.Files()
			fmt.Fprintf(out, "%s/%s: %d/%d bytes (%.0f%%), file %d of %d, %.1f MB/s\n", model, version, b, total, 100*float64(b)/float64(total), min(done+1, files), files, rate/1e6)
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
