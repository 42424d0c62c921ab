package mirror

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

	"github.com/llmgw/llmgw/internal/buildinfo"
)

// remoteFile is one file a source offers.
type remoteFile struct {
	// Path is where the file lands inside the version directory.
	Path string
	// Size is -1 when the source does not say before the download.
	Size int64
	// SHA256 is empty when the source gives none.
	SHA256 string
	// open returns the file's bytes from offset on, or from 0 when the
	// source ignores the range (start says which).
	open func(ctx context.Context, offset int64) (body io.ReadCloser, info openInfo, err error)
}

type openInfo struct {
	start  int64
	total  int64  // -1 when unknown
	sha256 string // learnt from the answer's headers, "" when none
}

// permanentError is a failure a retry cannot fix (a 404, a 401, a bad sum).
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

func permanent(err error) error { return permanentError{err} }

func isPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
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

// resolve lists the files source offers.
func (f *Fetcher) resolve(ctx context.Context, source string) ([]remoteFile, error) {
	switch {
	case strings.HasPrefix(source, "hf:"):
		return f.resolveHF(ctx, strings.TrimPrefix(source, "hf:"))
	case strings.HasPrefix(source, "https://"), strings.HasPrefix(source, "http://"):
		return f.resolveURL(ctx, source)
	case strings.HasPrefix(source, "s3://"):
		return f.resolveS3(ctx, strings.TrimPrefix(source, "s3://"))
	}
	return nil, permanent(fmt.Errorf("source %q: use hf:org/repo/file, hf:org/repo@revision, https://…, http://… or s3://bucket/key", source))
}

// --- http(s) ---------------------------------------------------------------

func (f *Fetcher) resolveURL(ctx context.Context, source string) ([]remoteFile, error) {
	u, err := url.Parse(source)
	if err != nil || u.Host == "" {
		return nil, permanent(fmt.Errorf("source %q: not a URL", source))
	}
	if strings.HasSuffix(u.Path, "/") {
		return f.resolveMirrorSet(ctx, u)
	}
	name := path.Base(u.Path)
	if _, err := cleanRelPath(name); err != nil || name == "/" {
		return nil, permanent(fmt.Errorf("source %q: the URL names no file", source))
	}
	return []remoteFile{{Path: name, Size: -1, open: f.httpOpener(source, nil)}}, nil
}

// resolveMirrorSet reads another mirror's manifest (a URL ending in "/"):
// every file of the set, with its size and sha256.
func (f *Fetcher) resolveMirrorSet(ctx context.Context, u *url.URL) ([]remoteFile, error) {
	var m Manifest
	if _, err := f.getJSONLink(ctx, u.String(), nil, &m); err != nil {
		return nil, err
	}
	if len(m.Files) == 0 {
		return nil, permanent(fmt.Errorf("%s: the manifest lists no file", redact(u.String())))
	}
	files := make([]remoteFile, 0, len(m.Files))
	for _, mf := range m.Files {
		rel, err := cleanRelPath(mf.Path)
		if err != nil {
			return nil, permanent(fmt.Errorf("%s: %w", redact(u.String()), err))
		}
		fu := u.JoinPath(strings.Split(rel, "/")...)
		fu.RawQuery = ""
		files = append(files, remoteFile{Path: rel, Size: mf.Size, SHA256: strings.ToLower(mf.SHA256), open: f.httpOpener(fu.String(), nil)})
	}
	return files, nil
}

