// Package hffake is a Hugging Face hub stand-in for tests: the few paths of
// the hub's published HTTP API a weights download uses, answered the way the
// hub answers them.
//
//	GET /api/models/{org}/{repo}/revision/{rev}       model info: id, sha (the commit), siblings
//	GET /api/models/{org}/{repo}/tree/{rev}?recursive=true
//	                                                  the files, paginated with a Link rel="next" header;
//	                                                  LFS files carry lfs.oid, their sha256
//	GET|HEAD /{org}/{repo}/resolve/{rev}/{path}       an LFS file: 302 to a CDN path with X-Linked-Etag
//	                                                  (the sha256, quoted), X-Linked-Size and X-Repo-Commit;
//	                                                  a small git file: 200 with its git blob id as ETag
//	GET|HEAD /cdn/lfs/{sha256}                        the bytes, Range supported, ETag the sha256
//
// A gated repository answers 401 without "Authorization: Bearer <Token>"; a
// missing repository, revision or file answers 404 with X-Error-Code
// (RepoNotFound, RevisionNotFound, EntryNotFound). A test can make the next
// downloads of a file stop after n bytes (the connection is cut), or serve
// it with one byte flipped while the headers keep the true sha256.
package hffake

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Token is the bearer token gated repositories accept.
const Token = "hf_fake_token_for_tests"

type file struct {
	data []byte
	lfs  bool
}

type revision struct {
	commit string
	files  map[string]file
}

type repo struct {
	gated     bool
	revisions map[string]*revision // by branch name and by commit
}

type cut struct {
	after int64
	times int
	hang  bool // keep the connection open without sending instead of closing it
}

// Server is a running stand-in.
type Server struct {
	*httptest.Server
	// PageSize is how many entries a tree page holds (default 50).
	PageSize int

	mu       sync.Mutex
	repos    map[string]*repo
	blobs    map[string][]byte // sha256 -> data
	cuts     map[string]*cut   // sha256 -> pending cuts
	corrupt  map[string]bool   // sha256 -> flip a byte
	ranges   []string          // Range headers the CDN saw, "" for none
	cdnCalls int
}

