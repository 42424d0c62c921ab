package download

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// SHA256Header is the mirror's header carrying the lowercase hex sha256 of
// the whole file.
const SHA256Header = "X-Llmgw-Sha256"

// DefaultHFEndpoint is the Hugging Face hub, used when no other is named.
const DefaultHFEndpoint = "https://huggingface.co"

// File is one file a source offers.
type File struct {
	// Path is where the file lands inside the destination directory.
	Path string
	// Size is -1 when the source does not say before the download.
	Size int64
	// SHA256 is empty when the source gives none.
	SHA256 string
	// Where names the file in messages: "GET <url>" or "s3://bucket/key".
	Where string
	// HeldUnchecked says the bytes held for the file (its partial) came
	// from where nothing checked them (a peer still fetching it): they
	// are resumed only when the listing or the answer gives a sha256 the
	// whole file is then checked against, and fetched again from the
	// first byte otherwise.
	HeldUnchecked bool
	// open returns the file's bytes from offset on, or from 0 when the
	// source ignores the range (the answer's Start says which).
	open func(ctx context.Context, offset int64) (io.ReadCloser, Answer, error)
}

// Answer is what an answer says about the bytes it carries.
type Answer struct {
	Start  int64
	Total  int64  // -1 when unknown
	SHA256 string // learnt from the answer's headers, "" when none
}

// Upstreams say where sources are read and how.
type Upstreams struct {
	// Client makes the requests; nil means a client without an overall
	// timeout (files are large; stalls are watched instead).
	Client *http.Client
	// HFEndpoint is the Hugging Face hub (HF_ENDPOINT); empty is DefaultHFEndpoint.
	HFEndpoint string
	// HFToken is sent as a bearer token to the hub (and not to where it
	// redirects); never logged.
	HFToken string
	// S3 is where s3:// sources are read.
	S3 S3Config
	// UserAgent names the program and its version in every HTTP request
	// (buildinfo.UserAgent); empty leaves Go's.
	UserAgent string
}

func (u *Upstreams) client() *http.Client {
	if u.Client != nil {
		return u.Client
	}
	return &http.Client{Transport: http.DefaultTransport}
}

// S3Config is where s3:// sources are read from.
type S3Config struct {
	// Endpoint is host[:port] or a URL (http:// means no TLS); empty is AWS.
	Endpoint     string
	Region       string
	AccessKey    string
	SecretKey    string
	SessionToken string
}

