package mirror

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/pki"
	"github.com/llmgw/llmgw/testkit/hffake"
)

// syncBuffer is a log destination the server's goroutines may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServer runs a mirror on loopback port 0 until the test ends.
func startServer(t *testing.T, opts Options) (*Server, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	opts.BytesAddr, opts.ManageAddr = "127.0.0.1:0", "127.0.0.1:0"
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(c) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return srv, logs
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestManageWithoutTLSWarns(t *testing.T) {
	_, logs := startServer(t, Options{})
	waitFor(t, "the start log", func() bool { return strings.Contains(logs.String(), "mirror serving") })
	line := ""
	for l := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(l, "management listener has no TLS") {
			line = l
		}
	}
	if !strings.Contains(line, "level=WARN") {
		t.Fatalf("no WARN that the management port is open; log:\n%s", logs.String())
	}
}

func TestManageTLSFlagsTogether(t *testing.T) {
	_, err := New(Options{Dir: t.TempDir(), BytesAddr: "127.0.0.1:0", ManageAddr: "127.0.0.1:0", TLSCA: "ca.pem"})
	if err == nil || !strings.Contains(err.Error(), "together") {
		t.Fatalf("only --tls-ca: %v, want an error asking for all three", err)
	}
}

// TestManageMTLS: with the cluster CA the management listener refuses a
// client without a certificate and serves one with a node certificate,
// while the bytes listener stays plain HTTP.
func TestManageMTLS(t *testing.T) {
	dir := t.TempDir()
	caDir := filepath.Join(dir, "ca")
	caCert, _, err := pki.InitCA(caDir, pki.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := pki.IssueServer(caDir, "mirror", []string{"127.0.0.1"}, dir, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	clientCert, clientKey, err := pki.IssueNode(caDir, "control-plane", filepath.Join(dir, "client"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srv, logs := startServer(t, Options{TLSCA: caCert, TLSCert: cert, TLSKey: key})
	url := "https://" + srv.ManageAddr() + "/v1/holdings"

	noCert, err := pki.ClientTLS(caCert, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: noCert}}).Get(url); err == nil {
		resp.Body.Close()
		t.Fatalf("a client without a certificate got %s", resp.Status)
	}

	withCert, err := pki.ClientTLS(caCert, clientCert, clientKey, "")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: withCert}}).Get(url)
	if err != nil {
		t.Fatalf("a client with a node certificate: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("a client with a node certificate: %s", resp.Status)
	}

	// Someone else's CA is refused too.
	if _, _, err := pki.InitCA(filepath.Join(dir, "other"), pki.CAOptions{}); err != nil {
		t.Fatal(err)
	}
	otherCert, otherKey, err := pki.IssueNode(filepath.Join(dir, "other"), "intruder", filepath.Join(dir, "intruder"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := pki.ClientTLS(caCert, otherCert, otherKey, "")
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: foreign}}).Get(url); err == nil {
		resp.Body.Close()
		t.Fatalf("a client with a certificate from another CA got %s", resp.Status)
	}

	if resp, err := http.Get("http://" + srv.BytesAddr() + "/m/v/"); err != nil {
		t.Fatalf("bytes listener: %v", err)
	} else {
		resp.Body.Close()
	}
	if strings.Contains(logs.String(), "has no TLS") {
		t.Error("the open-port warning was logged although mTLS is on")
	}
}

func doJSON(t *testing.T, method, url string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil && err != io.EOF {
			t.Fatalf("%s %s: decoding: %v", method, url, err)
		}
	}
	return resp.StatusCode
}

