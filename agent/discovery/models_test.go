package discovery

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestScanModelsTestdata(t *testing.T) {
	dir := filepath.Join("testdata", "models")
	got, err := ScanModels([]string{dir})
	if err != nil {
		t.Fatalf("ScanModels: %v", err)
	}
	want := []ModelFile{
		{Dir: dir, Path: filepath.Join(dir, "Llama-3.1-8B-Instruct"), Name: "Llama-3.1-8B-Instruct", Format: FormatSafetensors, SizeBytes: 39 + 10 + 5 + 3},
		{Dir: dir, Path: filepath.Join(dir, "Qwen", "Qwen2.5-0.5B-Instruct"), Name: "Qwen/Qwen2.5-0.5B-Instruct", Format: FormatSafetensors, SizeBytes: 39 + 8},
		{Dir: dir, Path: filepath.Join(dir, "bert-base"), Name: "bert-base", Format: FormatHF, SizeBytes: 32 + 2},
		{Dir: dir, Path: filepath.Join(dir, "phi-3-mini-gguf"), Name: "phi-3-mini-gguf", Format: FormatGGUF, SizeBytes: 8},
		{Dir: dir, Path: filepath.Join(dir, "tinyllama-1.1b-chat.Q4_K_M.gguf"), Name: "tinyllama-1.1b-chat.Q4_K_M.gguf", Format: FormatGGUF, SizeBytes: 17},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ScanModels =\n%+v\nwant\n%+v", got, want)
	}
}

func TestScanModels(t *testing.T) {
	write := func(t *testing.T, path string, size int) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name      string
		setup     func(t *testing.T, root string) []string
		wantNames []string
		wantSizes []int64
		wantErrs  []string
	}{
		{
			name: "missing dir is a problem, the others still scanned",
			setup: func(t *testing.T, root string) []string {
				write(t, filepath.Join(root, "a", "m.gguf"), 100)
				return []string{filepath.Join(root, "gone"), filepath.Join(root, "a")}
			},
			wantNames: []string{"m.gguf"},
			wantSizes: []int64{100},
			wantErrs:  []string{"model dir ROOT/gone does not exist"},
		},
		{
			name: "hugging face snapshot with symlinked blobs",
			setup: func(t *testing.T, root string) []string {
				write(t, filepath.Join(root, "blobs", "abc"), 1000)
				write(t, filepath.Join(root, "models", "snap", "config.json"), 10)
				if err := os.Symlink(filepath.Join(root, "blobs", "abc"), filepath.Join(root, "models", "snap", "model.safetensors")); err != nil {
					t.Fatal(err)
				}
				return []string{filepath.Join(root, "models")}
			},
			wantNames: []string{"snap"},
			wantSizes: []int64{1010},
		},
		{
			name: "hidden entries and partial downloads are skipped",
			setup: func(t *testing.T, root string) []string {
				write(t, filepath.Join(root, "m", ".x.gguf.partial"), 5)
				write(t, filepath.Join(root, "m", ".cache", "y.gguf"), 5)
				write(t, filepath.Join(root, "m", "llama", "config.json"), 3)
				write(t, filepath.Join(root, "m", "llama", ".cache", "huggingface", "lock"), 50)
				return []string{filepath.Join(root, "m")}
			},
			wantNames: []string{"llama"},
			wantSizes: []int64{3},
		},
		{
			name: "broken symlink is a problem naming it",
			setup: func(t *testing.T, root string) []string {
				write(t, filepath.Join(root, "m", "ok.gguf"), 1)
				if err := os.Symlink(filepath.Join(root, "nowhere"), filepath.Join(root, "m", "dangling.gguf")); err != nil {
					t.Fatal(err)
				}
				return []string{filepath.Join(root, "m")}
			},
			wantNames: []string{"ok.gguf"},
			wantSizes: []int64{1},
			wantErrs:  []string{"ROOT/m/dangling.gguf"},
		},
		{
			name: "a file given as model dir",
			setup: func(t *testing.T, root string) []string {
				write(t, filepath.Join(root, "file"), 1)
				return []string{filepath.Join(root, "file")}
			},
			wantErrs: []string{"reading model dir", "ROOT/file"},
		},
		{
			name:  "no dirs",
			setup: func(t *testing.T, root string) []string { return nil },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			got, err := ScanModels(tt.setup(t, root))
			var names []string
			var sizes []int64
			for _, m := range got {
				names = append(names, m.Name)
				sizes = append(sizes, m.SizeBytes)
			}
			if !reflect.DeepEqual(names, tt.wantNames) || !reflect.DeepEqual(sizes, tt.wantSizes) {
				t.Errorf("models %v sizes %v, want %v %v", names, sizes, tt.wantNames, tt.wantSizes)
			}
			if len(tt.wantErrs) == 0 {
				if err != nil {
					t.Fatalf("ScanModels error = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ScanModels error = nil, want %q", tt.wantErrs)
			}
			for _, want := range tt.wantErrs {
				if want = strings.ReplaceAll(want, "ROOT", root); !strings.Contains(err.Error(), want) {
					t.Errorf("ScanModels error = %v, want containing %q", err, want)
				}
			}
		})
	}
}
