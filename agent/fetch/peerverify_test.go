package fetch

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/llmgw/llmgw/internal/download"
	"github.com/llmgw/llmgw/testkit/weightsrv"
)

// A peer whose entry does not match the source's manifest (bytes changed,
// its record rewritten to match them) is refused: the node fetches from the
// source and lands the source's bytes.
func TestPeerCheckedAgainstSource(t *testing.T) {
	m, origin := weightsrv.New(t)
	body := weightsrv.RandomBytes(64<<10, 51)
	m.Files["t/v/w.bin"] = body
	source := origin.URL + "/t/v/"
	tlsFor := peerPKI(t, "node01", "node02")
	s1, c1 := tlsFor("node01")
	_, c2 := tlsFor("node02")
	a := newCache(t, Options{PeerClient: c1})
	if _, err := a.Resolve(context.Background(), source, nil); err != nil {
		t.Fatal(err)
	}
	// node01 turns bad: other bytes, and a record that vouches for them.
	bad := bytes.Clone(body)
	bad[100] ^= 0xff
	dir := a.EntryDir(source)
	if err := os.WriteFile(filepath.Join(dir, "w.bin"), bad, 0o640); err != nil {
		t.Fatal(err)
	}
	var rec record
	b, _ := os.ReadFile(filepath.Join(dir, CompleteFile))
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	rec.Files[0].SHA256 = weightsrv.SHA256(bad)
	if err := writeRecord(dir, rec); err != nil {
		t.Fatal(err)
	}
	_, addrA := servePeer(t, a.PeerHandler(), s1(""))
	before := m.Count("t/v/w.bin")
	c := newCache(t, Options{PeerClient: c2})
	path, err := c.ResolveFrom(context.Background(), source, []Peer{{Node: "node01", Address: addrA}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(path, "w.bin")); !bytes.Equal(got, body) {
		t.Fatal("the node landed the peer's altered bytes")
	}
	if m.Count("t/v/w.bin") != before+1 {
		t.Errorf("the source served the file %d times, want once (the peer refused)", m.Count("t/v/w.bin")-before)
	}
}

// A file found under its final name in the partial directory (an earlier
// run) is taken only when its bytes hash to the source's sha256; the
// record's sha256 is the one computed from them.
func TestLandedFileRehashed(t *testing.T) {
	m, origin := weightsrv.New(t)
	body := weightsrv.RandomBytes(32<<10, 52)
	m.Files["u/v/w.bin"] = body
	source := origin.URL + "/u/v/"
	c := newCache(t, Options{})
	tmp := c.partialDir(source)
	if err := os.MkdirAll(tmp, 0o750); err != nil {
		t.Fatal(err)
	}
	junk := bytes.Repeat([]byte{7}, len(body)) // the right size, other bytes
	if err := os.WriteFile(filepath.Join(tmp, "w.bin"), junk, 0o640); err != nil {
		t.Fatal(err)
	}
	path, err := c.Resolve(context.Background(), source, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(path, "w.bin")); !bytes.Equal(got, body) {
		t.Fatal("a file of the right size but other bytes was taken as landed")
	}
	sum, ok := c.haveLanded(filepath.Join(path, "w.bin"), download.File{Path: "w.bin", Size: int64(len(body))})
	if !ok || sum != weightsrv.SHA256(body) {
		t.Errorf("haveLanded = %q, %v; want the sha256 of the bytes", sum, ok)
	}
}
