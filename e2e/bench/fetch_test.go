package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/agent/fetch"
	"github.com/llmgw/llmgw/mirror"
	"github.com/llmgw/llmgw/pki"
	"github.com/llmgw/llmgw/testkit/testcluster"
)

const (
	fetchBenchBytes  = 64 << 20 // one model file
	fetchBenchRounds = 9
	fetchRatioGoal   = 0.9
)

// BenchmarkFetchThroughput is what `make bench` runs for weights: the
// agent's fetch (the node's weights cache: resume bookkeeping, sha256 as
// the bytes arrive, the atomic rename) of one file from the mirror's bytes
// listener on loopback, against the same fetch of the same file from a
// plain net/http file server and against a raw loopback copy of it into a
// file, in alternating rounds of one run, printed as ratios with the goal
// (mirror ≥ 0.9 of the direct fetch). Then the bytes the mirror serves per
// fabric when every node of two fabrics starts a new model at once with its
// peers named, counted by the mirror's own metrics.
func BenchmarkFetchThroughput(b *testing.B) {
	for b.Loop() {
		fetchThroughput(b)
	}
}

func fetchThroughput(b *testing.B) {
	dir := b.TempDir()
	store := filepath.Join(dir, "mirror")
	file := filepath.Join(store, "m", "v", "w.gguf")
	if err := os.MkdirAll(filepath.Dir(file), 0o750); err != nil {
		b.Fatal(err)
	}
	writeRandom(b, file, fetchBenchBytes)
	st, err := mirror.NewStore(store)
	if err != nil {
		b.Fatal(err)
	}
	metrics := mirror.NewMetrics()
	mirrorSrv := httptest.NewServer(mirror.BytesHandler(st, slog.New(slog.DiscardHandler), metrics))
	defer mirrorSrv.Close()
	directSrv := httptest.NewServer(http.FileServer(http.Dir(store)))
	defer directSrv.Close()
	// The mirror hashes a file once, on its first request: not part of a round.
	if resp, err := http.Head(mirrorSrv.URL + "/m/v/w.gguf"); err != nil {
		b.Fatal(err)
	} else {
		resp.Body.Close()
	}

	fetchOnce := func(url string) time.Duration {
		c, err := fetch.New(fetch.Options{Dir: filepath.Join(dir, "cache-"+strconv.FormatInt(time.Now().UnixNano(), 36)), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		path, err := c.Resolve(context.Background(), url, nil)
		d := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.RemoveAll(filepath.Dir(path)); err != nil {
			b.Fatal(err)
		}
		return d
	}
	rawCopy := func(url string) time.Duration {
		out := filepath.Join(dir, "raw")
		start := time.Now()
		resp, err := http.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		f, err := os.Create(out)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(f, resp.Body); err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		_ = os.Remove(out)
		return d
	}
	var viaMirror, direct, raw []time.Duration
	for i := range fetchBenchRounds {
		// Who goes first changes every round: the page cache and the
		// disk's writeback favour neither side.
		if i%2 == 0 {
			viaMirror = append(viaMirror, fetchOnce(mirrorSrv.URL+"/m/v/w.gguf"))
			direct = append(direct, fetchOnce(directSrv.URL+"/m/v/w.gguf"))
		} else {
			direct = append(direct, fetchOnce(directSrv.URL+"/m/v/w.gguf"))
			viaMirror = append(viaMirror, fetchOnce(mirrorSrv.URL+"/m/v/w.gguf"))
		}
		raw = append(raw, rawCopy(directSrv.URL+"/m/v/w.gguf"))
	}
	// Each round's own ratio too: the two fetches of a round run moments
	// apart, so a load that comes and goes on a shared machine moves both.
	paired := make([]float64, len(viaMirror))
	for i := range viaMirror {
		paired[i] = direct[i].Seconds() / viaMirror[i].Seconds()
	}
	slices.Sort(paired)
	rate := func(ds []time.Duration) float64 {
		ds = slices.Clone(ds)
		slices.Sort(ds)
		return float64(fetchBenchBytes) / ds[len(ds)/2].Seconds()
	}
	m, d, r := rate(viaMirror), rate(direct), rate(raw)
	mark := func(ok bool) string {
		if ok {
			return "ok"
		}
		return "MISS"
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\nweights fetch on loopback: %d MiB, median of %d alternating rounds (%s, %d CPUs)\n", fetchBenchBytes>>20, fetchBenchRounds, runtime.Version(), runtime.NumCPU())
	fmt.Fprintf(&out, "  agent fetch from the mirror        %7.0f MB/s\n", m/1e6)
	fmt.Fprintf(&out, "  agent fetch from a file server     %7.0f MB/s\n", d/1e6)
	fmt.Fprintf(&out, "  raw loopback copy to a file        %7.0f MB/s\n", r/1e6)
	fmt.Fprintf(&out, "  mirror / file server: %.2f (goal >= %.1f: %s); mirror / raw copy: %.2f\n", m/d, fetchRatioGoal, mark(m/d >= fetchRatioGoal), m/r)
	fmt.Fprintf(&out, "  mirror / file server round by round: median %.2f, from %.2f to %.2f\n", paired[len(paired)/2], paired[0], paired[len(paired)-1])

	// Every node of two fabrics starting one new model at once, each node
	// serving its cache to its fabric and told of the others as peers (as
	// the control plane does): what the mirror serves per fabric, counted
	// by its own metrics, against the goal of one copy per fabric.
	const nodesPerFabric = 4
	small := filepath.Join(store, "new", "v", "w.gguf")
	if err := os.MkdirAll(filepath.Dir(small), 0o750); err != nil {
		b.Fatal(err)
	}
	const smallBytes = 16 << 20
	writeRandom(b, small, smallBytes)
	pkiDir := filepath.Join(dir, "pki")
	if _, _, err := pki.InitCA(pkiDir, pki.CAOptions{}); err != nil {
		b.Fatal(err)
	}
	for _, fabric := range []string{"ib-a", "ib-b"} {
		var caches []*fetch.Cache
		var peers []fetch.Peer
		for i := range nodesPerFabric {
			node := fmt.Sprintf("%s-node%02d", fabric, i)
			if _, _, err := pki.IssueNode(pkiDir, node, pkiDir, 0); err != nil {
				b.Fatal(err)
			}
			srvTLS, cliTLS, err := fetch.PeerTLS(filepath.Join(pkiDir, "ca.pem"), filepath.Join(pkiDir, node+".pem"), filepath.Join(pkiDir, node+"-key.pem"))
			if err != nil {
				b.Fatal(err)
			}
			c, err := fetch.New(fetch.Options{Dir: filepath.Join(dir, "peers", node), PeerClient: cliTLS, PeerPoll: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			ps := httptest.NewUnstartedServer(c.PeerHandler())
			ps.TLS = srvTLS("")
			ps.StartTLS()
			defer ps.Close()
			caches = append(caches, c)
			peers = append(peers, fetch.Peer{Node: node, Address: ps.Listener.Addr().String()})
		}
		before := testcluster.MirrorServedBytes(b, metrics, "new", "v")
		start := time.Now()
		errs := make(chan error, nodesPerFabric)
		for i, c := range caches {
			go func() {
				// Node i is told of the nodes placed before it.
				_, err := c.ResolveFrom(context.Background(), mirrorSrv.URL+"/new/v/w.gguf", peers[:i], nil)
				errs <- err
			}()
		}
		for range caches {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
		took := time.Since(start)
		served := testcluster.MirrorServedBytes(b, metrics, "new", "v") - before
		copies := served / smallBytes
		fmt.Fprintf(&out, "  fabric %s: %d nodes started a %d MiB model at once in %s; the mirror served %.0f MiB = %.1f copies (goal 1 per fabric: %s)\n",
			fabric, nodesPerFabric, smallBytes>>20, took.Round(time.Millisecond), served/(1<<20), copies, mark(copies <= 1.05))
		b.ReportMetric(copies, "mirror-copies-per-fabric")
	}
	fmt.Fprint(os.Stdout, out.String())
	b.ReportMetric(m/d, "mirror-fetch-ratio")
	b.ReportMetric(m/1e6, "mirror-fetch-MB/s")
}

func writeRandom(b *testing.B, path string, n int) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.CopyN(f, rand.Reader, int64(n)); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}
