package fetch

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestResumeProperty: whatever the offsets a download's connections are
// cut at, the file completes with exactly one request per cut plus one,
// every request after the first asks for the bytes not yet held (Range
// from where the partial ends), and the server sends each byte once.
func TestResumeProperty(t *testing.T) {
	body := randomBytes(200<<10+3, 12)
	rapid.Check(t, func(rt *rapid.T) {
		m, srv := newTestMirror(t)
		m.files["m/v/w.gguf"] = body
		n := rapid.IntRange(0, 6).Draw(rt, "cuts")
		var plan []int64
		for range n {
			plan = append(plan, rapid.Int64Range(1, int64(len(body))/8).Draw(rt, "step"))
		}
		m.plan = plan
		c := newCache(t, Options{})
		path, err := c.Resolve(context.Background(), srv.URL+"/m/v/w.gguf", nil)
		if err != nil {
			rt.Fatal(err)
		}
		got, _ := os.ReadFile(path)
		if !bytes.Equal(got, body) {
			rt.Fatal("fetched file differs from the served one")
		}
		if reqs := m.count("m/v/w.gguf"); reqs != n+1 {
			rt.Fatalf("%d requests for %d cuts", reqs, n)
		}
		if len(m.ranges) != n {
			rt.Fatalf("Range requests %v for %d cuts", m.ranges, n)
		}
		var held int64
		for i, r := range m.ranges {
			held += plan[i]
			if want := "bytes=" + strconv.FormatInt(held, 10) + "-"; !strings.EqualFold(r, want) {
				rt.Fatalf("request %d asked %q, want %q", i+2, r, want)
			}
		}
		if m.served != int64(len(body)) {
			rt.Fatalf("served %d bytes for a %d-byte file", m.served, len(body))
		}
	})
}
