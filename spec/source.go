package spec

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
	"unicode"
)

// SourceKind says what a model's source names and so who moves its bytes.
type SourceKind string

// The kinds of source. Only URL, Set and HF are fetched by the agent; a
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
	// SourceHF is hf:org/repo/path, one file of a Hugging Face repository,
	// fetched through the hub's resolve endpoint.
	SourceHF SourceKind = "hf"
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
	// Path is the file inside the repository of an HF source, or the
	// path of a Local source.
	Path string
}

// Fetched reports whether the agent downloads this source into its cache.
func (s Source) Fetched() bool {
	return s.Kind == SourceURL || s.Kind == SourceSet || s.Kind == SourceHF
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
		rest := strings.TrimPrefix(strings.TrimPrefix(s, "hf:"), "//")
		parts := strings.SplitN(rest, "/", 3)
		if len(parts) < 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" || strings.HasSuffix(parts[2], "/") {
			return src, fmt.Errorf("%q is not hf:org/repo/file (the agent fetches one file of a repository; give a bare org/repo to let the engine download a whole one)", s)
		}
		for _, seg := range strings.Split(parts[2], "/") {
			if seg == "" || seg == "." || seg == ".." {
				return src, fmt.Errorf("%q has an empty, . or .. path segment", s)
			}
		}
		src.Kind, src.Repo, src.Path = SourceHF, parts[0]+"/"+parts[1], parts[2]
		return src, nil
	case strings.Contains(s, "://"):
		src.Kind = SourceOther
		return src, nil
	}
	if strings.ContainsAny(s, " \\") || strings.HasSuffix(s, "/") || strings.Count(s, "/") > 1 {
		return src, fmt.Errorf("%q is neither an absolute path, an http(s):// or hf: URL, nor a repository id (org/name)", s)
	}
	src.Kind, src.Repo = SourceRepo, s
	return src, nil
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
