package discovery

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Model formats ScanModels recognises.
const (
	FormatGGUF        = "gguf"        // a .gguf file, or a directory holding some
	FormatSafetensors = "safetensors" // a directory holding *.safetensors
	FormatHF          = "hf"          // a directory with config.json and other weights
)

// ModelFile is a model present in one of the node's model directories.
type ModelFile struct {
	// Dir is the model directory it was found in, as declared.
	Dir string
	// Path is the file or directory itself.
	Path string
	// Name is Path relative to Dir, slash-separated: "qwen2.5-7b-q4_k_m.gguf",
	// "Llama-3.1-8B-Instruct" or, in an organisation/name layout,
	// "Qwen/Qwen2.5-7B-Instruct".
	Name string
	// Format is FormatGGUF, FormatSafetensors or FormatHF.
	Format string
	// SizeBytes is the file's size, or the sum of the directory's files.
	SizeBytes int64
}

// ScanModels lists the models in each of dirs: a .gguf file, or a directory
// holding config.json, *.safetensors or *.gguf. A directory that is none of
// these is looked into once more, for the organisation/name layout. Hidden
// entries (a leading dot, as partial downloads use) are skipped.
//
// A missing or unreadable directory does not stop the scan: the models found
// elsewhere are returned together with an error listing every problem, each
// naming its path.
func ScanModels(dirs []string) ([]ModelFile, error) {
	var models []ModelFile
	var problems []error
	seen := map[string]bool{}
	for _, dir := range dirs {
		if seen[dir] {
			continue
		}
		seen[dir] = true
		found, errs := scanModelDir(dir)
		models = append(models, found...)
		problems = append(problems, errs...)
	}
	return models, errors.Join(problems...)
}

func scanModelDir(dir string) ([]ModelFile, []error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, []error{fmt.Errorf("model dir %s does not exist", dir)}
		}
		return nil, []error{fmt.Errorf("reading model dir: %w", err)}
	}
	var models []ModelFile
	var problems []error
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		m, isModel, err := modelAt(dir, path)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		if isModel {
			models = append(models, m)
			continue
		}
		if !isDir(path) {
			continue
		}
		// organisation/name layout
		subs, err := os.ReadDir(path)
		if err != nil {
			problems = append(problems, fmt.Errorf("reading model dir: %w", err))
			continue
		}
		for _, s := range subs {
			if strings.HasPrefix(s.Name(), ".") {
				continue
			}
			m, isModel, err := modelAt(dir, filepath.Join(path, s.Name()))
			if err != nil {
				problems = append(problems, err)
				continue
			}
			if isModel {
				models = append(models, m)
			}
		}
	}
	return models, problems
}

func isDir(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.IsDir()
}

// modelAt says whether path (inside dir) is a model, and describes it.
func modelAt(dir, path string) (ModelFile, bool, error) {
	info, err := os.Stat(path) // follows symlinks
	if err != nil {
		return ModelFile{}, false, fmt.Errorf("reading model entry: %w", err)
	}
	name, err := filepath.Rel(dir, path)
	if err != nil {
		return ModelFile{}, false, fmt.Errorf("naming model entry %s: %w", path, err)
	}
	m := ModelFile{Dir: dir, Path: path, Name: filepath.ToSlash(name)}
	if !info.IsDir() {
		if !info.Mode().IsRegular() || !strings.EqualFold(filepath.Ext(path), ".gguf") {
			return ModelFile{}, false, nil
		}
		m.Format, m.SizeBytes = FormatGGUF, info.Size()
		return m, true, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return ModelFile{}, false, fmt.Errorf("reading model entry: %w", err)
	}
	var config, safetensors, gguf bool
	for _, e := range entries {
		switch n := e.Name(); {
		case n == "config.json":
			config = true
		case strings.HasSuffix(n, ".safetensors"):
			safetensors = true
		case strings.EqualFold(filepath.Ext(n), ".gguf"):
			gguf = true
		}
	}
	switch {
	case safetensors:
		m.Format = FormatSafetensors
	case gguf:
		m.Format = FormatGGUF
	case config:
		m.Format = FormatHF
	default:
		return ModelFile{}, false, nil
	}
	if m.SizeBytes, err = dirSize(path); err != nil {
		return ModelFile{}, false, err
	}
	return m, true, nil
}

// dirSize sums the sizes of the files under root, following symlinked files
// (a Hugging Face snapshot links to its blobs) but not symlinked directories.
// Hidden entries are skipped.
func dirSize(root string) (int64, error) {
	var total int64
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != root && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		info, err := os.Stat(path)
		if err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			total += info.Size()
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("measuring model %s: %w", root, err)
	}
	return total, nil
}
