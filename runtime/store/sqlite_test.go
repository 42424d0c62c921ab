package store_test

import (
	"path/filepath"
	"testing"

	"github.com/llmgw/llmgw/runtime/store"
	"github.com/llmgw/llmgw/runtime/store/storetest"
)

func TestSQLiteStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := store.Open(t.Context(), filepath.Join(t.TempDir(), "llmgw.db"))
		if err != nil {
			t.Fatalf("opening SQLite store: %v", err)
		}
		return s
	})
}

func TestSQLiteStoreReopen(t *testing.T) {
	storetest.RunReopen(t, func(t *testing.T) string {
		return filepath.Join(t.TempDir(), "state", "llmgw.db")
	})
}

func TestSQLiteStoreFileURI(t *testing.T) {
	storetest.RunReopen(t, func(t *testing.T) string {
		return "file:" + filepath.Join(t.TempDir(), "llmgw.db")
	})
}
