package discovery

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestProbeDisk(t *testing.T) {
	dir := t.TempDir()
	d, err := ProbeDisk(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d.Path != dir || d.TotalBytes == 0 || d.FreeBytes > d.TotalBytes {
		t.Fatalf("ProbeDisk(%s) = %+v, want the path, a total and free <= total", dir, d)
	}
	missing := filepath.Join(dir, "missing")
	if _, err := ProbeDisk(missing); err == nil || !strings.Contains(err.Error(), "measuring disk space of "+missing) {
		t.Fatalf("ProbeDisk(missing) error = %v, want one naming %s", err, missing)
	}
}
