package server

import (
	"os"
	"path/filepath"
	"testing"
)

func TestNewSQLiteStore(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "llmgw.db")
	if err := os.WriteFile(existing, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		dsn  string
		want bool
	}{
		{filepath.Join(dir, "new.db"), true},
		{"file:" + filepath.Join(dir, "new.db") + "?mode=rwc", true},
		{existing, false},
		{"file:" + existing, false},
		{"postgres://llmgw@db/llmgw", false},
		{":memory:", false},
	}
	for _, tt := range tests {
		if got := newSQLiteStore(tt.dsn); got != tt.want {
			t.Errorf("newSQLiteStore(%q) = %v, want %v", tt.dsn, got, tt.want)
		}
	}
}
