package fetch

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/llmgw/llmgw/internal/buildinfo"
	"github.com/llmgw/llmgw/internal/download"
)

// Peer is a node of the same fabric that holds a source, or is fetching it.
type Peer struct {
	Node    string
	Address string // host:port of its peer listener
}

// PeerPrefix is where a node serves its cache entries to its peers:
// GET PeerPrefix<key>/ is an entry's manifest (the mirror's shape), GET
// PeerPrefix<key>/<path> one of its files, with Range and X-Llmgw-Sha256.
const PeerPrefix = "/v1/weights/"

// fetchingHeader, on a 503 for an entry being fetched, is how many of its
// bytes the peer holds so far.
const fetchingHeader = "X-Llmgw-Fetching-Bytes"

// idleHeader, beside fetchingHeader, is how long (milliseconds) the
// peer's fetch has moved nothing by its own account: since its last byte,
// or since it moved to the source it fetches from now, whichever is later,
// and 0 while it waits on a peer of its own (that wait is bounded the same
// way). A follower judges a peer by it rather than by its own last byte,
// which in a chain is the same instant for every node.
const idleHeader = "X-Llmgw-Fetching-Idle"

// followHeader, on a request to a peer, says the asking node follows an
// entry being fetched as its files grow: the peer then answers the
// manifest (marked fetching) and the files' bytes so far, following them
// until they are whole, rather than a 503. A node that does not send it
// (an older agent) is answered 503 until the entry is complete.
const followHeader = "X-Llmgw-Follow"

// peerFile is a file in an entry's manifest as served to peers.
type peerFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"`
}

// peerManifest is an entry's manifest as served to peers: the mirror's
// shape, plus whether the peer is still fetching it (its sha256s then are
// the source's listing's, absent where the source gives none).
type peerManifest struct {
	Source   string     `json:"source"`
	Fetching bool       `json:"fetching,omitempty"`
	Files    []peerFile `json:"files"`
}

// PeerHandler serves the cache's entries to the node's peers. An entry
// still being fetched is served as it grows to a peer that follows
// (followHeader) while its download writes files, and answers 503 with its
// progress otherwise (before that, or while it waits on a peer of its own
// that does not offer to be followed), so a peer waits for it rather than
// going to the source; anything else is 404.
func (c *Cache) PeerHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "GET only", http.StatusMethodNotAllowed)
			return
		}
		rest, ok := strings.CutPrefix(r.URL.Path, PeerPrefix)
		key, file, _ := strings.Cut(rest, "/")
		if !ok || !keyRE.MatchString(key) {
			http.NotFound(w, r)
			return
		}
		e, rec, ok := c.entryRecord(key)
		if !ok {
			c.serveFetching(w, r, key, file)
			return
		}
		if file == "" {
			out := peerManifest{Source: e.Source}
			for _, f := range rec.Files {
				out.Files = append(out.Files, peerFile(f))
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(out)
			return
		}
		for _, f := range rec.Files {
			if f.Path != file || path.Clean(file) != file {
				continue
			}
			fh, err := os.Open(filepath.Join(c.opts.Dir, key, filepath.FromSlash(f.Path)))
			if err != nil {
				http.NotFound(w, r)
				return
			}
			defer fh.Close()
			if f.SHA256 != "" {
				w.Header().Set(download.SHA256Header, f.SHA256)
			}
			w.Header().Set("Content-Type", "application/octet-stream")
			http.ServeContent(w, r, "", time.Time{}, fh)
			return
		}
		http.NotFound(w, r)
	})
}

