// Package release writes the archives and checksum files of a release
// byte for byte the same from the same inputs: zip entries in name order
// with a fixed time and mode, no extra fields but the ones archive/zip
// writes for that time, sums sorted by file name. `make release` builds the
// binaries (reproducible by themselves with -trimpath, -buildid= and
// -buildvcs=false) and calls mkrelease for the rest.
package release

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Entry is one file of a zip archive.
type Entry struct {
	Name string // the name inside the archive
	Path string // where its bytes are
	Mode os.FileMode
}

// WriteZip writes the entries to dst, in name order, each dated mtime and
// compressed with deflate. The same entries and mtime give the same bytes.
func WriteZip(dst string, entries []Entry, mtime time.Time) error {
	entries = slices.Clone(entries)
	slices.SortFunc(entries, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		h := &zip.FileHeader{Name: e.Name, Method: zip.Deflate, Modified: mtime.UTC()}
		h.SetMode(e.Mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			return fmt.Errorf("adding %s to %s: %w", e.Name, dst, err)
		}
		f, err := os.Open(e.Path)
		if err != nil {
			return fmt.Errorf("adding %s to %s: %w", e.Name, dst, err)
		}
		_, err = io.Copy(w, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("adding %s to %s: %w", e.Path, dst, err)
		}
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	return os.WriteFile(dst, buf.Bytes(), 0o644)
}

// Sums is the content of a SHA256SUMS file for files (paths), as
// `sha256sum` writes and `sha256sum -c` reads it: one "HEX  NAME" line per
// file, NAME its base name, in name order.
func Sums(files []string) (string, error) {
	files = slices.Clone(files)
	slices.SortFunc(files, func(a, b string) int { return strings.Compare(filepath.Base(a), filepath.Base(b)) })
	var b strings.Builder
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			return "", fmt.Errorf("summing %s: %w", p, err)
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("summing %s: %w", p, err)
		}
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(h.Sum(nil)), filepath.Base(p))
	}
	return b.String(), nil
}
