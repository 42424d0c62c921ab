package fetch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/llmgw/llmgw/internal/buildinfo"
	"github.com/llmgw/llmgw/spec"
)

// HeaderSHA256 is the mirror's header carrying the sha256 of the whole file.
const HeaderSHA256 = "X-Llmgw-Sha256"

// download is one source's download, shared by every waiter.
type download struct {
	c   *Cache
	src spec.Source
	ctx context.Context

	mu       sync.Mutex
	done     int64
	total    int64
	lastByte time.Time
	lastErr  string
}

// remote is one file to download.
type remote struct {
	path   string // inside the entry
	url    string
	size   int64  // -1 while unknown
	sha256 string // expected, lower-case hex; "" while unknown
	hf     bool
}

// permanent marks an error retrying cannot fix: a 404, a corrupt file, a
// disk that refuses the bytes.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

func (d *download) snapshot(now time.Time) Progress {
	d.mu.Lock()
	defer d.mu.Unlock()
	return Progress{
		Source: d.src.Raw, Done: d.done, Total: d.total,
		Stalled: now.Sub(d.lastByte) >= d.c.opts.StallAfter, LastError: d.lastErr,
	}
}

func (d *download) add(n int64) {
	d.mu.Lock()
	d.done += n
	if n > 0 {
		d.lastByte = time.Now()
	}
	d.mu.Unlock()
}

// count adds bytes already on disk (or takes them back) without counting
// them as moved.
func (d *download) count(n int64) {
	d.mu.Lock()
	d.done += n
	d.mu.Unlock()
}

func (d *download) idle() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return time.Since(d.lastByte)
}

// run downloads every file of the source into the partial directory,
// renames it to the entry's name and returns the path for the engine.
func (d *download) run() (string, error) {
	if p, ok, err := d.c.complete(d.src); ok || err != nil {
		return p, err // completed by a call that ended while this one started
	}
	files, err := d.files()
	if err != nil {
		return "", fmt.Errorf("fetching %s: %w", d.src.Raw, err)
	}
	tmp := d.c.partialDir(d.src.Raw)
	if err := os.MkdirAll(tmp, 0o750); err != nil {
		return "", fmt.Errorf("fetching %s: creating %s: %w", d.src.Raw, tmp, err)
	}
	var known int64
	for _, f := range files {
		if f.size < 0 {
			known = -1
			break
		}
		known += f.size
	}
	if known > 0 {
		d.mu.Lock()
		d.total = known
		d.mu.Unlock()
	}
	rec := record{Source: d.src.Raw}
	for _, f := range files {
		sum, size, err := d.file(tmp, f)
		if err != nil {
			return "", fmt.Errorf("fetching %s: %w", d.src.Raw, err)
		}
		rec.Files = append(rec.Files, recordFile{Path: f.path, Size: size, SHA256: sum})
	}
	rec.Fetched = time.Now().UTC()
	if err := writeRecord(tmp, rec); err != nil {
		return "", fmt.Errorf("fetching %s: %w", d.src.Raw, err)
	}
	final := d.c.EntryDir(d.src.Raw)
	if err := os.Rename(tmp, final); err != nil {
		return "", fmt.Errorf("fetching %s: moving %s to %s: %w", d.src.Raw, tmp, final, err)
	}
	p, _, err := d.c.complete(d.src)
	return p, err
}

// files lists what the source is made of: one file, or a set's manifest.
func (d *download) files() ([]remote, error) {
	switch d.src.Kind {
	case spec.SourceHF:
		u := d.c.opts.HFEndpoint + "/" + d.src.Repo + "/resolve/main/" + d.src.Path
		return []remote{{path: fileName(d.src), url: u, size: -1, hf: true}}, nil
	case spec.SourceSet:
		var files []remote
		err := d.retry(func() (bool, error) {
			var err error
			files, err = d.manifest()
			return false, err
		})
		return files, err
	default:
		return []remote{{path: fileName(d.src), url: d.src.URL.String(), size: -1}}, nil
	}
}

// retry runs attempt until it succeeds, fails for good, or no byte moved
// for GiveUpAfter. An attempt that moved bytes is followed at once; one
// that moved none by a wait, doubling from 250ms to 5s.
func (d *download) retry(attempt func() (moved bool, err error)) error {
	wait := 250 * time.Millisecond
	for {
		moved, err := attempt()
		if err == nil {
			return nil
		}
		if d.ctx.Err() != nil {
			return d.ctx.Err()
		}
		var p permanent
		if errors.As(err, &p) {
			return err
		}
		d.mu.Lock()
		d.lastErr = err.Error()
		d.mu.Unlock()
		if idle := d.idle(); idle >= d.c.opts.GiveUpAfter {
			return fmt.Errorf("%w (no byte moved for %s)", err, idle.Round(time.Second))
		}
		if moved {
			// Bytes came before the cut: ask again at once, and start the
			// wait afresh should the next attempt move nothing.
			wait = 250 * time.Millisecond
			d.c.log.Debug("fetch interrupted, resuming", "source", d.src.Raw, "err", err)
			continue
		}
		d.c.log.Debug("fetch interrupted, retrying", "source", d.src.Raw, "err", err, "in", wait.String())
		select {
		case <-d.ctx.Done():
			return d.ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, 5*time.Second)
	}
}