// serveFetching answers for an entry that is not complete: 404 when no
// download of it runs; the manifest or a file's bytes as they grow for a
// peer that follows, while the download writes files and every size is
// known; 503 with the progress otherwise.
func (c *Cache) serveFetching(w http.ResponseWriter, r *http.Request, key, file string) {
	cl, source, listing, ok := c.fetchingCall(key)
	if !ok {
		http.NotFound(w, r)
		return
	}
	follow := r.Header.Get(followHeader) != "" && listing != nil
	w.Header().Set(idleHeader, strconv.FormatInt(c.fetchIdle(cl).Milliseconds(), 10))
	if !follow {
		w.Header().Set(fetchingHeader, strconv.FormatInt(cl.progress.Moving(), 10))
		w.Header().Set("Retry-After", "1")
		http.Error(w, "still fetching", http.StatusServiceUnavailable)
		return
	}
	if file == "" {
		out := peerManifest{Source: source, Fetching: true}
		for _, f := range listing {
			out.Files = append(out.Files, peerFile{Path: f.Path, Size: f.Size, SHA256: f.SHA256})
		}
		w.Header().Set(fetchingHeader, strconv.FormatInt(cl.progress.Moving(), 10))
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
		return
	}
	for _, f := range listing {
		if f.Path == file && path.Clean(file) == file {
			c.serveGrowing(w, r, cl, key, f)
			return
		}
	}
	http.NotFound(w, r)
}

// fetchingCall is the running download of the source with key, and its
// listing with every size known while it writes files (nil otherwise: a
// single URL's size is learnt from its first answer).
func (c *Cache) fetchingCall(key string) (*call, string, []download.File, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for src, cl := range c.inflight {
		if Key(src) != key || cl.abandoned {
			continue
		}
		if cl.listing == nil {
			return cl, src, nil, true
		}
		files := slices.Clone(cl.listing)
		for i := range files {
			if files[i].Size >= 0 {
				continue
			}
			if total := cl.progress.Total(); len(files) == 1 && total >= 0 {
				files[i].Size = total
				continue
			}
			return cl, src, nil, true
		}
		return cl, src, files, true
	}
	return nil, "", nil, false
}

// serveGrowing sends f's bytes from the Range asked for (bytes=N- or none)
// as the download writes them: from the entry once complete, from its
// landed file in the partial directory, or from its partial file, waiting
// at the end of what is written for more. The answer announces the whole
// size; the connection is cut when the download ends without f whole, when
// it stops writing files to wait on a peer of its own (the follower then
// waits on this node's 503 as long as that peer's bytes grow), or when it
// moved no byte for StallAfter, counted from its move to the source it
// fetches from now if later (the follower then resumes elsewhere). The
// bytes are not verified yet: the peer checks them against the source's
// sha256 or this node's record once complete.
func (c *Cache) serveGrowing(w http.ResponseWriter, r *http.Request, cl *call, key string, f download.File) {
	var start int64
	ranged := false
	if rg := r.Header.Get("Range"); rg != "" {
		if v, ok := strings.CutPrefix(rg, "bytes="); ok && strings.HasSuffix(v, "-") {
			if n, err := strconv.ParseInt(strings.TrimSuffix(v, "-"), 10, 64); err == nil && n >= 0 {
				start, ranged = n, true
			}
		}
	}
	w.Header().Set("Accept-Ranges", "bytes")
	w.Header().Set("Content-Type", "application/octet-stream")
	if f.SHA256 != "" {
		w.Header().Set(download.SHA256Header, f.SHA256)
	}
	if ranged && start >= f.Size {
		w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", f.Size))
		http.Error(w, "range not satisfiable", http.StatusRequestedRangeNotSatisfiable)
		return
	}
	w.Header().Set("Content-Length", strconv.FormatInt(f.Size-start, 10))
	if ranged {
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, f.Size-1, f.Size))
		w.WriteHeader(http.StatusPartialContent)
	} else {
		w.WriteHeader(http.StatusOK)
	}
	if r.Method == http.MethodHead {
		return
	}
	rel := filepath.FromSlash(f.Path)
	landed := filepath.Join(c.opts.Dir, "."+key+partialSuffix, rel)
	candidates := []string{filepath.Join(c.opts.Dir, key, rel), landed, download.PartialName(landed)}
	var fh *os.File
	defer func() {
		if fh != nil {
			fh.Close()
		}
	}()
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 1<<20)
	off := start
	ended := false
	for off < f.Size {
		changed := cl.progress.Changed() // before reading: no write is missed
		if fh == nil {
			for i, p := range candidates {
				h, err := os.Open(p)
				if err != nil {
					continue
				}
				// A whole file must have the listed size: one that does
				// not is left from an earlier run, about to be replaced.
				if st, err := h.Stat(); i < len(candidates)-1 && (err != nil || st.Size() != f.Size) {
					h.Close()
					continue
				}
				fh = h
				break
			}
		}
		if fh != nil {
			n, err := fh.ReadAt(buf[:min(int64(len(buf)), f.Size-off)], off)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					return // the peer went away
				}
				off += int64(n)
				continue
			}
			if err != nil && !errors.Is(err, io.EOF) {
				c.log.Warn("serving a file being fetched to a peer", "key", key, "file", f.Path, "err", err)
				panic(http.ErrAbortHandler)
			}
		}
		waiting, idle := c.fetchState(cl)
		if ended || waiting || idle > c.opts.StallAfter {
			// The download ended without the file whole, waits on a peer
			// of its own, or moved no byte for StallAfter (a move to
			// another source counts as a move): cut, so the follower asks
			// how this node fares and waits on it or resumes elsewhere.
			panic(http.ErrAbortHandler)
		}
		if flusher != nil {
			flusher.Flush()
		}
		select {
		case <-r.Context().Done():
			return
		case <-cl.done:
			ended = true // read once more: the last bytes may have landed
		case <-changed:
		case <-time.After(100 * time.Millisecond): // a rename moves no byte
		}
	}
}