// TestManageDownloadLifecycle: a download started over the management API
// reports progress, lands as a complete holding that the bytes listener
// serves, a second start while one runs is refused, and a delete removes it.
func TestManageDownloadLifecycle(t *testing.T) {
	hub := hffake.New(t)
	w := weights(500_000, 40)
	hub.AddFile("org/m", "main", "w.gguf", w, true)
	hub.AddFile("org/broken", "main", "w.gguf", weights(1000, 41), true)
	srv, _ := startServer(t, Options{Fetcher: hfFetcher(hub)})
	api := "http://" + srv.ManageAddr()

	var st DownloadStatus
	if code := doJSON(t, "POST", api+"/v1/downloads", DownloadRequest{Model: "m", Version: "v1", Source: "hf:org/m/w.gguf"}, &st); code != http.StatusAccepted {
		t.Fatalf("start: %d", code)
	}
	waitFor(t, "the download to complete", func() bool {
		doJSON(t, "GET", api+"/v1/downloads/m/v1", nil, &st)
		return st.State != StateDownloading
	})
	if st.State != StateComplete || st.Bytes != int64(len(w)) || st.Total == nil || *st.Total != int64(len(w)) || st.RateBytesPerSecond <= 0 {
		t.Fatalf("status %+v", st)
	}

	var hs []Holding
	doJSON(t, "GET", api+"/v1/holdings", nil, &hs)
	if len(hs) != 1 || !hs[0].Complete || hs[0].Downloading || hs[0].Bytes != int64(len(w)) || len(hs[0].Files) != 1 {
		t.Fatalf("holdings %+v", hs)
	}
	resp, body := get(t, "http://"+srv.BytesAddr()+"/m/v1/w.gguf", nil)
	if resp.StatusCode != 200 || !bytes.Equal(body, w) {
		t.Fatalf("bytes listener: %d, %d bytes", resp.StatusCode, len(body))
	}
	get(t, "http://"+srv.BytesAddr()+"/m/v1/w.gguf", map[string]string{"Range": "bytes=0-99"})
	get(t, "http://"+srv.BytesAddr()+"/m/v1/nope.gguf", nil)
	_, metrics := get(t, api+"/metrics", nil)
	for _, want := range []string{
		`llmgw_mirror_served_bytes_total{model="m",version="v1"} 500100`,
		`llmgw_mirror_fetched_bytes_total 500000`,
		`llmgw_mirror_requests_total{code="200",kind="file"} 1`,
		`llmgw_mirror_requests_total{code="206",kind="file"} 1`,
		`llmgw_mirror_requests_total{code="404",kind="file"} 1`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %s:\n%s", want, metrics)
		}
	}

	// A failed download says why.
	doJSON(t, "POST", api+"/v1/downloads", DownloadRequest{Model: "b", Version: "v1", Source: "hf:org/broken/missing.gguf"}, nil)
	waitFor(t, "the failing download to end", func() bool {
		doJSON(t, "GET", api+"/v1/downloads/b/v1", nil, &st)
		return st.State != StateDownloading
	})
	if st.State != StateFailed || !strings.Contains(st.LastError, "404") {
		t.Errorf("failed download: %+v", st)
	}

	for _, tc := range []struct {
		req  DownloadRequest
		code int
	}{
		{DownloadRequest{Model: "../etc", Version: "v", Source: "hf:a/b/c"}, 400},
		{DownloadRequest{Model: "m", Version: "v", Source: ""}, 400},
	} {
		if code := doJSON(t, "POST", api+"/v1/downloads", tc.req, nil); code != tc.code {
			t.Errorf("start %+v: %d, want %d", tc.req, code, tc.code)
		}
	}

	if code := doJSON(t, "DELETE", api+"/v1/holdings/m/v1", nil, nil); code != http.StatusNoContent {
		t.Fatalf("delete: %d", code)
	}
	if code := doJSON(t, "DELETE", api+"/v1/holdings/m/v1", nil, nil); code != http.StatusNotFound {
		t.Errorf("second delete: %d, want 404", code)
	}
	hs = nil
	doJSON(t, "GET", api+"/v1/holdings", nil, &hs)
	for _, h := range hs {
		if h.Model == "m" {
			t.Errorf("m still held after delete: %+v", h)
		}
	}
}

// TestManageRefusesSecondDownload: while a download of model/version runs
// (held back by a connection that stalls until the stall timeout ends it),
// another is refused and deleting the version is refused.
func TestManageRefusesSecondDownload(t *testing.T) {
	hub := hffake.New(t)
	w := weights(100_000, 42)
	hub.AddFile("org/m", "main", "w.gguf", w, true)
	hub.StallAfter(w, 10, 1)
	f := hfFetcher(hub)
	f.StallTimeout = 2 * time.Second
	srv, _ := startServer(t, Options{Fetcher: f})
	api := "http://" + srv.ManageAddr()
	req := DownloadRequest{Model: "m", Version: "v", Source: "hf:org/m/w.gguf"}
	if code := doJSON(t, "POST", api+"/v1/downloads", req, nil); code != http.StatusAccepted {
		t.Fatalf("start: %d", code)
	}
	if code := doJSON(t, "POST", api+"/v1/downloads", req, nil); code != http.StatusConflict {
		t.Errorf("second start: %d, want 409", code)
	}
	waitFor(t, "the marker", func() bool {
		c, err := NewStore(srv.opts.Dir)
		if err != nil {
			return false
		}
		complete, err := c.Complete("m", "v")
		return err == nil && !complete
	})
	if code := doJSON(t, "DELETE", api+"/v1/holdings/m/v", nil, nil); code != http.StatusConflict {
		t.Errorf("delete while downloading: %d, want 409", code)
	}
	var st DownloadStatus
	waitFor(t, "the download to complete", func() bool {
		doJSON(t, "GET", api+"/v1/downloads/m/v", nil, &st)
		return st.State == StateComplete
	})
}