// S3ConfigFromEnv reads the standard AWS variables: AWS_ENDPOINT_URL_S3 or
// AWS_ENDPOINT_URL, AWS_REGION or AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN.
func S3ConfigFromEnv(getenv func(string) string) S3Config {
	first := func(names ...string) string {
		for _, n := range names {
			if v := getenv(n); v != "" {
				return v
			}
		}
		return ""
	}
	return S3Config{
		Endpoint:     first("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
		Region:       first("AWS_REGION", "AWS_DEFAULT_REGION"),
		AccessKey:    getenv("AWS_ACCESS_KEY_ID"),
		SecretKey:    getenv("AWS_SECRET_ACCESS_KEY"),
		SessionToken: getenv("AWS_SESSION_TOKEN"),
	}
}

// List lists the files source offers: hf:org/repo[@rev]/path (one file),
// hf:org/repo[@rev] (every file of the revision, pinned to its commit),
// http(s)://…/file, http(s)://…/model/version/ (a mirror's set, by its
// manifest), s3://bucket/key and s3://bucket/prefix/ (every object under it).
func (u *Upstreams) List(ctx context.Context, source string) ([]File, error) {
	switch {
	case strings.HasPrefix(source, "hf:"):
		return u.resolveHF(ctx, strings.TrimPrefix(source, "hf:"))
	case strings.HasPrefix(source, "https://"), strings.HasPrefix(source, "http://"):
		return u.resolveURL(ctx, source)
	case strings.HasPrefix(source, "s3://"):
		return u.resolveS3(ctx, strings.TrimPrefix(source, "s3://"))
	}
	return nil, Permanent(fmt.Errorf("source %q: use hf:org/repo/file, hf:org/repo@revision, https://…, http://… or s3://bucket/key", source))
}

// IsSet reports whether source names a set of files (a directory) rather
// than one file: a URL ending in "/", hf:org/repo[@rev] without a file, an
// s3:// prefix ending in "/".
func IsSet(source string) bool {
	switch {
	case strings.HasPrefix(source, "hf:"):
		return len(strings.SplitN(strings.TrimPrefix(source, "hf:"), "/", 3)) < 3
	case strings.HasPrefix(source, "https://"), strings.HasPrefix(source, "http://"):
		if p, err := url.Parse(source); err == nil {
			return strings.HasSuffix(p.Path, "/")
		}
		return false
	case strings.HasPrefix(source, "s3://"):
		return strings.HasSuffix(source, "/")
	}
	return false
}

// LogSource is source as logs show it: a URL without its query (a signed
// URL's signature) or user info.
func LogSource(source string) string {
	if strings.HasPrefix(source, "http://") || strings.HasPrefix(source, "https://") {
		return Redact(source)
	}
	return source
}

// CleanRelPath checks a file's path inside a set: relative, no "..", no
// element starting with "." (the names a store keeps for itself).
func CleanRelPath(p string) (string, error) {
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, "\\") {
		return "", fmt.Errorf("file path %q: must be relative", p)
	}
	for el := range strings.SplitSeq(p, "/") {
		if el == "" || el == "." || el == ".." || strings.HasPrefix(el, ".") {
			return "", fmt.Errorf("file path %q: empty, '.' or '..' elements and hidden names are refused", p)
		}
	}
	return p, nil
}

// IsSHA256 reports whether s is 64 lowercase hex digits.
func IsSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// manifest is what a mirror answers for a set's URL.
type manifest struct {
	Files []struct {
		Path   string `json:"path"`
		Size   int64  `json:"size"`
		SHA256 string `json:"sha256"`
	} `json:"files"`
}

// --- http(s) ---------------------------------------------------------------

func (u *Upstreams) resolveURL(ctx context.Context, source string) ([]File, error) {
	su, err := url.Parse(source)
	if err != nil || su.Host == "" {
		return nil, Permanent(fmt.Errorf("source %q: not a URL", source))
	}
	if strings.HasSuffix(su.Path, "/") {
		return u.resolveMirrorSet(ctx, su)
	}
	name := path.Base(su.Path)
	if _, err := CleanRelPath(name); err != nil || name == "/" {
		return nil, Permanent(fmt.Errorf("source %q: the URL names no file", source))
	}
	return []File{{Path: name, Size: -1, Where: "GET " + Redact(source), open: u.httpOpener(source, nil, false)}}, nil
}

// resolveMirrorSet reads a mirror's manifest (a URL ending in "/"): every
// file of the set, with its size and sha256.
func (u *Upstreams) resolveMirrorSet(ctx context.Context, su *url.URL) ([]File, error) {
	var m manifest
	if _, err := u.getJSONLink(ctx, su.String(), nil, &m); err != nil {
		return nil, err
	}
	if len(m.Files) == 0 {
		return nil, Permanent(fmt.Errorf("%s: the manifest lists no file", Redact(su.String())))
	}
	files := make([]File, 0, len(m.Files))
	seen := map[string]bool{}
	for _, mf := range m.Files {
		rel, err := CleanRelPath(mf.Path)
		if err != nil {
			return nil, Permanent(fmt.Errorf("%s: %w", Redact(su.String()), err))
		}
		if seen[rel] {
			return nil, Permanent(fmt.Errorf("%s: the manifest lists %q twice", Redact(su.String()), rel))
		}
		seen[rel] = true
		sum := strings.ToLower(mf.SHA256)
		if sum != "" && !IsSHA256(sum) {
			return nil, Permanent(fmt.Errorf("%s: manifest file %q: sha256 %q is not 64 hex digits", Redact(su.String()), rel, mf.SHA256))
		}
		if mf.Size < 0 {
			return nil, Permanent(fmt.Errorf("%s: manifest file %q: negative size", Redact(su.String()), rel))
		}
		fu := su.JoinPath(strings.Split(rel, "/")...)
		fu.RawQuery = ""
		files = append(files, File{Path: rel, Size: mf.Size, SHA256: sum, Where: "GET " + Redact(fu.String()), open: u.httpOpener(fu.String(), nil, false)})
	}
	return files, nil
}