// entryRecord is a complete entry and its record.
func (c *Cache) entryRecord(key string) (Entry, record, bool) {
	e, ok := c.entry(key)
	if !ok {
		return Entry{}, record{}, false
	}
	b, err := os.ReadFile(filepath.Join(c.opts.Dir, key, CompleteFile))
	if err != nil {
		return Entry{}, record{}, false
	}
	var rec record
	if json.Unmarshal(b, &rec) != nil {
		return Entry{}, record{}, false
	}
	return e, rec, true
}

// PeerTLS is the TLS the node's peers are spoken with: the node's own
// certificate both ways, and only certificates of the cluster CA that carry
// the client-auth usage (node identities) accepted, by the server and by the
// client alike. The client checks the peer's name (its certificate's
// common name) itself: node certificates name no host.
func PeerTLS(caFile, certFile, keyFile string) (server, client func(node string) *tls.Config, err error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("loading the node certificate for peers: %w", err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the cluster CA for peers: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, nil, fmt.Errorf("%s holds no certificate", caFile)
	}
	srv := &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: roots, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	server = func(string) *tls.Config { return srv }
	client = func(node string) *tls.Config {
		return &tls.Config{
			Certificates:       []tls.Certificate{cert},
			MinVersion:         tls.VersionTLS12,
			InsecureSkipVerify: true, // verified below: the chain, the usage, the node's name
			VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
				if len(raw) == 0 {
					return errors.New("the peer presented no certificate")
				}
				leaf, err := x509.ParseCertificate(raw[0])
				if err != nil {
					return err
				}
				inter := x509.NewCertPool()
				for _, r := range raw[1:] {
					if c, err := x509.ParseCertificate(r); err == nil {
						inter.AddCert(c)
					}
				}
				if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
					return fmt.Errorf("peer certificate: %w", err)
				}
				if leaf.Subject.CommonName != node {
					return fmt.Errorf("peer certificate names %q, not node %q", leaf.Subject.CommonName, node)
				}
				return nil
			},
		}
	}
	return server, client, nil
}

