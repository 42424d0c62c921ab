package fetch

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/llmgw/llmgw/spec"
)

// writeEntry writes a complete entry for source as a download would leave it.
func writeEntry(t testing.TB, dir, source string, data []byte) {
	t.Helper()
	e := filepath.Join(dir, Key(source))
	if err := os.MkdirAll(e, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e, "w.gguf"), data, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := writeRecord(e, record{Source: source, Files: []recordFile{{Path: "w.gguf", Size: int64(len(data))}}, Fetched: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

// snapshotTree maps every path under root (links not followed) to its
// contents ("dir" for directories, the target for links).
func snapshotTree(t testing.TB, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case info.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = "link:" + target
		case info.IsDir():
			out[rel] = "dir"
		default:
			b, _ := os.ReadFile(p)
			out[rel] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCollectProperty: whatever else lies in the cache directory (files and
// directories an operator put there, links to weights elsewhere, a
// directory named like a key whose record names another source or that has
// none, partial downloads), Collect deletes exactly the complete entries
// that are neither kept nor in use, and leaves every other path, and
// whatever a link points to, as it was.
func TestCollectProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		dir, outside := t.TempDir(), t.TempDir()
		c := newCache(t, Options{Dir: dir})
		if err := os.WriteFile(filepath.Join(outside, "precious.gguf"), []byte("a week to copy"), 0o600); err != nil {
			rt.Fatal(err)
		}
		n := rapid.IntRange(0, 8).Draw(rt, "entries")
		var sources []string
		for i := range n {
			src := "http://mirror:8081/m" + strconv.Itoa(i) + "/v/w.gguf"
			sources = append(sources, src)
			writeEntry(t, dir, src, []byte(src))
		}
		// What an operator (or a crash) left beside them.
		foreign := map[string]func(p string) error{
			"notes.txt": func(p string) error { return os.WriteFile(p, []byte("mine"), 0o600) },
			"my-model":  func(p string) error { return os.MkdirAll(filepath.Join(p, "sub"), 0o750) },
			"0123456789abcdef": func(p string) error { // a key's name, no record
				return os.MkdirAll(p, 0o750)
			},
			spec.WeightsKey("hf:a/b/c.gguf"): func(p string) error { // a key's name, another source's record
				if err := os.MkdirAll(p, 0o750); err != nil {
					return err
				}
				return writeRecord(p, record{Source: "hf:x/y/z.gguf"})
			},
			spec.WeightsKey("s3://b/k"): func(p string) error { // a link named like an entry
				return os.Symlink(outside, p)
			},
			"." + spec.WeightsKey("s3://b/p/") + ".partial": func(p string) error { // a link named like a partial
				return os.Symlink(outside, p)
			},
			".my-model.partial": func(p string) error { return os.MkdirAll(filepath.Join(p, "sub"), 0o750) },
		}
		for name, mk := range foreign {
			if rapid.Bool().Draw(rt, "put "+name) {
				if err := mk(filepath.Join(dir, name)); err != nil {
					rt.Fatal(err)
				}
			}
		}
		keep, inUse := map[string]bool{}, map[string]bool{}
		var gone []string
		for _, src := range sources {
			switch rapid.IntRange(0, 2).Draw(rt, "fate") {
			case 0:
				keep[Key(src)] = true
			case 1:
				inUse[src] = true
			default:
				gone = append(gone, Key(src))
			}
		}
		// Partial downloads a fetch left behind (the first without the
		// record of its source an older agent did not write), and one a
		// fetch is writing: collected under the same rules, except the one
		// being written, which is never touched nor reported.
		for i := range rapid.IntRange(0, 4).Draw(rt, "partials") {
			src := "http://mirror:8081/p" + strconv.Itoa(i) + "/v/w.gguf"
			pdir := filepath.Join(dir, "."+Key(src)+".partial")
			if err := os.MkdirAll(filepath.Join(pdir, "sub"), 0o750); err != nil {
				rt.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(pdir, "sub", ".w.gguf.partial"), []byte("half of "+src), 0o640); err != nil {
				rt.Fatal(err)
			}
			if i > 0 {
				if err := os.WriteFile(filepath.Join(pdir, sourceFile), []byte(src+"\n"), 0o640); err != nil {
					rt.Fatal(err)
				}
			}
			switch rapid.IntRange(0, 3).Draw(rt, "partial fate") {
			case 0:
				keep[Key(src)] = true
			case 1:
				inUse[Key(src)] = true
			case 2:
				c.mu.Lock()
				c.inflight[src] = &call{done: make(chan struct{})}
				c.mu.Unlock()
			default:
				gone = append(gone, "."+Key(src)+".partial")
			}
		}
		before := snapshotTree(t, dir)
		outsideBefore := snapshotTree(t, outside)
		dry, errs := c.Collect(keep, inUse, true)
		if len(errs) != 0 {
			rt.Fatalf("dry run errors %v", errs)
		}
		removed, errs := c.Collect(keep, inUse, false)
		if len(errs) != 0 {
			rt.Fatalf("errors %v", errs)
		}
		name := func(e Entry) string {
			if e.Partial {
				return "." + e.Key + ".partial"
			}
			return e.Key
		}
		var keys, dryKeys []string
		for _, e := range removed {
			keys = append(keys, name(e))
		}
		for _, e := range dry {
			dryKeys = append(dryKeys, name(e))
		}
		sort.Strings(keys)
		sort.Strings(dryKeys)
		sort.Strings(gone)
		if !equal(keys, gone) || !equal(dryKeys, gone) {
			rt.Fatalf("removed %v (dry run %v), want %v", keys, dryKeys, gone)
		}
		after := snapshotTree(t, dir)
		for p, v := range before {
			top, _, _ := strings.Cut(p, string(filepath.Separator))
			deleted := false
			for _, k := range gone {
				if top == k {
					deleted = true
				}
			}
			if deleted {
				if _, ok := after[p]; ok {
					rt.Fatalf("%s was to be deleted and is still there", p)
				}
				continue
			}
			if after[p] != v {
				rt.Fatalf("%s changed: %q, was %q", p, after[p], v)
			}
		}
		if got := snapshotTree(t, outside); !mapsEqual(got, outsideBefore) {
			rt.Fatalf("what a link points to changed")
		}
	})
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestCollectEntriesAndGeneration: an entry whose source is being fetched
// again is not deleted, and Entries lists only complete entries.
func TestCollectEntriesAndGeneration(t *testing.T) {
	dir := t.TempDir()
	c := newCache(t, Options{Dir: dir})
	writeEntry(t, dir, "http://m/a", []byte("aaaa"))
	es, err := c.Entries()
	if err != nil || len(es) != 1 || es[0].Source != "http://m/a" || es[0].Bytes != 4 {
		t.Fatalf("entries %+v, %v", es, err)
	}
	g := c.Generation()
	c.mu.Lock()
	c.inflight["http://m/a"] = &call{done: make(chan struct{})}
	c.mu.Unlock()
	removed, errs := c.Collect(nil, nil, false)
	if len(removed) != 0 || len(errs) != 1 {
		t.Fatalf("removed %v errs %v: an entry being fetched was collected", removed, errs)
	}
	c.mu.Lock()
	delete(c.inflight, "http://m/a")
	c.mu.Unlock()
	if removed, errs := c.Collect(nil, nil, false); len(removed) != 1 || len(errs) != 0 {
		t.Fatalf("removed %v errs %v", removed, errs)
	}
	if c.Generation() == g {
		t.Error("a collection did not move the generation")
	}
	if _, err := os.Stat(filepath.Join(dir, Key("http://m/a"))); !os.IsNotExist(err) {
		t.Errorf("entry still there: %v", err)
	}
}

// TestDeletionFinishedAtStart: an entry moved aside by a collection that
// did not finish is deleted when the cache opens; nothing else is.
func TestDeletionFinishedAtStart(t *testing.T) {
	dir := t.TempDir()
	aside := filepath.Join(dir, "."+Key("http://m/x")+".deleting")
	other := filepath.Join(dir, ".notes.deleting")
	for _, p := range []string{filepath.Join(aside, "w.gguf"), filepath.Join(other, "keep")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	newCache(t, Options{Dir: dir})
	if _, err := os.Stat(aside); !os.IsNotExist(err) {
		t.Errorf("%s survived: %v", aside, err)
	}
	if _, err := os.Stat(filepath.Join(other, "keep")); err != nil {
		t.Errorf("%s was touched: %v", other, err)
	}
}