// file downloads f into dir, resuming a partial left by an earlier
// attempt, and returns its sha256 and size once it is under its own name.
func (d *download) file(dir string, f remote) (string, int64, error) {
	final := filepath.Join(dir, filepath.FromSlash(f.path))
	partial := filepath.Join(filepath.Dir(final), "."+filepath.Base(final)+".partial")
	if st, err := os.Stat(final); err == nil {
		// Landed in an earlier run: it was verified before its rename.
		d.count(st.Size())
		return f.sha256, st.Size(), nil
	}
	if err := os.MkdirAll(filepath.Dir(final), 0o750); err != nil {
		return "", 0, permanent{fmt.Errorf("creating %s: %w", filepath.Dir(final), err)}
	}
	var sum string
	var size int64
	err := d.retry(func() (bool, error) {
		var moved int64
		var err error
		sum, size, moved, err = d.attempt(&f, partial)
		return moved > 0, err
	})
	if err != nil {
		return "", 0, err
	}
	if err := os.Rename(partial, final); err != nil {
		return "", 0, fmt.Errorf("moving %s to %s: %w", partial, final, err)
	}
	return sum, size, nil
}

// attempt makes one request for the rest of f into partial. It returns the
// file's sha256 and size when the whole file is in and verified, and how
// many bytes this attempt moved.
func (d *download) attempt(f *remote, partial string) (sum string, size, moved int64, err error) {
	fh, err := os.OpenFile(partial, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return "", 0, 0, permanent{fmt.Errorf("opening %s: %w", partial, err)}
	}
	defer fh.Close()
	h := sha256.New()
	st, err := fh.Stat()
	if err != nil {
		return "", 0, 0, permanent{fmt.Errorf("reading %s: %w", partial, err)}
	}
	have, err := io.CopyN(h, fh, st.Size()) // the bytes an earlier attempt left
	if err != nil {
		return "", 0, 0, permanent{fmt.Errorf("reading %s: %w", partial, err)}
	}
	d.count(have)
	counted := have
	// restart empties the partial: what the server sent cannot follow it.
	restart := func() error {
		if err := fh.Truncate(0); err != nil {
			return permanent{fmt.Errorf("truncating %s: %w", partial, err)}
		}
		if _, err := fh.Seek(0, io.SeekStart); err != nil {
			return permanent{fmt.Errorf("truncating %s: %w", partial, err)}
		}
		h.Reset()
		d.count(-have)
		counted -= have
		have = 0
		return nil
	}
	defer func() { d.count(-counted) }() // the next attempt counts the file again

	resp, linked, err := d.get(f, have)
	if err != nil {
		return "", 0, 0, err
	}
	defer resp.Body.Close()
	var total int64
	switch resp.StatusCode {
	case http.StatusOK:
		if have > 0 {
			d.c.log.Info("server ignored the Range request, fetching from the start", "source", d.src.Raw, "url", f.url, "had", have)
			if err := restart(); err != nil {
				return "", 0, 0, err
			}
		}
		total = resp.ContentLength
	case http.StatusPartialContent:
		start, t, ok := contentRange(resp.Header.Get("Content-Range"))
		if !ok || start != have {
			if err := restart(); err != nil {
				return "", 0, 0, err
			}
			return "", 0, 0, fmt.Errorf("GET %s: 206 with Content-Range %q for bytes=%d-", f.url, resp.Header.Get("Content-Range"), have)
		}
		total = t
	case http.StatusRequestedRangeNotSatisfiable:
		// The partial holds the whole file (or more than the file now has).
		_, t, _ := contentRange(resp.Header.Get("Content-Range"))
		if t != have {
			if err := restart(); err != nil {
				return "", 0, 0, err
			}
			return "", 0, 0, fmt.Errorf("GET %s: 416 for bytes=%d- (the file is %d bytes)", f.url, have, t)
		}
		total = t
	default:
		err := fmt.Errorf("GET %s: %s", f.url, resp.Status)
		if resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests {
			return "", 0, 0, permanent{err}
		}
		return "", 0, 0, err
	}
	if want := answeredSHA256(resp.Header, linked, f.hf); want != "" {
		if f.sha256 != "" && f.sha256 != want {
			if err := restart(); err != nil {
				return "", 0, 0, err
			}
			return "", 0, 0, permanent{fmt.Errorf("GET %s: sha256 %s, but the manifest or an earlier answer said %s", f.url, want, f.sha256)}
		}
		f.sha256 = want
	}
	if total >= 0 {
		if f.size >= 0 && f.size != total {
			return "", 0, 0, permanent{fmt.Errorf("GET %s: the file is %d bytes, the manifest says %d", f.url, total, f.size)}
		}
		if f.size < 0 {
			d.mu.Lock()
			d.total += total
			d.mu.Unlock()
		}
		f.size = total
		if need := total - have; need > 0 {
			free, err := d.c.opts.FreeBytes(filepath.Dir(partial))
			if err == nil && free < uint64(need) {
				return "", 0, 0, permanent{fmt.Errorf("writing %s: %d more bytes needed for %s, %d free on its filesystem", partial, need, f.url, free)}
			}
		}
	}
	if resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		n, err := copyCounted(fh, io.TeeReader(resp.Body, h), d, partial)
		moved, counted, have = n, counted+n, have+n
		if err != nil {
			return "", 0, moved, err
		}
	}
	if f.size >= 0 && have != f.size {
		return "", 0, moved, fmt.Errorf("GET %s: the connection ended at byte %d of %d", f.url, have, f.size)
	}
	got := hex.EncodeToString(h.Sum(nil))
	if f.sha256 != "" && got != f.sha256 {
		_ = fh.Close()
		if err := os.Remove(partial); err != nil {
			d.c.log.Warn("removing a corrupt download", "path", partial, "err", err)
		}
		return "", 0, moved, permanent{fmt.Errorf("GET %s: sha256 of the %d bytes received is %s, the server says %s; the download was discarded", f.url, have, got, f.sha256)}
	}
	if err := fh.Sync(); err != nil {
		return "", 0, moved, permanent{fmt.Errorf("writing %s: %w", partial, err)}
	}
	counted = 0 // stays counted: the file is whole
	return got, have, moved, nil
}

