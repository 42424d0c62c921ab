package download

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/testkit/weightsrv"
	"pgregory.net/rapid"
)

// TestResumeProperty: whatever the offsets a download's connections are
// cut at, the file completes with exactly one request per cut plus one,
// every request after the first asks for the bytes not yet held (Range
// from where the partial ends), and the server sends each byte once.
func TestResumeProperty(t *testing.T) {
	body := weightsrv.RandomBytes(200<<10+3, 12)
	rapid.Check(t, func(rt *rapid.T) {
		m, srv := weightsrv.New(t)
		m.Files["m/v/w.gguf"] = body
		n := rapid.IntRange(0, 6).Draw(rt, "cuts")
		var plan []int64
		for range n {
			plan = append(plan, rapid.Int64Range(1, int64(len(body))/8).Draw(rt, "step"))
		}
		m.Plan = plan
		dir := t.TempDir()
		d := &Downloader{Logger: slog.New(slog.DiscardHandler)}
		files, err := d.List(context.Background(), srv.URL+"/m/v/w.gguf", nil)
		if err == nil {
			_, err = d.Fetch(context.Background(), dir, files, nil, nil)
		}
		if err != nil {
			rt.Fatal(err)
		}
		got, _ := os.ReadFile(filepath.Join(dir, "w.gguf"))
		if !bytes.Equal(got, body) {
			rt.Fatal("fetched file differs from the served one")
		}
		if reqs := m.Count("m/v/w.gguf"); reqs != n+1 {
			rt.Fatalf("%d requests for %d cuts", reqs, n)
		}
		if len(m.Ranges()) != n {
			rt.Fatalf("Range requests %v for %d cuts", m.Ranges(), n)
		}
		var held int64
		for i, r := range m.Ranges() {
			held += plan[i]
			if want := "bytes=" + strconv.FormatInt(held, 10) + "-"; !strings.EqualFold(r, want) {
				rt.Fatalf("request %d asked %q, want %q", i+2, r, want)
			}
		}
		if m.Served() != int64(len(body)) {
			rt.Fatalf("served %d bytes for a %d-byte file", m.Served(), len(body))
		}
	})
}