// New starts a stand-in that closes when the test ends.
func New(t testing.TB) *Server {
	s := &Server{PageSize: 50, repos: map[string]*repo{}, blobs: map[string][]byte{}, cuts: map[string]*cut{}, corrupt: map[string]bool{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// Endpoint is what HF_ENDPOINT would be set to.
func (s *Server) Endpoint() string { return s.URL }

// AddFile puts data at path in repo (org/name) at revision (a branch name),
// as an LFS file (weights) or a plain git file (config.json).
func (s *Server) AddFile(repoID, rev, path string, data []byte, lfs bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repos[repoID]
	if r == nil {
		r = &repo{revisions: map[string]*revision{}}
		s.repos[repoID] = r
	}
	rv := r.revisions[rev]
	if rv == nil {
		rv = &revision{files: map[string]file{".gitattributes": {data: []byte("*.gguf filter=lfs diff=lfs merge=lfs -text\n")}}}
		r.revisions[rev] = rv
	}
	delete(r.revisions, rv.commit)
	rv.files[path] = file{data: bytes.Clone(data), lfs: lfs}
	rv.commit = commitOf(rev, rv.files)
	r.revisions[rv.commit] = rv
	if lfs {
		s.blobs[sha256Hex(data)] = bytes.Clone(data)
	}
}

// Gate makes repo answer 401 to requests without the token.
func (s *Server) Gate(repoID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.repos[repoID].gated = true
}

// Commit is the commit a branch of repo points to.
func (s *Server) Commit(repoID, rev string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.repos[repoID].revisions[rev].commit
}

// CutAfter makes the next times downloads of the LFS file holding data stop
// after n bytes of the answer's body: the connection is closed mid-transfer.
func (s *Server) CutAfter(data []byte, n int64, times int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cuts[sha256Hex(data)] = &cut{after: n, times: times}
}

// StallAfter makes the next times downloads of the LFS file holding data
// send n bytes of the body and then nothing, the connection left open
// until the client gives up: a wedged transfer.
func (s *Server) StallAfter(data []byte, n int64, times int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cuts[sha256Hex(data)] = &cut{after: n, times: times, hang: true}
}

// Corrupt makes every download of the LFS file holding data carry one
// flipped byte, while its headers still give the true sha256.
func (s *Server) Corrupt(data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.corrupt[sha256Hex(data)] = true
}

// Ranges returns the Range header of every CDN request so far ("" when none).
func (s *Server) Ranges() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ranges)
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// gitBlobID is git's object id of a blob, as the hub reports for non-LFS files.
func gitBlobID(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

func commitOf(rev string, files map[string]file) string {
	h := sha1.New()
	h.Write([]byte(rev))
	for _, p := range slices.Sorted(maps.Keys(files)) {
		fmt.Fprintf(h, "%s %s\n", p, gitBlobID(files[p].data))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func hubError(w http.ResponseWriter, code int, errCode, msg string) {
	if errCode != "" {
		w.Header().Set("X-Error-Code", errCode)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// lookup finds repo and revision, answering the error itself when it fails.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request, repoID, rev string) (*revision, bool) {
	rp := s.repos[repoID]
	if rp == nil {
		hubError(w, http.StatusUnauthorized, "RepoNotFound", "Repository Not Found for url: "+r.URL.String()+".")
		return nil, false
	}
	if rp.gated && r.Header.Get("Authorization") != "Bearer "+Token {
		hubError(w, http.StatusUnauthorized, "GatedRepo", "Access to model "+repoID+" is restricted. You must have access to it and be authenticated to access it.")
		return nil, false
	}
	rv := rp.revisions[rev]
	if rv == nil {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return nil, false
	}
	return rv, true
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/api/models/"):
		s.serveAPI(w, r, strings.TrimPrefix(p, "/api/models/"))
	case strings.HasPrefix(p, "/cdn/lfs/"):
		s.serveCDN(w, r, strings.TrimPrefix(p, "/cdn/lfs/"))
	default:
		s.serveResolve(w, r, strings.TrimPrefix(p, "/"))
	}
}

// serveAPI answers {org}/{repo}/revision/{rev} and {org}/{repo}/tree/{rev}.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request, rest string) {
	parts := strings.SplitN(rest, "/", 4)
	if len(parts) < 4 || r.Method != http.MethodGet {
		hubError(w, http.StatusNotFound, "", "Not Found")
		return
	}
	repoID, kind, rev := parts[0]+"/"+parts[1], parts[2], parts[3]
	s.mu.Lock()
	defer s.mu.Unlock()
	rv, ok := s.lookup(w, r, repoID, rev)
	if !ok {
		return
	}
	paths := slices.Sorted(maps.Keys(rv.files))
	switch kind {
	case "revision":
		siblings := []map[string]string{}
		for _, p := range paths {
			siblings = append(siblings, map[string]string{"rfilename": p})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": repoID, "modelId": repoID, "sha": rv.commit, "private": false,
			"gated": s.repos[repoID].gated, "lastModified": time.Unix(0, 0).UTC().Format(time.RFC3339), "siblings": siblings,
		})
	case "tree":
		start, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
		end := min(start+s.PageSize, len(paths))
		entries := []map[string]any{}
		for _, p := range paths[min(start, len(paths)):end] {
			f := rv.files[p]
			e := map[string]any{"type": "file", "path": p, "size": len(f.data), "oid": gitBlobID(f.data)}
			if f.lfs {
				e["lfs"] = map[string]any{"oid": sha256Hex(f.data), "size": len(f.data), "pointerSize": 134}
			}
			entries = append(entries, e)
		}
		if end < len(paths) {
			q := r.URL.Query()
			q.Set("cursor", strconv.Itoa(end))
			w.Header().Set("Link", "<"+s.URL+r.URL.Path+"?"+q.Encode()+`>; rel="next"`)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(entries)
	default:
		hubError(w, http.StatusNotFound, "", "Not Found")
	}
}

// serveResolve answers {org}/{repo}/resolve/{rev}/{path}.
func (s *Server) serveResolve(w http.ResponseWriter, r *http.Request, rest string) {
	parts := strings.SplitN(rest, "/", 5)
	if len(parts) < 5 || parts[2] != "resolve" || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		hubError(w, http.StatusNotFound, "", "Not Found")
		return
	}
	repoID, rev, path := parts[0]+"/"+parts[1], parts[3], parts[4]
	s.mu.Lock()
	rv, ok := s.lookup(w, r, repoID, rev)
	if !ok {
		s.mu.Unlock()
		return
	}
	f, found := rv.files[path]
	commit := rv.commit
	s.mu.Unlock()
	if !found {
		hubError(w, http.StatusNotFound, "EntryNotFound", path+" does not exist on \""+rev+"\"")
		return
	}
	w.Header().Set("X-Repo-Commit", commit)
	if !f.lfs {
		w.Header().Set("ETag", `"`+gitBlobID(f.data)+`"`)
		http.ServeContent(w, r, "", time.Unix(0, 0), bytes.NewReader(f.data))
		return
	}
	sum := sha256Hex(f.data)
	w.Header().Set("X-Linked-Etag", `"`+sum+`"`)
	w.Header().Set("X-Linked-Size", strconv.Itoa(len(f.data)))
	w.Header().Set("ETag", `"`+gitBlobID(f.data)+`"`)
	w.Header().Set("Location", "/cdn/lfs/"+sum+"?X-Amz-Signature=fake&response-content-disposition=attachment")
	w.WriteHeader(http.StatusFound)
}

// serveCDN answers /cdn/lfs/{sha256}, cutting or corrupting as asked.
func (s *Server) serveCDN(w http.ResponseWriter, r *http.Request, sum string) {
	s.mu.Lock()
	data, ok := s.blobs[sum]
	s.ranges = append(s.ranges, r.Header.Get("Range"))
	s.cdnCalls++
	var cutAt int64 = -1
	hang := false
	if c := s.cuts[sum]; c != nil && c.times > 0 && r.Method == http.MethodGet {
		c.times--
		cutAt, hang = c.after, c.hang
	}
	corrupt := s.corrupt[sum]
	s.mu.Unlock()
	if !ok {
		http.Error(w, "NoSuchKey", http.StatusNotFound)
		return
	}
	if corrupt {
		data = bytes.Clone(data)
		data[len(data)/2] ^= 0xff
	}
	w.Header().Set("ETag", `"`+sum+`"`)
	w.Header().Set("Content-Type", "application/octet-stream")
	if cutAt >= 0 {
		w = &cuttingWriter{ResponseWriter: w, left: cutAt, hang: hang, done: r.Context().Done()}
	}
	http.ServeContent(w, r, "", time.Unix(0, 0), bytes.NewReader(data))
}

// cuttingWriter passes left bytes of the body through, then closes the
// connection under the client, or with hang holds it open, silent, until
// the client goes away.
type cuttingWriter struct {
	http.ResponseWriter
	left int64
	hang bool
	done <-chan struct{}
}

func (c *cuttingWriter) Write(b []byte) (int, error) {
	if int64(len(b)) <= c.left {
		c.left -= int64(len(b))
		return c.ResponseWriter.Write(b)
	}
	_, _ = c.ResponseWriter.Write(b[:c.left])
	c.left = 0
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
	if c.hang {
		<-c.done
	}
	panic(http.ErrAbortHandler)
}