// httpOpener GETs target from an offset. header adds request headers (a
// token). hf says the answer is the hub's, whose ETag is the LFS sha256.
func (u *Upstreams) httpOpener(target string, header http.Header, hf bool) func(context.Context, int64) (io.ReadCloser, Answer, error) {
	return func(ctx context.Context, offset int64) (io.ReadCloser, Answer, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return nil, Answer{}, Permanent(err)
		}
		if u.UserAgent != "" {
			req.Header.Set("User-Agent", u.UserAgent)
		}
		for k, v := range header {
			req.Header[k] = v
		}
		if offset > 0 {
			req.Header.Set("Range", "bytes="+strconv.FormatInt(offset, 10)+"-")
		}
		// The sha256 a hub puts on its redirect (X-Linked-Etag) is not on the
		// CDN's answer: catch it on the way.
		var linked string
		client := *u.client()
		prev := client.CheckRedirect
		client.CheckRedirect = func(r *http.Request, via []*http.Request) error {
			if r.Response != nil && hf && linked == "" {
				linked = etagSHA256(r.Response.Header.Get("X-Linked-Etag"))
			}
			if len(via) > 0 && r.URL.Host != via[0].URL.Host {
				// The token is the hub's: not for its CDN, even on the same
				// host name behind another port.
				r.Header.Del("Authorization")
			}
			if prev != nil {
				return prev(r, via)
			}
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			return nil
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, Answer{}, fmt.Errorf("GET %s: %w", Redact(target), err)
		}
		ans := Answer{Total: -1, SHA256: linked}
		if ans.SHA256 == "" {
			ans.SHA256 = headerSHA256(resp.Header, hf)
		}
		switch resp.StatusCode {
		case http.StatusOK:
			ans.Total = resp.ContentLength
		case http.StatusPartialContent:
			start, total, ok := parseContentRange(resp.Header.Get("Content-Range"))
			if !ok {
				resp.Body.Close()
				return nil, Answer{}, fmt.Errorf("GET %s: 206 with Content-Range %q for bytes=%d-: %w", Redact(target), resp.Header.Get("Content-Range"), offset, errRestart)
			}
			ans.Start, ans.Total = start, total
		case http.StatusRequestedRangeNotSatisfiable:
			// The partial file already holds every byte (or more: start over).
			resp.Body.Close()
			_, total, _ := parseContentRange(resp.Header.Get("Content-Range"))
			if total == offset {
				ans.Start, ans.Total = offset, total
				return io.NopCloser(eofReader{}), ans, nil
			}
			return nil, Answer{}, fmt.Errorf("GET %s: 416 for bytes=%d- (the file is %d bytes): %w", Redact(target), offset, total, errRestart)
		default:
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			err := fmt.Errorf("GET %s: %s", Redact(target), resp.Status)
			if b := strings.TrimSpace(string(body)); b != "" && !strings.ContainsAny(b, "<\n") {
				err = fmt.Errorf("GET %s: %s: %s", Redact(target), resp.Status, b)
			}
			if resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusRequestTimeout {
				return nil, Answer{}, Permanent(err)
			}
			return nil, Answer{}, err
		}
		return resp.Body, ans, nil
	}
}

