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
	"strconv"
	"strings"
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

// PeerHandler serves the cache's complete entries to the node's peers. An
// entry still being fetched answers 503 with its progress, so a peer waits
// for it rather than going to the source; anything else is 404.
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
			if done, ok := c.fetching(key); ok {
				w.Header().Set(fetchingHeader, strconv.FormatInt(done, 10))
				w.Header().Set("Retry-After", "1")
				http.Error(w, "still fetching", http.StatusServiceUnavailable)
				return
			}
			http.NotFound(w, r)
			return
		}
		if file == "" {
			type mf struct {
				Path   string `json:"path"`
				Size   int64  `json:"size"`
				SHA256 string `json:"sha256,omitempty"`
			}
			out := struct {
				Source string `json:"source"`
				Files  []mf   `json:"files"`
			}{Source: e.Source}
			for _, f := range rec.Files {
				out.Files = append(out.Files, mf(f))
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

// fetching reports whether a download of the source with key runs, and its
// bytes so far.
func (c *Cache) fetching(key string) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for src, cl := range c.inflight {
		if Key(src) == key && !cl.abandoned {
			if cl.progress != nil {
				return cl.progress.Bytes(), true
			}
			return 0, true
		}
	}
	return 0, false
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

// fromPeer fills dir with src's files from peer: it waits while the peer
// is still fetching them itself (as long as its bytes grow), then fetches
// its manifest and files as from a mirror, resuming what dir holds. Its
// error says why the peer could not serve; the partial files stay for the
// next source to resume.
//
// want is the source's own listing: the peer's manifest must name the same
// files at the same sizes, and every file is verified against the sha256
// the source gives (a peer that gives none, or another, for a file the
// source gives one for is refused), so a peer can serve no bytes the source
// would not have.
func (c *Cache) fromPeer(ctx context.Context, peer Peer, key string, dir string, want []download.File, p *download.Progress) ([]download.Landed, error) {
	if c.opts.PeerClient == nil {
		return nil, errors.New("no peer TLS configured")
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: c.opts.PeerClient(peer.Node), ForceAttemptHTTP2: false}}
	defer client.CloseIdleConnections()
	base := (&url.URL{Scheme: "https", Host: peer.Address, Path: PeerPrefix + key + "/"}).String()
	// Wait for a peer that is fetching: its bytes must keep growing. They
	// are reported as this fetch's meanwhile, so the wait is neither seen
	// as a stall nor as a fetch that moves nothing.
	if p == nil {
		p = &download.Progress{}
	}
	p.Begin()
	var last int64 = -1
	lastMove := time.Now()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodHead, base, nil)
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, fmt.Errorf("peer %s: %w", peer.Node, err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if resp.StatusCode != http.StatusServiceUnavailable {
			return nil, fmt.Errorf("peer %s: %s", peer.Node, resp.Status)
		}
		done, _ := strconv.ParseInt(resp.Header.Get(fetchingHeader), 10, 64)
		if done != last {
			last, lastMove = done, time.Now()
		}
		p.Elsewhere(done)
		if time.Since(lastMove) > c.opts.StallAfter {
			return nil, fmt.Errorf("peer %s: its own fetch moved no byte for %s", peer.Node, c.opts.StallAfter)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(c.opts.PeerPoll):
		}
	}
	d := &download.Downloader{
		Upstreams:    download.Upstreams{Client: client, UserAgent: buildinfo.UserAgent("llmgw-agent")},
		MaxFailures:  2,
		RetryDelay:   50 * time.Millisecond,
		StallTimeout: c.opts.StallAfter,
		FreeBytes:    c.opts.FreeBytes,
		Logger:       c.log,
	}
	files, err := d.List(ctx, base, p)
	if err != nil {
		return nil, fmt.Errorf("peer %s: %w", peer.Node, err)
	}
	if err := matchSource(files, want); err != nil {
		return nil, fmt.Errorf("peer %s: %w", peer.Node, err)
	}
	landed, err := d.Fetch(ctx, dir, files, p, haveLanded)
	if err != nil {
		return nil, fmt.Errorf("peer %s: %w", peer.Node, err)
	}
	return landed, nil
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
func haveLanded(final string, f download.File) (string, bool) {
	st, err := os.Stat(final)
	if err != nil || !st.Mode().IsRegular() || (f.Size >= 0 && st.Size() != f.Size) {
		return "", false
	}
	fh, err := os.Open(final)
	if err != nil {
		return "", false
	}
	defer fh.Close()
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
