package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
	"unicode"
)

// SourceKind says what a model's source names and so who moves its bytes.
type SourceKind string

// The kinds of source. Only URL, Set, HF and S3 are fetched by the agent; a
// local path is checked, a repository id and any other scheme (sim://…)
// are handed to the engine as written.
const (
	// SourceNone is an empty source: the engine is given nothing.
	SourceNone SourceKind = ""
	// SourceLocal is an absolute path on the node: checked, never copied.
	SourceLocal SourceKind = "local"
	// SourceURL is one file over http(s), fetched into the node's cache.
	SourceURL SourceKind = "url"
	// SourceSet is an http(s) URL ending in "/": a mirror's model version,
	// whose manifest lists the files fetched into one directory.
	SourceSet SourceKind = "set"
	// SourceHF is hf:org/repo[@revision]/path, one file of a Hugging Face
	// repository fetched through the hub's resolve endpoint, or
	// hf:org/repo[@revision], every file of that revision as a set.
	SourceHF SourceKind = "hf"
	// SourceS3 is s3://bucket/key, one object, or s3://bucket/prefix/,
	// every object under the prefix as a set.
	SourceS3 SourceKind = "s3"
	// SourceRepo is a bare repository id (Org/Name), which vLLM and SGLang
	// download themselves.
	SourceRepo SourceKind = "repo"
	// SourceOther is any other scheme (sim://chat): given to the engine.
	SourceOther SourceKind = "other"
)

// Source is a parsed model source.
type Source struct {
	Kind SourceKind
	// Raw is the source as written.
	Raw string
	// URL is the http(s) address of a URL or Set source.
	URL *url.URL
	// Repo is org/repo of an HF source, or the id of a Repo source.
	Repo string
	// Revision is the branch, tag or commit of an HF source ("" is main).
	Revision string
	// Bucket is an S3 source's bucket.
	Bucket string
	// Path is the file inside the repository of an HF source ("" for the
	// whole revision), the key or prefix of an S3 source, or the path of a
	// Local source.
	Path string
}

// Fetched reports whether the agent downloads this source into its cache.
func (s Source) Fetched() bool {
	return s.Kind == SourceURL || s.Kind == SourceSet || s.Kind == SourceHF || s.Kind == SourceS3
}

// Set reports whether a fetched source names several files kept in one
// directory: a mirror's version, a whole Hugging Face revision, an S3
// prefix.
func (s Source) Set() bool {
	return s.Kind == SourceSet || (s.Kind == SourceHF && s.Path == "") || (s.Kind == SourceS3 && strings.HasSuffix(s.Path, "/"))
}

// ParseSource reads a model source without any I/O. Its errors describe
// the value only; Model.Validate puts them under the key source.
func ParseSource(s string) (Source, error) {
	src := Source{Raw: s}
	if s == "" {
		return src, nil
	}
	if strings.TrimSpace(s) != s {
		return src, errors.New("has leading or trailing spaces")
	}
	if strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return src, errors.New("contains a control character")
	}
	switch {
	case strings.HasPrefix(s, "/"):
		src.Kind, src.Path = SourceLocal, path.Clean(s)
		return src, nil
	case strings.HasPrefix(s, "./") || strings.HasPrefix(s, "../") || s == "." || s == "..":
		return src, fmt.Errorf("%q is a relative path; a local source must be absolute", s)
	case strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://"):
		u, err := url.Parse(s)
		if err != nil {
			return src, fmt.Errorf("%q is not a URL: %w", s, unwrapURLError(err))
		}
		if u.Host == "" {
			return src, fmt.Errorf("%q has no host", s)
		}
		if u.User != nil {
			return src, fmt.Errorf("%q carries credentials; a source is shown to every operator", redact(u))
		}
		src.URL = u
		src.Kind = SourceURL
		if strings.HasSuffix(u.Path, "/") {
			src.Kind = SourceSet
		} else if u.Path == "" {
			return src, fmt.Errorf("%q names no file (end it with / for a mirror's whole version)", s)
		}
		return src, nil
	case strings.HasPrefix(s, "hf:"):
		rest := strings.TrimPrefix(s, "hf:")
		parts := strings.SplitN(rest, "/", 3)
		if len(parts) < 2 || parts[0] == "" || parts[1] == "" || (len(parts) == 3 && (parts[2] == "" || strings.HasSuffix(parts[2], "/"))) {
			return src, fmt.Errorf("%q is not hf:org/repo/file nor hf:org/repo[@revision] (a whole revision)", s)
		}
		name, rev, hasRev := strings.Cut(parts[1], "@")
		if name == "" || (hasRev && rev == "") {
			return src, fmt.Errorf("%q has an empty repository name or revision", s)
		}
		src.Kind, src.Repo, src.Revision = SourceHF, parts[0]+"/"+name, rev
		if len(parts) == 3 {
			if err := checkRelPath(parts[2]); err != nil {
				return src, fmt.Errorf("%q %w", s, err)
			}
			src.Path = parts[2]
		}
		return src, nil
	case strings.HasPrefix(s, "s3://"):
		bucket, key, _ := strings.Cut(strings.TrimPrefix(s, "s3://"), "/")
		if bucket == "" || key == "" || key == "/" {
			return src, fmt.Errorf("%q is not s3://bucket/key nor s3://bucket/prefix/", s)
		}
		if err := checkRelPath(strings.TrimSuffix(key, "/")); err != nil {
			return src, fmt.Errorf("%q %w", s, err)
		}
		src.Kind, src.Bucket, src.Path = SourceS3, bucket, key
		return src, nil
	case strings.Contains(s, "://"):
		src.Kind = SourceOther
		return src, nil
	}
	if strings.ContainsAny(s, " \\") || strings.HasSuffix(s, "/") || strings.Count(s, "/") > 1 {
		return src, fmt.Errorf("%q is neither an absolute path, an http(s)://, hf: or s3:// URL, nor a repository id (org/name)", s)
	}
	src.Kind, src.Repo = SourceRepo, s
	return src, nil
}

// checkRelPath refuses empty, "." and ".." segments of a path inside a
// repository or bucket.
func checkRelPath(p string) error {
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return errors.New("has an empty, . or .. path segment")
		}
	}
	return nil
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func redact(u *url.URL) string {
	c := *u
	c.User = url.User("…")
	return c.String()
}

// WeightsKey names a fetched source's entry in a node's weights cache: the
// first 16 hex digits of the sha256 of the source as written. The agent
// names its entries so; the control plane computes from the catalog, with
// the same function, which entries are still wanted.
func WeightsKey(source string) string {
	h := sha256.Sum256([]byte(source))
	return hex.EncodeToString(h[:])[:16]
}
