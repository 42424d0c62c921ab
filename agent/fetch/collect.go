package fetch

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/llmgw/llmgw/spec"
)

// Entry is one complete entry of the cache.
type Entry struct {
	Key     string
	Source  string
	Bytes   uint64
	Fetched time.Time
	// Partial marks a partial download (.<key>.partial) rather than a
	// complete entry: Source is the one its fetch recorded ("" when an
	// older agent left it), Fetched when it was last written to.
	Partial bool
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
// still holding a record of a source of that key. The same rules take the
// partial downloads (.<key>.partial) a fetch no longer running left
// behind; a partial whose fetch runs is left alone without a word, as it
// is the fetch's. Nothing else in the directory is ever touched. With
// dryRun it only lists them. errs says, in words, which entries a problem
// kept.
func (c *Cache) Collect(keep, inUse map[string]bool, dryRun bool) (removed []Entry, errs []string) {
	entries, err := c.Entries()
	if err != nil {
		return nil, []string{err.Error()}
	}
	wanted := func(e Entry) bool {
		return keep[e.Key] || inUse[e.Key] || (e.Source != "" && inUse[e.Source])
	}
	for _, e := range entries {
		if wanted(e) {
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
	for _, e := range c.partials() {
		if wanted(e) {
			continue
		}
		if dryRun {
			c.mu.Lock()
			busy := c.busy(e.Key)
			c.mu.Unlock()
			if !busy {
				removed = append(removed, e)
			}
			continue
		}
		gone, err := c.removePartial(e)
		if err != nil {
			errs = append(errs, err.Error())
		}
		if gone {
			removed = append(removed, e)
		}
	}
	return removed, errs
}

// partialSuffix names a download in progress: .<key>.partial.
const partialSuffix = ".partial"

// sourceFile, in a partial directory, records the source being fetched
// into it, so that a collection can say what it deletes.
const sourceFile = ".source"

// partialKey reads name as a partial download's directory name and
// returns its key.
func partialKey(name string) (string, bool) {
	k, ok := strings.CutSuffix(name, partialSuffix)
	if !ok || !strings.HasPrefix(k, ".") {
		return "", false
	}
	k = k[1:]
	return k, keyRE.MatchString(k)
}

// partials lists the partial downloads: real directories (not links)
// directly in the cache named .<key>.partial.
func (c *Cache) partials() []Entry {
	des, err := os.ReadDir(c.opts.Dir)
	if err != nil {
		return nil
	}
	var out []Entry
	for _, de := range des {
		key, ok := partialKey(de.Name())
		if !ok {
			continue
		}
		dir := filepath.Join(c.opts.Dir, de.Name())
		st, err := os.Lstat(dir)
		if err != nil || !st.IsDir() {
			continue
		}
		e := Entry{Key: key, Partial: true, Fetched: st.ModTime()}
		if b, err := os.ReadFile(filepath.Join(dir, sourceFile)); err == nil {
			if src := strings.TrimSpace(string(b)); spec.WeightsKey(src) == key {
				e.Source = src
			}
		}
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() && p != filepath.Join(dir, sourceFile) {
				if info, err := d.Info(); err == nil {
					e.Bytes += uint64(info.Size())
					if info.ModTime().After(e.Fetched) {
						e.Fetched = info.ModTime()
					}
				}
			}
			return nil
		})
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// busy reports whether a download with key runs (even one every waiter
// left, until it has let go of its files) or a shard pinned key. c.mu is
// held.
func (c *Cache) busy(key string) bool {
	if c.pins[key] > 0 {
		return true
	}
	for src := range c.inflight {
		if Key(src) == key {
			return true
		}
	}
	return false
}

// removePartial deletes a partial download no fetch is writing: under the
// cache's lock it is checked again and moved aside, so a fetch asked for
// after that starts afresh in a new partial directory. gone is false,
// without an error, when a fetch of it runs (or a shard pinned its key):
// the partial is that fetch's.
func (c *Cache) removePartial(e Entry) (gone bool, err error) {
	name := "." + e.Key + partialSuffix
	dir := filepath.Join(c.opts.Dir, name)
	trash := filepath.Join(c.opts.Dir, name+".deleting")
	c.mu.Lock()
	if c.busy(e.Key) {
		c.mu.Unlock()
		return false, nil
	}
	if st, err := os.Lstat(dir); err != nil || !st.IsDir() {
		c.mu.Unlock()
		return false, nil // gone already, or no longer a directory: not ours to touch
	}
	if err := os.Rename(dir, trash); err != nil {
		c.mu.Unlock()
		return false, fmt.Errorf("%s: kept: %w", dir, err)
	}
	c.mu.Unlock()
	if err := os.RemoveAll(trash); err != nil {
		return true, fmt.Errorf("%s: moved aside to %s but not deleted: %w", dir, trash, err)
	}
	c.log.Info("partial download deleted", "key", e.Key, "source", e.Source, "bytes", e.Bytes)
	return true, nil
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
