package fetch

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"time"

	"github.com/llmgw/llmgw/spec"
)

// Entry is one complete entry of the cache.
type Entry struct {
	Key     string
	Source  string
	Bytes   uint64
	Fetched time.Time
}

var keyRE = regexp.MustCompile(`^[0-9a-f]{16}$`)

// Entries lists the cache's complete entries: directories named by a key
// whose record names a source of that key. Anything else in the directory
// (an operator's file, a partial download) is not an entry.
func (c *Cache) Entries() ([]Entry, error) {
	des, err := os.ReadDir(c.opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("listing the weights cache %s: %w", c.opts.Dir, err)
	}
	var out []Entry
	for _, de := range des {
		if e, ok := c.entry(de.Name()); ok {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// entry reads name as an entry: a real directory (not a link) directly in
// the cache, named by a key, holding a record whose source has that key.
func (c *Cache) entry(name string) (Entry, bool) {
	if !keyRE.MatchString(name) {
		return Entry{}, false
	}
	dir := filepath.Join(c.opts.Dir, name)
	st, err := os.Lstat(dir)
	if err != nil || !st.IsDir() {
		return Entry{}, false
	}
	b, err := os.ReadFile(filepath.Join(dir, CompleteFile))
	if err != nil {
		return Entry{}, false
	}
	var rec record
	if json.Unmarshal(b, &rec) != nil || rec.Source == "" || spec.WeightsKey(rec.Source) != name {
		return Entry{}, false
	}
	e := Entry{Key: name, Source: rec.Source, Fetched: rec.Fetched}
	for _, f := range rec.Files {
		e.Bytes += uint64(max(f.Size, 0))
	}
	return e, true
}

// Generation counts the changes to the cache's entries (a download landed,
// entries were collected), so that the agent reports them when it moves.
func (c *Cache) Generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// Collect deletes the entries no one wants: each entry whose key is not in
// keep and whose source is not in use (a shard of the node running,
// starting or fetching it) and is not being fetched. Every path is checked
// again just before it goes: still a directory of the cache named by a key,
// still holding a record of a source of that key. Nothing else in the
// directory is ever touched. With dryRun it only lists them. errs says, in
// words, which entries a problem kept.
func (c *Cache) Collect(keep, inUse map[string]bool, dryRun bool) (removed []Entry, errs []string) {
	entries, err := c.Entries()
	if err != nil {
		return nil, []string{err.Error()}
	}
	for _, e := range entries {
		if keep[e.Key] || inUse[e.Source] || inUse[e.Key] {
			continue
		}
		if dryRun {
			removed = append(removed, e)
			continue
		}
		if err := c.remove(e); err != nil {
			errs = append(errs, err.Error())
			continue
		}
		removed = append(removed, e)
	}
	return removed, errs
}

// remove deletes one entry, unless a download of its source runs or a
// shard pinned it (Pin): under
// the cache's lock the entry is checked again and renamed out of its name
// at once, so a fetch asked for after that downloads it afresh and never
// sees half a deletion.
func (c *Cache) remove(e Entry) error {
	c.mu.Lock()
	if _, running := c.inflight[e.Source]; running {
		c.mu.Unlock()
		return fmt.Errorf("%s (%s): kept: it is being fetched", e.Key, e.Source)
	}
	if c.pins[e.Key] > 0 {
		c.mu.Unlock()
		return fmt.Errorf("%s (%s): kept: a shard of this node is starting from it", e.Key, e.Source)
	}
	again, ok := c.entry(e.Key)
	if !ok || again.Source != e.Source {
		c.mu.Unlock()
		return fmt.Errorf("%s: kept: it is no longer an entry of %s", filepath.Join(c.opts.Dir, e.Key), e.Source)
	}
	dir := filepath.Join(c.opts.Dir, e.Key)
	trash := filepath.Join(c.opts.Dir, "."+e.Key+".deleting")
	if err := os.Rename(dir, trash); err != nil {
		c.mu.Unlock()
		return fmt.Errorf("%s: kept: %w", dir, err)
	}
	c.gen++
	c.mu.Unlock()
	if err := os.RemoveAll(trash); err != nil {
		return fmt.Errorf("%s: moved aside to %s but not deleted: %w", dir, trash, err)
	}
	c.log.Info("weights deleted", "key", e.Key, "source", e.Source, "bytes", e.Bytes)
	return nil
}
