// Package mirror is the weights mirror: one directory of model weights laid
// out as DIR/<model>/<version>/<files...>, served read-only over plain HTTP
// (Range requests and a per-version manifest with sizes and sha256) and
// managed over a second listener (holdings, downloads, deletion) that takes
// client certificates from the cluster CA. The same package fills the
// directory from Hugging Face, an http(s) URL or S3 (fetch.go).
//
// A version directory with several files is a set. Files whose names start
// with "." are the mirror's own (partial downloads, the sha256 cache, the
// marker of a set still downloading) and are never listed nor served. A
// version is complete unless it holds the marker, so files copied in by hand
// are served as they are.
package mirror

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/llmgw/llmgw/api/mirrorv1"

	"golang.org/x/sync/singleflight"
)

// incompleteMarker is the file a download puts in a version directory
// before its first byte and removes after its last file lands.
const incompleteMarker = ".incomplete"

// lockFile is what a download holds an exclusive lock on.
const lockFile = ".lock"

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]*$`)

// CheckName reports whether s can name a model or a version in the mirror:
// one path element, starting with a letter or digit.
func CheckName(kind, s string) error {
	if len(s) > 200 || !nameRE.MatchString(s) {
		return fmt.Errorf("%s %q: use letters, digits, '.', '_', '+' and '-', starting with a letter or digit", kind, s)
	}
	return nil
}

// File is one file of a version.
type File = mirrorv1.File

// Manifest is what GET /<model>/<version>/ answers on the bytes listener.
type Manifest = mirrorv1.Manifest

// Holding is one version the mirror holds, as the management API lists it.
type Holding = mirrorv1.Holding

// Store is the mirror's directory.
type Store struct {
	Dir string

	hashes singleflight.Group
	// sums remembers, per path, the sha256 last read or computed and the
	// size and modification time it is for, so that serving a file does
	// not read its sidecar on every request.
	sums sync.Map // path -> knownSum
}

// knownSum is a sha256 and the sidecarKey of the file it was computed from.
type knownSum struct{ key, sum string }

// NewStore opens dir, which must exist.
func NewStore(dir string) (*Store, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("opening the mirror directory: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("opening the mirror directory: %s is not a directory", dir)
	}
	return &Store{Dir: dir}, nil
}

// versionDir returns the directory of model/version after checking both names.
func (s *Store) versionDir(model, version string) (string, error) {
	if err := CheckName("model", model); err != nil {
		return "", err
	}
	if err := CheckName("version", version); err != nil {
		return "", err
	}
	return filepath.Join(s.Dir, model, version), nil
}

// Complete reports whether model/version exists and holds no marker of a
// download in progress.
func (s *Store) Complete(model, version string) (bool, error) {
	dir, err := s.versionDir(model, version)
	if err != nil {
		return false, err
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return false, fs.ErrNotExist
	}
	_, err = os.Stat(filepath.Join(dir, incompleteMarker))
	return errors.Is(err, fs.ErrNotExist), nil
}

// listFiles returns the visible regular files of a version, sorted by path.
func listFiles(dir string) ([]File, error) {
	var files []File
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		files = append(files, File{Path: filepath.ToSlash(rel), Size: info.Size()})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return files, nil
}

// Manifest returns the files of a complete version with their sha256. It
// returns fs.ErrNotExist for a version the mirror does not hold or that is
// still downloading.
func (s *Store) Manifest(model, version string) (Manifest, error) {
	complete, err := s.Complete(model, version)
	if err != nil {
		return Manifest{}, err
	}
	if !complete {
		return Manifest{}, fmt.Errorf("%s/%s is still downloading: %w", model, version, fs.ErrNotExist)
	}
	dir := filepath.Join(s.Dir, model, version)
	files, err := listFiles(dir)
	if err != nil {
		return Manifest{}, fmt.Errorf("listing %s/%s: %w", model, version, err)
	}
	for i := range files {
		sum, err := s.FileSHA256(filepath.Join(dir, filepath.FromSlash(files[i].Path)))
		if err != nil {
			return Manifest{}, err
		}
		files[i].SHA256 = sum
	}
	return Manifest{Model: model, Version: version, Files: files}, nil
}

// Holdings lists every version under the directory, complete or not.
func (s *Store) Holdings() ([]Holding, error) {
	models, err := os.ReadDir(s.Dir)
	if err != nil {
		return nil, fmt.Errorf("listing the mirror directory: %w", err)
	}
	out := []Holding{}
	for _, m := range models {
		if !m.IsDir() || CheckName("model", m.Name()) != nil {
			continue
		}
		versions, err := os.ReadDir(filepath.Join(s.Dir, m.Name()))
		if err != nil {
			return nil, fmt.Errorf("listing model %s: %w", m.Name(), err)
		}
		for _, v := range versions {
			if !v.IsDir() || CheckName("version", v.Name()) != nil {
				continue
			}
			files, err := listFiles(filepath.Join(s.Dir, m.Name(), v.Name()))
			if err != nil {
				return nil, fmt.Errorf("listing %s/%s: %w", m.Name(), v.Name(), err)
			}
			complete, _ := s.Complete(m.Name(), v.Name())
			h := Holding{Model: m.Name(), Version: v.Name(), Complete: complete, Files: files}
			for _, f := range files {
				h.Bytes += f.Size
			}
			out = append(out, h)
		}
	}
	return out, nil
}

// sidecar is the name of the sha256 cache of the file at path.
func sidecar(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".sha256")
}

// FileSHA256 returns the sha256 of the file at path, read from its sidecar
// when the sidecar matches the file's size and modification time, computed
// (once, whatever the number of concurrent callers) and recorded otherwise.
func (s *Store) FileSHA256(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	return s.fileSHA256(path, st)
}

// fileSHA256 is FileSHA256 for a file already stat'ed (st): from memory
// when the file's size and modification time are those the sum was for,
// else from its sidecar, else hashed.
func (s *Store) fileSHA256(path string, st fs.FileInfo) (string, error) {
	key := sidecarKey(st)
	if k, ok := s.sums.Load(path); ok && k.(knownSum).key == key {
		return k.(knownSum).sum, nil
	}
	if sum, ok := readSidecar(path, key); ok {
		s.sums.Store(path, knownSum{key, sum})
		return sum, nil
	}
	v, err, _ := s.hashes.Do(path+"\x00"+key, func() (any, error) {
		sum, err := hashFile(path)
		if err != nil {
			return "", err
		}
		// A read-only directory keeps no sidecar; memory keeps the sum.
		_ = writeSidecar(path, key, sum)
		s.sums.Store(path, knownSum{key, sum})
		return sum, nil
	})
	if err != nil {
		return "", fmt.Errorf("hashing %s: %w", path, err)
	}
	return v.(string), nil
}

func sidecarKey(st fs.FileInfo) string {
	return strconv.FormatInt(st.Size(), 10) + " " + strconv.FormatInt(st.ModTime().UnixNano(), 10)
}

func readSidecar(path, key string) (string, bool) {
	data, err := os.ReadFile(sidecar(path))
	if err != nil {
		return "", false
	}
	k, sum, ok := strings.Cut(strings.TrimSpace(string(data)), " sha256=")
	if !ok || k != key || !isSHA256(sum) {
		return "", false
	}
	return sum, true
}

func writeSidecar(path, key, sum string) error {
	tmp := sidecar(path) + ".tmp"
	if err := os.WriteFile(tmp, []byte(key+" sha256="+sum+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, sidecar(path))
}

func hashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, bufio.NewReaderSize(f, 1<<20)); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

var sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)

func isSHA256(s string) bool { return sha256RE.MatchString(s) }

// Delete removes model/version, and the model's directory when it was the
// last version. It fails with ErrBusy while a download fills the version.
func (s *Store) Delete(model, version string) error {
	dir, err := s.versionDir(model, version)
	if err != nil {
		return err
	}
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("deleting %s/%s: %w", model, version, fs.ErrNotExist)
	}
	// A download (of this process or a `llmgw mirror fetch`) holds the lock.
	unlock, err := lockVersion(dir)
	if err != nil {
		return fmt.Errorf("deleting %s/%s: %w", model, version, err)
	}
	defer unlock()
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("deleting %s/%s: %w", model, version, err)
	}
	s.sums.Range(func(k, _ any) bool {
		if strings.HasPrefix(k.(string), dir+string(filepath.Separator)) {
			s.sums.Delete(k)
		}
		return true
	})
	_ = os.Remove(filepath.Join(s.Dir, model)) // fails, as it should, while other versions remain
	return nil
}
