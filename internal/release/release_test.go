package release

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestWriteZipSameBytes: the same entries, given in any order, make the
// same archive, whose entries are in name order with the given time and
// mode; another time makes another archive.
func TestWriteZipSameBytes(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"a": "alpha", "b": "bravo"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	when := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	entries := []Entry{{Name: "z-bin", Path: filepath.Join(dir, "b"), Mode: 0o755}, {Name: "a-doc", Path: filepath.Join(dir, "a"), Mode: 0o644}}
	write := func(name string, e []Entry, at time.Time) []byte {
		p := filepath.Join(dir, name)
		if err := WriteZip(p, e, at); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	one := write("1.zip", entries, when)
	two := write("2.zip", []Entry{entries[1], entries[0]}, when)
	if !bytes.Equal(one, two) {
		t.Fatal("the same entries in another order made different bytes")
	}
	if bytes.Equal(one, write("3.zip", entries, when.Add(time.Hour))) {
		t.Error("another time made the same bytes: is the time written at all?")
	}
	zr, err := zip.NewReader(bytes.NewReader(one), int64(len(one)))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
		if !f.Modified.Equal(when) {
			t.Errorf("%s dated %v, want %v", f.Name, f.Modified, when)
		}
	}
	if !slices.Equal(names, []string{"a-doc", "z-bin"}) {
		t.Errorf("entries %v, want a-doc, z-bin", names)
	}
	if m := zr.File[1].Mode().Perm(); m != 0o755 {
		t.Errorf("z-bin mode %v, want 0755", m)
	}
}

// TestSumsAsSha256sum: one "HEX  NAME" line per file in name order, what
// sha256sum -c reads.
func TestSumsAsSha256sum(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for _, n := range []string{"b.zip", "a.bin"} {
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, []byte(n), 0o600); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	got, err := Sums(paths)
	if err != nil {
		t.Fatal(err)
	}
	hex := func(s string) string { h := sha256.Sum256([]byte(s)); return hexString(h[:]) }
	want := hex("a.bin") + "  a.bin\n" + hex("b.zip") + "  b.zip\n"
	if got != want {
		t.Errorf("Sums =\n%s\nwant\n%s", got, want)
	}
	if _, err := Sums([]string{filepath.Join(dir, "missing")}); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("a missing file: err = %v, want it named", err)
	}
}

func hexString(b []byte) string { return hex.EncodeToString(b) }
