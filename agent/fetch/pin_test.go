package fetch

import (
	"context"
	"os"
	"strings"
	"testing"
)

// TestCollectKeepsPinnedEntry: a shard that starts while a collection runs
// (after the collection listed what is in use) pins its entry before it
// resolves it; the collection then keeps the entry, and the shard's path
// stays there. Once released, the entry may go.
func TestCollectKeepsPinnedEntry(t *testing.T) {
	c := newCache(t, Options{})
	src := "http://mirror:8081/m/v1/w.gguf"
	writeEntry(t, c.opts.Dir, src, []byte("weights"))
	inUse := map[string]bool{} // listed before the shard started
	release := c.Pin(src)
	path, err := c.Resolve(context.Background(), src, nil)
	if err != nil {
		t.Fatal(err)
	}
	removed, errs := c.Collect(nil, inUse, false)
	if len(removed) != 0 || len(errs) != 1 || !strings.Contains(errs[0], "kept: a shard of this node is starting from it") {
		t.Fatalf("removed %v, errors %v; want the pinned entry kept with a reason", removed, errs)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the starting shard's weights are gone: %v", err)
	}
	release()
	release() // a second release is harmless
	if removed, errs := c.Collect(nil, inUse, false); len(removed) != 1 || len(errs) != 0 {
		t.Fatalf("after release: removed %v, errors %v; want the entry removed", removed, errs)
	}
}
