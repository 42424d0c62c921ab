package fetch

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// manifest is what a mirror answers for a model version's URL ending in
// "/": every file of the set with its size and sha256.
type manifest struct {
	Model   string `json:"model"`
	Version string `json:"version"`
	Files   []struct {
		Path   string `json:"path"`
		Size   int64  `json:"size"`
		SHA256 string `json:"sha256"`
	} `json:"files"`
}

// manifest reads the set's manifest and returns its files, each to be
// fetched from the set's URL joined with its path.
func (d *download) manifest() ([]remote, error) {
	base := d.src.URL.String()
	resp, _, err := d.get(&remote{url: base}, 0)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("GET %s (the set's manifest): %s", base, resp.Status)
		if resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests {
			return nil, permanent{err}
		}
		return nil, err
	}
	var m manifest
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&m); err != nil {
		return nil, permanent{fmt.Errorf("GET %s: not a set's manifest: %w", base, err)}
	}
	if len(m.Files) == 0 {
		return nil, permanent{fmt.Errorf("GET %s: the manifest lists no file", base)}
	}
	seen := map[string]bool{}
	var out []remote
	for _, f := range m.Files {
		if err := checkSetPath(f.Path); err != nil {
			return nil, permanent{fmt.Errorf("GET %s: manifest file %q: %w", base, f.Path, err)}
		}
		if seen[f.Path] {
			return nil, permanent{fmt.Errorf("GET %s: manifest lists %q twice", base, f.Path)}
		}
		seen[f.Path] = true
		sum := strings.ToLower(f.SHA256)
		if sum != "" && !isSHA256(sum) {
			return nil, permanent{fmt.Errorf("GET %s: manifest file %q: sha256 %q is not 64 hex digits", base, f.Path, f.SHA256)}
		}
		if f.Size < 0 {
			return nil, permanent{fmt.Errorf("GET %s: manifest file %q: negative size", base, f.Path)}
		}
		out = append(out, remote{path: f.Path, url: base + escapePath(f.Path), size: f.Size, sha256: sum})
	}
	return out, nil
}

// checkSetPath refuses a manifest path that would leave the entry or clash
// with the cache's own names (which start with a dot).
func checkSetPath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || path.Clean(p) != p {
		return errors.New("not a clean relative path")
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." || strings.HasPrefix(seg, ".") {
			return errors.New("a path segment starts with a dot")
		}
	}
	return nil
}

func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}