// fromPeer fills dir with src's files from peer, as from a mirror,
// resuming what dir holds. A peer still fetching them itself is followed:
// its files are read as they grow, so the two transfers run together (a
// peer that does not offer that, an older agent, or that does not know
// every size yet is waited for as long as its bytes grow), and so is a
// followed peer that stops writing mid-file to wait on a source of its
// own: it is followed again, each file resumed by Range from the bytes
// held, once it writes again, and left once it moved no byte for
// StallAfter. Its error says
// why the peer could not serve; the partial files stay for the next
// source to resume, and the files that landed unchecked (below) are
// deleted.
//
// want is the source's own listing: the peer's manifest must name the same
// files at the same sizes, and every file is verified against the sha256
// the source gives (a peer that gives none, or another, for a file the
// source gives one for is refused), so a peer can serve no bytes the source
// would not have.
//
// cl, when not nil, is the call the fetch runs for: the peers following
// it are answered 503 with its progress while it waits on peer, and
// follow its files once it writes them.
func (c *Cache) fromPeer(ctx context.Context, peer Peer, key string, dir string, want []download.File, p *download.Progress, cl *call) (_ []download.Landed, err error) {
	if c.opts.PeerClient == nil {
		return nil, errors.New("no peer TLS configured")
	}
	client := &http.Client{Transport: followTransport{&http.Transport{TLSClientConfig: c.opts.PeerClient(peer.Node), ForceAttemptHTTP2: false}}}
	defer client.CloseIdleConnections()
	base := (&url.URL{Scheme: "https", Host: peer.Address, Path: PeerPrefix + key + "/"}).String()
	// A given p is its call's, begun when the call was made (fetch).
	if p == nil {
		p = c.newProgress()
		p.Begin()
	}
	// w is how this node watches the peer: when a byte last came from it,
	// or the bytes it reports last changed.
	w := &peerWatch{last: -1, moved: time.Now()}
	if err := c.waitPeer(ctx, client, base, peer, p, cl, w, nil); err != nil {
		return nil, err
	}
	d := &download.Downloader{
		Upstreams:    download.Upstreams{Client: client, UserAgent: buildinfo.UserAgent("llmgw-agent")},
		MaxFailures:  2,
		RetryDelay:   50 * time.Millisecond,
		StallTimeout: c.opts.StallAfter,
		FreeBytes:    c.opts.FreeBytes,
		Logger:       c.log,
		OnBytes:      func(int) { w.touch() },
	}
	files, err := d.List(ctx, base, p)
	if err != nil {
		return nil, fmt.Errorf("peer %s: %w", peer.Node, err)
	}
	if err := matchSource(files, want); err != nil {
		return nil, fmt.Errorf("peer %s: %w", peer.Node, err)
	}
	// A file neither the source nor the peer's manifest gives a sha256 for
	// comes from a peer still fetching it: its bytes are checked against
	// the peer's record once the peer's entry is complete, as they would
	// have been had it been complete from the start. Until then they are
	// listed as not checked (on disk before the first of them lands), and
	// deleted should this fetch end without the check.
	var unchecked []int
	var paths []string
	for i, f := range files {
		if f.SHA256 == "" {
			unchecked = append(unchecked, i)
			paths = append(paths, f.Path)
		}
	}
	if len(paths) > 0 {
		if err := markUnchecked(dir, paths); err != nil {
			return nil, err
		}
		defer func() {
			if err == nil {
				return
			}
			for _, path := range paths {
				if rerr := removeLanded(dir, path); rerr != nil {
					c.log.Warn("deleting a file a peer sent that was not checked", "path", path, "err", rerr)
				}
			}
		}()
	}
	// The files this call landed, with their sha256s: a pause of the peer
	// costs another Fetch, which finds them here rather than reading and
	// hashing every one of them again.
	known := map[string]knownFile{}
	have := func(final string, f download.File) (string, bool) {
		if k, ok := known[f.Path]; ok {
			if st, err := os.Stat(final); err == nil && st.Mode().IsRegular() && st.Size() == k.size && st.ModTime().Equal(k.mtime) {
				return k.sha256, true
			}
		}
		return c.haveLanded(final, f)
	}
	var landed []download.Landed
	for {
		c.followable(cl, want)
		landed, err = d.Fetch(ctx, dir, files, p, have)
		for _, l := range landed {
			if st, serr := os.Stat(filepath.Join(dir, filepath.FromSlash(l.Path))); serr == nil {
				known[l.Path] = knownFile{sha256: l.SHA256, size: st.Size(), mtime: st.ModTime()}
			}
		}
		if err == nil {
			break
		}
		if ctx.Err() != nil || download.IsPermanent(err) {
			return nil, fmt.Errorf("peer %s: %w", peer.Node, err)
		}
		// The answer was cut or refused mid-way: the peer may have
		// stopped writing to wait on a source of its own, or stalled.
		// The bytes held stay; it is followed again, each file resumed
		// by Range from where it is, once its bytes move, and left for
		// the next source once they have not for StallAfter.
		held := p.Bytes()
		c.log.Info("a followed peer stopped sending, waiting on it", "peer", peer.Node, "key", key, "held_bytes", held, "err", err)
		if werr := c.waitPeer(ctx, client, base, peer, p, cl, w, err); werr != nil {
			if ctx.Err() == nil {
				c.log.Warn("giving up on a followed peer, the next source resumes from the bytes held", "peer", peer.Node, "key", key, "held_bytes", held, "err", werr)
			}
			return nil, werr
		}
		c.log.Info("following a peer again", "peer", peer.Node, "key", key, "held_bytes", held)
	}
	if len(unchecked) > 0 {
		if err := c.checkPeerRecord(ctx, client, base, peer, landed, unchecked); err != nil {
			return nil, fmt.Errorf("peer %s: %w", peer.Node, err)
		}
	}
	return landed, nil
}

