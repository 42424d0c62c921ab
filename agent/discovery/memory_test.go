package discovery

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestProbeMemory(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name    string
		path    string
		want    Memory
		wantErr string
	}{
		{name: "2 TiB node", path: "testdata/proc/meminfo", want: Memory{TotalBytes: 2113472512 * 1024, AvailableBytes: 2051234816 * 1024}},
		{name: "kernel without MemAvailable", path: "testdata/proc/meminfo-old", want: Memory{TotalBytes: 8167848 * 1024}},
		{name: "missing file", path: filepath.Join(dir, "nope"), wantErr: "reading memory size: open " + filepath.Join(dir, "nope")},
		{name: "no MemTotal", path: write("no-total", "MemFree: 12 kB\n"), wantErr: "no MemTotal line"},
		{name: "bad number", path: write("bad", "MemTotal: lots kB\n"), wantErr: `MemTotal: "lots" is not a number`},
		{name: "bad unit", path: write("unit", "MemTotal: 12 MB\n"), wantErr: `MemTotal: unit "MB"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ProbeMemory(tt.path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), tt.path) {
					t.Fatalf("ProbeMemory() error = %v, want one naming %s and containing %q", err, tt.path, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("ProbeMemory() = %+v, want %+v", got, tt.want)
			}
		})
	}
}