// headerSHA256 finds a sha256 in an answer: the mirror's own header, or
// for the hub an X-Linked-Etag or ETag that is one.
func headerSHA256(h http.Header, hf bool) string {
	if s := strings.ToLower(strings.TrimSpace(h.Get(SHA256Header))); IsSHA256(s) {
		return s
	}
	if !hf {
		return ""
	}
	if s := etagSHA256(h.Get("X-Linked-Etag")); s != "" {
		return s
	}
	return etagSHA256(h.Get("ETag"))
}

func etagSHA256(etag string) string {
	s := strings.ToLower(strings.Trim(strings.TrimPrefix(strings.TrimSpace(etag), "W/"), `"`))
	if IsSHA256(s) {
		return s
	}
	return ""
}

// parseContentRange reads "bytes START-END/TOTAL" or "bytes */TOTAL".
func parseContentRange(s string) (start, total int64, ok bool) {
	rest, found := strings.CutPrefix(s, "bytes ")
	if !found {
		return 0, -1, false
	}
	rng, tot, found := strings.Cut(rest, "/")
	if !found {
		return 0, -1, false
	}
	total = -1
	if tot != "*" {
		t, err := strconv.ParseInt(tot, 10, 64)
		if err != nil {
			return 0, -1, false
		}
		total = t
	}
	if rng == "*" {
		return 0, total, true
	}
	first, _, found := strings.Cut(rng, "-")
	if !found {
		return 0, -1, false
	}
	start, err := strconv.ParseInt(first, 10, 64)
	if err != nil {
		return 0, -1, false
	}
	return start, total, true
}

// Redact drops a URL's query and user info: signed URLs carry credentials.
func Redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparseable URL)"
	}
	p.RawQuery, p.User, p.Fragment = "", nil, ""
	return p.String()
}

// --- Hugging Face -----------------------------------------------------------

// hfSource is hf:org/repo[@revision][/path/in/repo].
type hfSource struct {
	repo, revision, file string
}

func parseHF(s string) (hfSource, error) {
	parts := strings.SplitN(s, "/", 3)
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
		return hfSource{}, fmt.Errorf("source hf:%s: use hf:org/repo/path/in/repo or hf:org/repo@revision", s)
	}
	src := hfSource{revision: "main"}
	name, rev, hasRev := strings.Cut(parts[1], "@")
	if hasRev {
		if rev == "" {
			return hfSource{}, fmt.Errorf("source hf:%s: empty revision after '@'", s)
		}
		src.revision = rev
	}
	src.repo = parts[0] + "/" + name
	if len(parts) == 3 {
		if _, err := CleanRelPath(parts[2]); err != nil {
			return hfSource{}, fmt.Errorf("source hf:%s: %w", s, err)
		}
		src.file = parts[2]
	}
	return src, nil
}

func (u *Upstreams) hfHeader() http.Header {
	h := http.Header{}
	if u.HFToken != "" {
		h.Set("Authorization", "Bearer "+u.HFToken)
	}
	return h
}

func (u *Upstreams) hfEndpoint() string {
	if u.HFEndpoint == "" {
		return DefaultHFEndpoint
	}
	return strings.TrimRight(u.HFEndpoint, "/")
}

func (u *Upstreams) hfResolveURL(repo, rev, file string) string {
	segs := strings.Split(file, "/")
	for i := range segs {
		segs[i] = url.PathEscape(segs[i])
	}
	return u.hfEndpoint() + "/" + repo + "/resolve/" + url.PathEscape(rev) + "/" + strings.Join(segs, "/")
}