// knownFile is a file a fetch landed: its sha256, and the size and
// modification time it had then.
type knownFile struct {
	sha256 string
	size   int64
	mtime  time.Time
}

// peerWatch is when a followed peer last moved: a byte came from it, or
// the bytes it reports changed.
type peerWatch struct {
	mu    sync.Mutex
	last  int64 // the bytes it last reported, -1 when none is known
	moved time.Time
	// complete is set once the peer said its entry was complete: a
	// fetch from it that fails after that (the downloader gave up on it,
	// MaxFailures attempts in a row moving no byte) is the peer's, and
	// it is left (waitPeer).
	complete bool
}

func (w *peerWatch) touch() {
	w.mu.Lock()
	w.moved = time.Now()
	w.mu.Unlock()
}

// saw records the bytes the peer reports and says whether they changed
// since it last reported any.
func (w *peerWatch) saw(n int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	changed := w.last >= 0 && n != w.last
	w.last = n
	if changed {
		w.moved = time.Now()
	}
	return changed
}

func (w *peerWatch) idle() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return time.Since(w.moved)
}

// fetchIdle is how long cl's download has moved nothing (idleHeader): 0
// while it waits on a peer of its own (that wait is bounded by the
// peer's account), else its idle clock.
func (c *Cache) fetchIdle(cl *call) time.Duration {
	if waiting, idle := c.fetchState(cl); !waiting {
		return idle
	}
	return 0
}

// fetchState says whether cl's download waits on a peer of its own
// (waitPeer; cl.waiting is the one record of that fact) and how long it
// has moved nothing by its idle clock (download.Progress.Idle). A
// download that waits says it is not idle (fetchIdle) and cuts the
// answers its followers follow it with (serveGrowing), which then ask how
// it fares and wait on it.
func (c *Cache) fetchState(cl *call) (waiting bool, idle time.Duration) {
	c.mu.Lock()
	waiting = cl.waiting > 0
	c.mu.Unlock()
	return waiting, cl.progress.Idle()
}

// waitingOn marks cl's download waiting on a peer (idleHeader), or done
// waiting: it goes on from now, with that peer or the next source, and
// its idle clock starts again (download.Progress.Moved). cl may be nil.
func (c *Cache) waitingOn(cl *call, waiting bool) {
	if cl == nil {
		return
	}
	c.mu.Lock()
	if waiting {
		cl.waiting++
	} else {
		cl.waiting--
	}
	c.mu.Unlock()
	if !waiting {
		cl.progress.Moved()
	}
}

