// Package ci_test checks the sample catalog of the CI example: every model
// file is one `llmgw ctl model add -f` accepts, and the set is consistent.
package ci_test

import (
	"path/filepath"
	"testing"

	"github.com/llmgw/llmgw/spec"
)

func TestSampleCatalog(t *testing.T) {
	files, err := filepath.Glob("catalog/models/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		file     string
		name     string
		min, max int
	}{
		{"catalog/models/ci-chat.yaml", "ci-chat", 1, 2},
		{"catalog/models/ci-on-demand.yaml", "ci-on-demand", 0, 1},
	}
	if len(files) != len(tests) {
		t.Fatalf("catalog/models holds %v; the table lists %d files", files, len(tests))
	}
	var models []spec.Model
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := spec.ParseModelFile(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			if m.Name != tt.name || m.Scaling.Min != tt.min || m.Scaling.Max != tt.max {
				t.Errorf("%s: name %s, scaling %d..%d; want %s, %d..%d", tt.file, m.Name, m.Scaling.Min, m.Scaling.Max, tt.name, tt.min, tt.max)
			}
			models = append(models, m)
		})
	}
	if err := spec.ValidateSet(models); err != nil {
		t.Error(err)
	}
}