func (u *Upstreams) resolveHF(ctx context.Context, s string) ([]File, error) {
	src, err := parseHF(s)
	if err != nil {
		return nil, Permanent(err)
	}
	if src.file != "" {
		target := u.hfResolveURL(src.repo, src.revision, src.file)
		return []File{{
			Path: src.file, Size: -1, Where: "GET " + target,
			open: u.httpOpener(target, u.hfHeader(), true),
		}}, nil
	}
	// A whole revision: pin the branch or tag to its commit first, so every
	// file of the set comes from the same commit.
	var info struct {
		SHA string `json:"sha"`
	}
	if _, err := u.getJSONLink(ctx, u.hfEndpoint()+"/api/models/"+src.repo+"/revision/"+url.PathEscape(src.revision), u.hfHeader(), &info); err != nil {
		return nil, err
	}
	commit := src.revision
	if info.SHA != "" {
		commit = info.SHA
	}
	type treeEntry struct {
		Type string `json:"type"`
		Path string `json:"path"`
		Size int64  `json:"size"`
		LFS  *struct {
			OID string `json:"oid"`
		} `json:"lfs"`
	}
	var files []File
	next := u.hfEndpoint() + "/api/models/" + src.repo + "/tree/" + url.PathEscape(commit) + "?recursive=true"
	for next != "" {
		var page []treeEntry
		link, err := u.getJSONLink(ctx, next, u.hfHeader(), &page)
		if err != nil {
			return nil, err
		}
		for _, e := range page {
			if e.Type != "file" {
				continue
			}
			if _, err := CleanRelPath(e.Path); err != nil {
				// .gitattributes and the like: not weights, and hidden here anyway.
				continue
			}
			rf := File{Path: e.Path, Size: e.Size}
			if e.LFS != nil && IsSHA256(e.LFS.OID) {
				rf.SHA256 = e.LFS.OID
			}
			target := u.hfResolveURL(src.repo, commit, e.Path)
			rf.Where, rf.open = "GET "+target, u.httpOpener(target, u.hfHeader(), true)
			files = append(files, rf)
		}
		if link != "" && !strings.HasPrefix(link, u.hfEndpoint()+"/") {
			return nil, Permanent(fmt.Errorf("hf:%s: the hub's next page is on another host (%s); not following it with the token", s, Redact(link)))
		}
		next = link
	}
	if len(files) == 0 {
		return nil, Permanent(fmt.Errorf("hf:%s: the revision holds no file", s))
	}
	return files, nil
}

// getJSONLink GETs target with header into v and returns the rel="next" link, if any.
func (u *Upstreams) getJSONLink(ctx context.Context, target string, header http.Header, v any) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return "", Permanent(err)
	}
	if u.UserAgent != "" {
		req.Header.Set("User-Agent", u.UserAgent)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := u.client().Do(req)
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", Redact(target), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		err := fmt.Errorf("GET %s: %s: %s", Redact(target), resp.Status, strings.TrimSpace(string(body)))
		if resp.StatusCode >= 400 && resp.StatusCode < 500 {
			return "", Permanent(err)
		}
		return "", err
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return "", fmt.Errorf("GET %s: reading the answer: %w", Redact(target), err)
	}
	return nextLink(resp.Header.Get("Link"), target), nil
}

// nextLink reads the rel="next" target of a Link header, resolved against base.
func nextLink(h, base string) string {
	for l := range strings.SplitSeq(h, ",") {
		target, params, ok := strings.Cut(strings.TrimSpace(l), ";")
		if !ok || !strings.Contains(strings.ReplaceAll(params, " ", ""), `rel="next"`) {
			continue
		}
		target = strings.Trim(strings.TrimSpace(target), "<>")
		b, err1 := url.Parse(base)
		t, err2 := url.Parse(target)
		if err1 != nil || err2 != nil {
			return ""
		}
		return b.ResolveReference(t).String()
	}
	return ""
}

// --- S3 ---------------------------------------------------------------------