// peerGrace is how long, at least, a followed peer that cut its answer is
// waited on for its bytes to move again: a quarter of stall_after. A chain
// of followers is cut all at once, each node then deciding whether to
// wait on its peer or leave it; the grace lets a node's peer reach its
// own decision (it then says it waits, or moves) before the node judges
// it.
func peerGrace(stallAfter time.Duration) time.Duration { return stallAfter / 4 }

// waitPeer asks peer how far its entry is every PeerPoll until it can be
// copied or followed: at once when complete, and for a peer still
// fetching, at once the first time (resumed false) or once the bytes it
// reports move (resumed, after an answer was cut: it wrote nothing for a
// while). A peer answering 503 (before it writes files, or while it waits
// on a peer of its own) is waited for as long as the bytes it reports
// grow; they are reported as this fetch's meanwhile, so the wait is neither
// seen as a stall nor as a fetch that moves nothing. A peer whose fetch
// moved nothing for StallAfter is given up, a resumed one no sooner than
// peerGrace after the wait began: by the peer's own account (idleHeader),
// or, from an agent that gives none, by w (when it last moved as seen from
// here). So is a peer that does not answer within StallAfter. failed is
// the error that cut the answer (resumed), nil before the first fetch. A
// peer that was complete before its files failed is given up with that
// error: what fails then is the peer, not its growing entry. One still
// fetching when they failed is followed once more when it is complete.
func (c *Cache) waitPeer(ctx context.Context, client *http.Client, base string, peer Peer, p *download.Progress, cl *call, w *peerWatch, failed error) error {
	resumed := failed != nil
	began := time.Now()
	c.waitingOn(cl, true)
	defer c.waitingOn(cl, false)
	if resumed {
		w.mu.Lock()
		w.last = -1 // what it reported before the transfer says nothing of now
		w.mu.Unlock()
	}
	for {
		hctx, cancel := context.WithTimeout(ctx, c.opts.StallAfter)
		req, err := http.NewRequestWithContext(hctx, http.MethodHead, base, nil)
		if err != nil {
			cancel()
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			cancel()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("peer %s: %w", peer.Node, err)
		}
		resp.Body.Close()
		cancel()
		if resp.StatusCode == http.StatusNotFound && !resumed && time.Since(began) < c.opts.PeerStartGrace {
			// Not begun yet, perhaps: named in the pass that told it to
			// fetch, it may not have had its order. Asked again.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(c.opts.PeerPoll):
			}
			continue
		}
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusServiceUnavailable {
			return fmt.Errorf("peer %s: %s", peer.Node, resp.Status)
		}
		fetching := resp.Header.Get(fetchingHeader)
		var done int64
		if fetching != "" {
			if done, err = strconv.ParseInt(fetching, 10, 64); err != nil || done < 0 {
				return fmt.Errorf("peer %s: %s %q is not a count of bytes", peer.Node, fetchingHeader, fetching)
			}
		}
		if resp.StatusCode == http.StatusOK {
			if fetching == "" {
				if resumed && w.complete {
					return fmt.Errorf("peer %s: its entry is complete and sending it failed: %w", peer.Node, failed)
				}
				w.complete = true
				return nil
			}
			if w.saw(done) || !resumed {
				return nil
			}
		} else {
			// 503: writing nothing while it waits, this node has nothing
			// for its own followers to follow: they wait on it as it
			// waits on peer.
			c.followable(cl, nil)
			w.saw(done)
			p.Elsewhere(done)
		}
		idle := w.idle()
		if h := resp.Header.Get(idleHeader); h != "" {
			// From an agent that gives none, w's view stands.
			ms, err := strconv.ParseInt(h, 10, 64)
			if err != nil || ms < 0 {
				return fmt.Errorf("peer %s: %s %q is not a count of milliseconds", peer.Node, idleHeader, h)
			}
			idle = time.Duration(ms) * time.Millisecond
		}
		if idle > c.opts.StallAfter && (!resumed || time.Since(began) >= peerGrace(c.opts.StallAfter)) {
			return fmt.Errorf("peer %s: its own fetch moved no byte for %s", peer.Node, idle.Round(time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(c.opts.PeerPoll):
		}
	}
}

// followTransport asks a peer to serve an entry it is still fetching as it
// grows (followHeader).
type followTransport struct{ base *http.Transport }

func (t followTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(followHeader, "1")
	return t.base.RoundTrip(r)
}

func (t followTransport) CloseIdleConnections() { t.base.CloseIdleConnections() }

// checkPeerRecord waits for peer's entry to be complete (as long as the
// peer says it is fetching, and no longer than StallAfter) and checks the
// landed files at the given indexes against the sha256 its record gives.
// It returns an error for a file it cannot check (the peer's fetch failed
// or went away, its record names another sha256); fromPeer then deletes
// every file it took unchecked, so the next source fetches them.
func (c *Cache) checkPeerRecord(ctx context.Context, client *http.Client, base string, peer Peer, landed []download.Landed, idx []int) error {
	deadline := time.Now().Add(c.opts.StallAfter)
	var m peerManifest
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("its record could not be read to check the bytes it sent while fetching: %w", err)
		}
		m = peerManifest{}
		derr := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&m)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK && derr == nil && !m.Fetching:
		case resp.StatusCode == http.StatusOK && derr == nil, resp.StatusCode == http.StatusServiceUnavailable:
			if time.Now().After(deadline) {
				return fmt.Errorf("its fetch did not complete within %s: the bytes it sent while fetching are not verified", c.opts.StallAfter)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(min(c.opts.PeerPoll, 50*time.Millisecond)):
			}
			continue
		default:
			return fmt.Errorf("its fetch did not complete (%s): the bytes it sent while fetching are not verified", resp.Status)
		}
		break
	}
	sums := map[string]string{}
	for _, f := range m.Files {
		sums[f.Path] = f.SHA256
	}
	for _, i := range idx {
		l := landed[i]
		if want := sums[l.Path]; want == "" || want != l.SHA256 {
			return fmt.Errorf("%s: %w: its record says %q, the bytes it sent while fetching hash to %s", l.Path, download.ErrVerify, want, l.SHA256)
		}
	}
	return nil
}

