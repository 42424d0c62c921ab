package download

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/llmgw/llmgw/testkit/weightsrv"
	"github.com/minio/minio-go/v7"
)

// s3Fake starts gofakes3, a real S3 implementation in process, and returns
// a Downloader configured for it and a client to upload with.
func s3Fake(t *testing.T) (*Downloader, *minio.Client, *rangeLog) {
	t.Helper()
	fake := gofakes3.New(s3mem.New()).Server()
	ranges := &rangeLog{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			ranges.add(r.URL.Path, r.Header.Get("Range"))
		}
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	d := &Downloader{
		Upstreams:  Upstreams{S3: S3Config{Endpoint: srv.URL, Region: "us-east-1", AccessKey: "AKIAFAKE", SecretKey: "fake-secret"}},
		RetryDelay: time.Millisecond,
	}
	cl, err := d.s3Client()
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.MakeBucket(t.Context(), "weights", minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		t.Fatal(err)
	}
	return d, cl, ranges
}

// rangeLog records the Range header of every GET, by path.
type rangeLog struct {
	mu sync.Mutex
	m  map[string][]string
}

func (l *rangeLog) add(path, rng string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string][]string{}
	}
	l.m[path] = append(l.m[path], rng)
}

func (l *rangeLog) get(path string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.m[path])
}

func put(t *testing.T, cl *minio.Client, key string, data []byte, sha string) {
	t.Helper()
	opts := minio.PutObjectOptions{}
	if sha != "" {
		opts.UserMetadata = map[string]string{"sha256": sha}
	}
	if _, err := cl.PutObject(t.Context(), "weights", key, bytes.NewReader(data), int64(len(data)), opts); err != nil {
		t.Fatal(err)
	}
}

func weights(n int, seed uint64) []byte { return weightsrv.RandomBytes(n, seed) }

func TestFetchS3(t *testing.T) {
	d, cl, _ := s3Fake(t)
	one := weights(150_000, 30)
	a, b := weights(40_000, 31), weights(20_000, 32)
	put(t, cl, "single/model.gguf", one, weightsrv.SHA256(one))
	put(t, cl, "set/a.gguf", a, weightsrv.SHA256(a))
	put(t, cl, "set/sub/b.gguf", b, "") // no sum recorded: fetched unverified
	put(t, cl, "other/c.gguf", []byte("not in the set"), "")

	dir := t.TempDir()
	if _, err := fetch(t, d, "s3://weights/single/model.gguf", dir, nil); err != nil {
		t.Fatal(err)
	}
	checkDir(t, dir, map[string][]byte{"model.gguf": one})

	p := &Progress{}
	dir = t.TempDir()
	if _, err := fetch(t, d, "s3://weights/set/", dir, p); err != nil {
		t.Fatal(err)
	}
	checkDir(t, dir, map[string][]byte{"a.gguf": a, "sub/b.gguf": b})
	if p.Total() != 60_000 || p.Bytes() != 60_000 {
		t.Errorf("progress %d/%d, want 60000/60000", p.Bytes(), p.Total())
	}
	if !IsSet("s3://weights/set/") || IsSet("s3://weights/set/a.gguf") {
		t.Error("IsSet")
	}

	if _, err := fetch(t, d, "s3://weights/missing.gguf", t.TempDir(), nil); err == nil || !IsPermanent(err) {
		t.Errorf("missing object: %v, want a permanent error", err)
	}
	if _, err := fetch(t, d, "s3://weights/nothing-here/", t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), "no object") {
		t.Errorf("empty prefix: %v", err)
	}
}

// TestFetchS3WrongSum: an object whose recorded sha256 does not match its
// bytes never lands.
func TestFetchS3WrongSum(t *testing.T) {
	d, cl, _ := s3Fake(t)
	w := weights(10_000, 33)
	put(t, cl, "bad/w.gguf", w, weightsrv.SHA256([]byte("something else")))
	dir := t.TempDir()
	if _, err := fetch(t, d, "s3://weights/bad/w.gguf", dir, nil); !errors.Is(err, ErrVerify) {
		t.Fatalf("error %v, want a sha256 mismatch", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "w.gguf")); err == nil {
		t.Error("w.gguf landed although it failed verification")
	}
}

// TestFetchS3Resume leaves a partial file behind, as a killed process
// would: the next fetch asks S3 for the rest only.
func TestFetchS3Resume(t *testing.T) {
	d, cl, ranges := s3Fake(t)
	w := weights(90_000, 34)
	put(t, cl, "r/w.gguf", w, weightsrv.SHA256(w))
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ".w.gguf.partial"), w[:33_333], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := fetch(t, d, "s3://weights/r/w.gguf", dir, nil); err != nil {
		t.Fatal(err)
	}
	checkDir(t, dir, map[string][]byte{"w.gguf": w})
	if got := ranges.get("/weights/r/w.gguf"); !slices.Equal(got, []string{"bytes=33333-"}) {
		t.Errorf("GETs of the object with ranges %q, want one from byte 33333", got)
	}

	// Killed after the last byte, before the rename: nothing is asked again.
	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ".w.gguf.partial"), w, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := fetch(t, d, "s3://weights/r/w.gguf", dir, nil); err != nil {
		t.Fatal(err)
	}
	checkDir(t, dir, map[string][]byte{"w.gguf": w})
	if got := ranges.get("/weights/r/w.gguf"); len(got) != 1 {
		t.Errorf("GETs of the object with ranges %q, want no new one", got)
	}
}
