package fetch

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/testkit/weightsrv"
)

// TestFollowerPauseRehashesNothing: node02 follows node01 through a set of
// three files. With two landed and the third mid-way, node01 stops writing
// files to wait (it answers 503 until complete): node02 waits on it, then
// goes on with another Fetch, which must take the two files it landed
// from what it knows of them rather than read and hash them again
// (review-session4c L1).
func TestFollowerPauseRehashesNothing(t *testing.T) {
	const size = 256 << 10
	m, origin := weightsrv.New(t)
	want := map[string][]byte{}
	for i, name := range []string{"a.bin", "b.bin", "c.bin"} {
		want[name] = weightsrv.RandomBytes(size, uint64(60+i))
		m.Files["r/v/"+name] = want[name]
	}
	m.Rate = 3 * size / 2
	tlsFor := peerPKI(t, "node01", "node02")
	s1, c1 := tlsFor("node01")
	_, c2 := tlsFor("node02")
	A := newCache(t, Options{PeerClient: c1})
	aSwitch := &switchable{h: A.PeerHandler()}
	srvA, addrA := servePeer(t, aSwitch, s1(""))
	var logB logBuffer
	B := newCache(t, Options{PeerClient: c2, PeerPoll: 20 * time.Millisecond, StallAfter: 2 * time.Second, Logger: logB.logger()})
	src := origin.URL + "/r/v/"
	dirB := B.partialDir(src)

	var mu sync.Mutex
	hashed := map[string]int{}
	B.hashingLanded = func(final string) {
		mu.Lock()
		hashed[filepath.Base(final)]++
		mu.Unlock()
	}

	errs := make(chan error, 2)
	go func() { _, err := A.Resolve(context.Background(), src, nil); errs <- err }()
	writing(t, A, src)
	var pathB string
	go func() {
		p, err := B.ResolveFrom(context.Background(), src, []Peer{{Node: "node01", Address: addrA}}, nil)
		pathB = p
		errs <- err
	}()
	awaitHeld(t, dirB, "c.bin", 32<<10, says("node02 never reached the third file"))
	aSwitch.wait.Store(true)
	srvA.CloseClientConnections()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range want {
		if got, _ := os.ReadFile(filepath.Join(pathB, name)); !bytes.Equal(got, body) {
			t.Errorf("node02's %s differs", name)
		}
	}
	if l := logB.String(); !strings.Contains(l, "following a peer again") {
		t.Fatalf("node02 did not wait on node01 and follow it again, the test proves nothing:\n%s", l)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hashed) > 0 {
		t.Errorf("node02 read and hashed again files it had landed before its peer paused: %v", hashed)
	}
}