// matchSource checks a peer's listing against the source's and gives each
// file the source's sha256 to be verified against: the peer must offer the
// source's files, at their sizes, with the same sha256 wherever the source
// gives one.
func matchSource(files, want []download.File) error {
	if len(files) != len(want) {
		return fmt.Errorf("its entry has %d files, the source %d", len(files), len(want))
	}
	byPath := make(map[string]download.File, len(want))
	for _, w := range want {
		byPath[w.Path] = w
	}
	for i, f := range files {
		w, ok := byPath[f.Path]
		switch {
		case !ok:
			return fmt.Errorf("its entry has %s, which the source does not", f.Path)
		case w.Size >= 0 && f.Size != w.Size:
			return fmt.Errorf("its %s is %d bytes, the source's %d", f.Path, f.Size, w.Size)
		case w.SHA256 != "" && f.SHA256 != w.SHA256:
			return fmt.Errorf("its %s has sha256 %q, the source's %s", f.Path, f.SHA256, w.SHA256)
		}
		if w.SHA256 != "" {
			files[i].SHA256 = w.SHA256
		}
	}
	return nil
}

// haveLanded says a file under its own name landed in an earlier run, and
// gives its sha256 computed from its bytes: a file whose bytes do not hash
// to the sha256 expected is fetched again.
func (c *Cache) haveLanded(final string, f download.File) (string, bool) {
	st, err := os.Stat(final)
	if err != nil || !st.Mode().IsRegular() || (f.Size >= 0 && st.Size() != f.Size) {
		return "", false
	}
	fh, err := os.Open(final)
	if err != nil {
		return "", false
	}
	defer fh.Close()
	if c.hashingLanded != nil {
		c.hashingLanded(final)
	}
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		return "", false
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if f.SHA256 != "" && sum != f.SHA256 {
		return "", false
	}
	return sum, true
}
