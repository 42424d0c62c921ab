package fetch

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/llmgw/llmgw/internal/download"
	"github.com/llmgw/llmgw/testkit/weightsrv"
)

// TestCollectOrphanedPartial: a partial download whose fetch is running is
// never touched by a collection, whatever the catalog keeps; once that
// fetch ended (every caller left) and no model declares the source, the
// partial goes like an unused entry, reported with its source and bytes,
// and the next fetch of the source starts afresh and lands whole.
func TestCollectOrphanedPartial(t *testing.T) {
	m, srv := weightsrv.New(t)
	body := weightsrv.RandomBytes(1<<20, 51)
	m.Files["m/v/w.gguf"] = body
	m.Rate = 256 << 10 // four seconds for the file: the collection runs mid-way
	c := newCache(t, Options{})
	source := srv.URL + "/m/v/w.gguf"
	partialFile := download.PartialName(filepath.Join(c.partialDir(source), "w.gguf"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := c.Resolve(ctx, source, nil); done <- err }()
	size := func() int64 {
		st, err := os.Stat(partialFile)
		if err != nil {
			return 0
		}
		return st.Size()
	}
	for deadline := time.Now().Add(10 * time.Second); size() < 64<<10; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the download wrote nothing")
		}
	}

	// Being written: neither listed by a dry run nor deleted, nor an error.
	for _, dry := range []bool{true, false} {
		removed, errs := c.Collect(nil, nil, dry)
		if len(removed) != 0 || len(errs) != 0 {
			t.Fatalf("dry run %v while the fetch writes: removed %+v, errors %v", dry, removed, errs)
		}
	}
	was := size()
	for deadline := time.Now().Add(10 * time.Second); size() <= was; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the download stopped growing after the collection")
		}
	}

	// Every caller left: the fetch is cancelled and lets go of the partial.
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want canceled", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		c.mu.Lock()
		busy := c.busy(Key(source))
		c.mu.Unlock()
		if !busy {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the abandoned fetch never ended")
		}
	}
	left := size()

	// Still declared (kept) or used by a live shard: kept.
	for _, rules := range []struct{ keep, inUse map[string]bool }{
		{keep: map[string]bool{Key(source): true}},
		{inUse: map[string]bool{source: true}},
	} {
		if removed, errs := c.Collect(rules.keep, rules.inUse, false); len(removed) != 0 || len(errs) != 0 {
			t.Fatalf("a partial of a declared source was collected: %+v %v", removed, errs)
		}
	}
	dry, errs := c.Collect(nil, nil, true)
	if len(dry) != 1 || len(errs) != 0 {
		t.Fatalf("dry run: %+v %v, want the orphaned partial", dry, errs)
	}
	removed, errs := c.Collect(nil, nil, false)
	if len(removed) != 1 || len(errs) != 0 {
		t.Fatalf("removed %+v, errors %v, want the orphaned partial", removed, errs)
	}
	e := removed[0]
	if !e.Partial || e.Key != Key(source) || e.Source != source || e.Bytes != uint64(left) {
		t.Errorf("reported %+v, want the partial of %s with its %d bytes", e, source, left)
	}
	if _, err := os.Stat(c.partialDir(source)); !os.IsNotExist(err) {
		t.Fatalf("the partial is still there: %v", err)
	}

	// The next fetch starts afresh (no Range) and lands whole.
	m.Mu.Lock()
	m.Rate = 0
	m.Mu.Unlock()
	before := len(m.Ranges())
	path, err := c.Resolve(context.Background(), source, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, body) {
		t.Fatal("the file fetched after the collection differs")
	}
	if r := m.Ranges()[before:]; len(r) != 0 {
		t.Errorf("the fetch after the collection resumed (%v) from a partial that was deleted", r)
	}
	if _, err := os.Stat(filepath.Join(c.EntryDir(source), sourceFile)); !os.IsNotExist(err) {
		t.Errorf("the partial's source record was left in the entry: %v", err)
	}
}