// httpOpener GETs u from an offset. header adds request headers (a token).
func (f *Fetcher) httpOpener(u string, header http.Header) func(context.Context, int64) (io.ReadCloser, openInfo, error) {
	return func(ctx context.Context, offset int64) (io.ReadCloser, openInfo, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, openInfo{}, permanent(err)
		}
		req.Header.Set("User-Agent", buildinfo.UserAgent("llmgw-mirror"))
		for k, v := range header {
			req.Header[k] = v
		}
		if offset > 0 {
			req.Header.Set("Range", "bytes="+strconv.FormatInt(offset, 10)+"-")
		}
		// The sha256 a hub puts on its redirect (X-Linked-Etag) is not on the
		// CDN's answer: catch it on the way.
		var linked string
		client := *f.client()
		prev := client.CheckRedirect
		client.CheckRedirect = func(r *http.Request, via []*http.Request) error {
			if r.Response != nil {
				if s := etagSHA256(r.Response.Header.Get("X-Linked-Etag")); s != "" {
					linked = s
				}
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
			return nil, openInfo{}, fmt.Errorf("GET %s: %w", redact(u), err)
		}
		info := openInfo{total: -1, sha256: linked}
		if info.sha256 == "" {
			info.sha256 = headerSHA256(resp.Header)
		}
		switch resp.StatusCode {
		case http.StatusOK:
			info.total = resp.ContentLength
		case http.StatusPartialContent:
			start, total, ok := parseContentRange(resp.Header.Get("Content-Range"))
			if !ok {
				resp.Body.Close()
				return nil, openInfo{}, fmt.Errorf("GET %s: 206 with Content-Range %q", redact(u), resp.Header.Get("Content-Range"))
			}
			info.start, info.total = start, total
		case http.StatusRequestedRangeNotSatisfiable:
			// The partial file already holds every byte (or more: start over).
			resp.Body.Close()
			_, total, _ := parseContentRange(resp.Header.Get("Content-Range"))
			if total == offset {
				info.start, info.total = offset, total
				return io.NopCloser(strings.NewReader("")), info, nil
			}
			return nil, openInfo{}, fmt.Errorf("GET %s: range from %d refused (size %d)", redact(u), offset, total)
		default:
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			err := fmt.Errorf("GET %s: %s: %s", redact(u), resp.Status, strings.TrimSpace(string(body)))
			if resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusRequestTimeout {
				return nil, openInfo{}, permanent(err)
			}
			return nil, openInfo{}, err
		}
		return resp.Body, info, nil
	}
}

// headerSHA256 finds a sha256 in an answer: the mirror's own header, or an
// ETag that is one (as the hub's CDN and LFS answer).
func headerSHA256(h http.Header) string {
	if s := strings.ToLower(strings.TrimSpace(h.Get(SHA256Header))); isSHA256(s) {
		return s
	}
	if s := etagSHA256(h.Get("X-Linked-Etag")); s != "" {
		return s
	}
	return etagSHA256(h.Get("ETag"))
}

func etagSHA256(etag string) string {
	s := strings.ToLower(strings.Trim(strings.TrimPrefix(strings.TrimSpace(etag), "W/"), `"`))
	if isSHA256(s) {
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

// redact drops a URL's query and user info: signed URLs carry credentials.
func redact(u string) string {
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
		if _, err := cleanRelPath(parts[2]); err != nil {
			return hfSource{}, fmt.Errorf("source hf:%s: %w", s, err)
		}
		src.file = parts[2]
	}
	return src, nil
}

func (f *Fetcher) hfHeader() http.Header {
	h := http.Header{}
	if f.HFToken != "" {
		h.Set("Authorization", "Bearer "+f.HFToken)
	}
	return h
}

func (f *Fetcher) hfEndpoint() string {
	if f.HFEndpoint == "" {
		return "https://huggingface.co"
	}
	return strings.TrimRight(f.HFEndpoint, "/")
}

func (f *Fetcher) hfResolveURL(repo, rev, file string) string {
	segs := strings.Split(file, "/")
	for i := range segs {
		segs[i] = url.PathEscape(segs[i])
	}
	return f.hfEndpoint() + "/" + repo + "/resolve/" + url.PathEscape(rev) + "/" + strings.Join(segs, "/")
}

func (f *Fetcher) resolveHF(ctx context.Context, s string) ([]remoteFile, error) {
	src, err := parseHF(s)
	if err != nil {
		return nil, permanent(err)
	}
	if src.file != "" {
		return []remoteFile{{
			Path: src.file, Size: -1,
			open: f.httpOpener(f.hfResolveURL(src.repo, src.revision, src.file), f.hfHeader()),
		}}, nil
	}
	// A whole revision: pin the branch or tag to its commit first, so every
	// file of the set comes from the same commit.
	var info struct {
		SHA string `json:"sha"`
	}
	if _, err := f.getJSONLink(ctx, f.hfEndpoint()+"/api/models/"+src.repo+"/revision/"+url.PathEscape(src.revision), f.hfHeader(), &info); err != nil {
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
	var files []remoteFile
	next := f.hfEndpoint() + "/api/models/" + src.repo + "/tree/" + url.PathEscape(commit) + "?recursive=true"
	for next != "" {
		var page []treeEntry
		link, err := f.getJSONLink(ctx, next, f.hfHeader(), &page)
		if err != nil {
			return nil, err
		}
		for _, e := range page {
			if e.Type != "file" {
				continue
			}
			if _, err := cleanRelPath(e.Path); err != nil {
				// .gitattributes and the like: not weights, and hidden here anyway.
				continue
			}
			rf := remoteFile{Path: e.Path, Size: e.Size}
			if e.LFS != nil && isSHA256(e.LFS.OID) {
				rf.SHA256 = e.LFS.OID
			}
			rf.open = f.httpOpener(f.hfResolveURL(src.repo, commit, e.Path), f.hfHeader())
			files = append(files, rf)
		}
		if link != "" && !strings.HasPrefix(link, f.hfEndpoint()+"/") {
			return nil, permanent(fmt.Errorf("hf:%s: the hub's next page is on another host (%s); not following it with the token", s, redact(link)))
		}
		next = link
	}
	if len(files) == 0 {
		return nil, permanent(fmt.Errorf("hf:%s: the revision holds no file", s))
	}
	return files, nil
}

// getJSONLink GETs u with header into v and returns the rel="next" link, if any.
func (f *Fetcher) getJSONLink(ctx context.Context, u string, header http.Header, v any) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", permanent(err)
	}
	req.Header.Set("User-Agent", buildinfo.UserAgent("llmgw-mirror"))
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := f.client().Do(req)
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", redact(u), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		err := fmt.Errorf("GET %s: %s: %s", redact(u), resp.Status, strings.TrimSpace(string(body)))
		if resp.StatusCode >= 400 && resp.StatusCode < 500 {
			return "", permanent(err)
		}
		return "", err
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return "", fmt.Errorf("GET %s: reading the answer: %w", redact(u), err)
	}
	return nextLink(resp.Header.Get("Link"), u), nil
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

