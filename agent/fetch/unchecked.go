package fetch

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
)

// uncheckedFile, in a partial directory, lists (a JSON array) the files
// whose bytes may have come from a peer that was still fetching them and
// that nothing checked yet: the source gives them no sha256, and the
// peer's record is read only once its entry is complete. It is on disk
// before the first such byte lands, and removed only once every file is
// verified. A download that finds it (the agent stopped in between)
// deletes those files where they landed, and resumes their partial files
// only where a sha256 then checks the whole file.
const uncheckedFile = ".unchecked"

// readUnchecked is the set of paths dir's uncheckedFile lists.
func readUnchecked(dir string) (map[string]bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, uncheckedFile))
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the files not checked yet: %w", err)
	}
	var paths []string
	if err := json.Unmarshal(b, &paths); err != nil {
		// Torn it cannot be (written aside, then renamed in): altered
		// by hand. Nothing in the directory can be told checked.
		return nil, fmt.Errorf("%s is not readable (%w); remove %s to fetch again", filepath.Join(dir, uncheckedFile), err, dir)
	}
	out := make(map[string]bool, len(paths))
	for _, p := range paths {
		out[p] = true
	}
	return out, nil
}

// markUnchecked adds paths to dir's uncheckedFile, on disk (written aside,
// synced, renamed in, the directory synced) when it returns.
func markUnchecked(dir string, paths []string) error {
	set, err := readUnchecked(dir)
	if err != nil {
		return err
	}
	for _, p := range paths {
		set[p] = true
	}
	b, err := json.Marshal(slices.Sorted(maps.Keys(set)))
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, uncheckedFile+".new")
	err = writeSynced(tmp, b)
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, uncheckedFile))
	}
	if err != nil {
		return fmt.Errorf("recording the files not checked yet: %w", err)
	}
	return syncDir(dir)
}

// dropUnchecked deletes the files dir's uncheckedFile lists where they
// landed (under their own name), and returns the list: their partial
// files are resumed only where a sha256 checks the whole file.
func dropUnchecked(dir string) (map[string]bool, error) {
	set, err := readUnchecked(dir)
	if err != nil {
		return nil, err
	}
	for p := range set {
		if err := removeLanded(dir, p); err != nil {
			return nil, err
		}
	}
	return set, nil
}

// removeLanded deletes the file at path in dir under its own name, if
// there.
func removeLanded(dir, path string) error {
	if err := os.Remove(filepath.Join(dir, filepath.FromSlash(path))); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("deleting %s, not checked: %w", path, err)
	}
	return nil
}

// clearUnchecked removes dir's uncheckedFile (and one an agent stopped
// while writing): every file is verified.
func clearUnchecked(dir string) error {
	for _, name := range []string{uncheckedFile, uncheckedFile + ".new"} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing the list of files not checked: %w", err)
		}
	}
	return nil
}