// copyCounted copies body into fh, counting every byte written.
func copyCounted(fh *os.File, body io.Reader, d *download, path string) (int64, error) {
	buf := make([]byte, 1<<20)
	var n int64
	for {
		r, rerr := body.Read(buf)
		if r > 0 {
			w, werr := fh.Write(buf[:r])
			n += int64(w)
			d.add(int64(w))
			if werr != nil {
				return n, permanent{fmt.Errorf("writing %s: %w", path, bare(werr))}
			}
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

// get asks for f from byte have on, following redirects; linked is the
// header of the first redirect, where the hub puts a file's sha256.
func (d *download) get(f *remote, have int64) (*http.Response, http.Header, error) {
	req, err := http.NewRequestWithContext(d.ctx, http.MethodGet, f.url, nil)
	if err != nil {
		return nil, nil, permanent{fmt.Errorf("GET %s: %w", f.url, err)}
	}
	req.Header.Set("User-Agent", buildinfo.UserAgent("llmgw-agent"))
	if have > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(have, 10)+"-")
	}
	if f.hf && d.c.opts.HFToken != "" {
		req.Header.Set("Authorization", "Bearer "+d.c.opts.HFToken)
	}
	var linked http.Header
	cli := *d.c.opts.Client
	cli.CheckRedirect = func(r *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		if linked == nil && r.Response != nil {
			linked = r.Response.Header.Clone()
		}
		return nil
	}
	resp, err := cli.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", f.url, err)
	}
	return resp, linked, nil
}

// answeredSHA256 is the sha256 the answer gives for the whole file: the
// mirror's header, or for the hub a 64-hex X-Linked-Etag or ETag.
func answeredSHA256(h, linked http.Header, hf bool) string {
	if v := strings.ToLower(strings.TrimSpace(h.Get(HeaderSHA256))); isSHA256(v) {
		return v
	}
	if !hf {
		return ""
	}
	for _, hh := range []http.Header{linked, h} {
		if hh == nil {
			continue
		}
		for _, k := range []string{"X-Linked-Etag", "ETag"} {
			v := strings.ToLower(strings.Trim(strings.TrimPrefix(strings.TrimSpace(hh.Get(k)), "W/"), `"`))
			if isSHA256(v) {
				return v
			}
		}
	}
	return ""
}

func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// contentRange reads "bytes start-end/total" (or "bytes */total").
func contentRange(v string) (start, total int64, ok bool) {
	v, found := strings.CutPrefix(v, "bytes ")
	if !found {
		return 0, -1, false
	}
	rng, tot, found := strings.Cut(v, "/")
	if !found {
		return 0, -1, false
	}
	total, err := strconv.ParseInt(tot, 10, 64)
	if err != nil {
		total = -1
	}
	if rng == "*" {
		return 0, total, true
	}
	s, _, found := strings.Cut(rng, "-")
	if !found {
		return 0, total, false
	}
	start, err = strconv.ParseInt(s, 10, 64)
	return start, total, err == nil
}