func (f *Fetcher) s3Client() (*minio.Client, error) {
	c := f.S3
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
		Transport:    f.client().Transport,
	}
	if c.AccessKey != "" {
		opts.Creds = credentials.NewStaticV4(c.AccessKey, c.SecretKey, c.SessionToken)
	} else {
		opts.Creds = credentials.NewStatic("", "", "", credentials.SignatureAnonymous)
	}
	cl, err := minio.New(endpoint, opts)
	if err != nil {
		return nil, permanent(fmt.Errorf("S3 endpoint %s: %w", endpoint, err))
	}
	return cl, nil
}

// resolveS3 reads bucket/key (one object) or bucket/prefix/ (every object
// under the prefix, a set).
func (f *Fetcher) resolveS3(ctx context.Context, s string) ([]remoteFile, error) {
	bucket, key, _ := strings.Cut(s, "/")
	if bucket == "" || key == "" {
		return nil, permanent(fmt.Errorf("source s3://%s: use s3://bucket/key or s3://bucket/prefix/", s))
	}
	cl, err := f.s3Client()
	if err != nil {
		return nil, err
	}
	var files []remoteFile
	add := func(obj minio.ObjectInfo, rel string) {
		k := obj.Key
		rf := remoteFile{Path: rel, Size: obj.Size, SHA256: objectSHA256(obj)}
		rf.open = func(ctx context.Context, offset int64) (io.ReadCloser, openInfo, error) {
			opts := minio.GetObjectOptions{}
			if offset > 0 {
				if err := opts.SetRange(offset, 0); err != nil {
					return nil, openInfo{}, permanent(err)
				}
			}
			o, err := cl.GetObject(ctx, bucket, k, opts)
			if err != nil {
				return nil, openInfo{}, s3Error(bucket, k, err)
			}
			return o, openInfo{start: offset, total: obj.Size}, nil
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
		if _, err := cleanRelPath(rel); err != nil {
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
		return nil, permanent(fmt.Errorf("s3://%s: no object under this prefix", s))
	}
	return files, nil
}

// objectSHA256 is the sha256 an uploader recorded as the object's user
// metadata "sha256" (aws s3 cp --metadata sha256=HEX).
func objectSHA256(obj minio.ObjectInfo) string {
	for k, v := range obj.UserMetadata {
		if strings.EqualFold(k, "sha256") || strings.EqualFold(k, "X-Amz-Meta-Sha256") {
			if s := strings.ToLower(v); isSHA256(s) {
				return s
			}
		}
	}
	if s := strings.ToLower(obj.Metadata.Get("X-Amz-Meta-Sha256")); isSHA256(s) {
		return s
	}
	return ""
}

func s3Error(bucket, key string, err error) error {
	err = fmt.Errorf("s3://%s/%s: %w", bucket, key, err)
	switch minio.ToErrorResponse(errors.Unwrap(err)).StatusCode {
	case http.StatusNotFound, http.StatusForbidden, http.StatusUnauthorized, http.StatusBadRequest:
		return permanent(err)
	}
	return err
}