func (u *Upstreams) s3Client() (*minio.Client, error) {
	c := u.S3
	endpoint, secure := c.Endpoint, true
	if endpoint == "" {
		endpoint = "s3.amazonaws.com"
	}
	if u, err := url.Parse(endpoint); err == nil && u.Host != "" {
		endpoint, secure = u.Host, u.Scheme != "http"
	}
	opts := &minio.Options{
		Secure:       secure,
		Region:       c.Region,
		BucketLookup: minio.BucketLookupAuto,
		Transport:    u.client().Transport,
	}
	if c.AccessKey != "" {
		opts.Creds = credentials.NewStaticV4(c.AccessKey, c.SecretKey, c.SessionToken)
	} else {
		opts.Creds = credentials.NewStatic("", "", "", credentials.SignatureAnonymous)
	}
	cl, err := minio.New(endpoint, opts)
	if err != nil {
		return nil, Permanent(fmt.Errorf("S3 endpoint %s: %w", endpoint, err))
	}
	return cl, nil
}

// resolveS3 reads bucket/key (one object) or bucket/prefix/ (every object
// under the prefix, a set).
func (u *Upstreams) resolveS3(ctx context.Context, s string) ([]File, error) {
	bucket, key, _ := strings.Cut(s, "/")
	if bucket == "" || key == "" {
		return nil, Permanent(fmt.Errorf("source s3://%s: use s3://bucket/key or s3://bucket/prefix/", s))
	}
	cl, err := u.s3Client()
	if err != nil {
		return nil, err
	}
	var files []File
	add := func(obj minio.ObjectInfo, rel string) {
		k := obj.Key
		rf := File{Path: rel, Size: obj.Size, SHA256: objectSHA256(obj), Where: "s3://" + bucket + "/" + k}
		rf.open = func(ctx context.Context, offset int64) (io.ReadCloser, Answer, error) {
			opts := minio.GetObjectOptions{}
			if offset > 0 {
				if err := opts.SetRange(offset, 0); err != nil {
					return nil, Answer{}, Permanent(err)
				}
			}
			o, err := cl.GetObject(ctx, bucket, k, opts)
			if err != nil {
				return nil, Answer{}, s3Error(bucket, k, err)
			}
			return o, Answer{Start: offset, Total: obj.Size}, nil
		}
		files = append(files, rf)
	}
	if !strings.HasSuffix(key, "/") {
		obj, err := cl.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
		if err != nil {
			return nil, s3Error(bucket, key, err)
		}
		add(obj, path.Base(key))
		return files, nil
	}
	for obj := range cl.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: key, Recursive: true, WithMetadata: true}) {
		if obj.Err != nil {
			return nil, s3Error(bucket, key, obj.Err)
		}
		rel := strings.TrimPrefix(obj.Key, key)
		if strings.HasSuffix(rel, "/") {
			continue // a "directory" placeholder
		}
		if _, err := CleanRelPath(rel); err != nil {
			continue
		}
		if obj.UserMetadata == nil || objectSHA256(obj) == "" {
			// Listings do not always carry metadata: ask the object.
			if st, err := cl.StatObject(ctx, bucket, obj.Key, minio.StatObjectOptions{}); err == nil {
				obj = st
			}
		}
		add(obj, rel)
	}
	if len(files) == 0 {
		return nil, Permanent(fmt.Errorf("s3://%s: no object under this prefix", s))
	}
	return files, nil
}

// objectSHA256 is the sha256 an uploader recorded as the object's user
// metadata "sha256" (aws s3 cp --metadata sha256=HEX).
func objectSHA256(obj minio.ObjectInfo) string {
	for k, v := range obj.UserMetadata {
		if strings.EqualFold(k, "sha256") || strings.EqualFold(k, "X-Amz-Meta-Sha256") {
			if s := strings.ToLower(v); IsSHA256(s) {
				return s
			}
		}
	}
	if s := strings.ToLower(obj.Metadata.Get("X-Amz-Meta-Sha256")); IsSHA256(s) {
		return s
	}
	return ""
}

func s3Error(bucket, key string, err error) error {
	err = fmt.Errorf("s3://%s/%s: %w", bucket, key, err)
	switch minio.ToErrorResponse(errors.Unwrap(err)).StatusCode {
	case http.StatusNotFound, http.StatusForbidden, http.StatusUnauthorized, http.StatusBadRequest:
		return Permanent(err)
	}
	return err
}
